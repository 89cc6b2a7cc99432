"""An export interrupted midway (kill -9, SIGTERM, a full disk) leaves no
half export where the finished one goes and the versions already there
whole, and `--average_last` never leaves MODEL_DIR/average missing or half
written while it replaces it (docs/reliability.md, "Files are never
half-written")."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess

import pytest
import tensorflow as tf

from helpers.processes import start_python
from t2t_repro import averaging
from t2t_repro.averaging import average_of_last
from t2t_repro.checkpoints import check_intact, latest_checkpoint
from t2t_repro.files import directory_written_whole
from t2t_repro.run_dir import AVERAGE_DIRNAME, AVERAGED_FILENAME

# `t2t-export FLAGS` interrupted by HOW once it has written part of the
# SavedModel into its temporary directory (before the rest, the warm-up
# records and the rename): the point where a real export spends its time.
_EXPORT_INTERRUPTED = r"""
import errno, os, signal, sys, time
import tensorflow as tf
from t2t_repro.cli.__main__ import main

how = sys.argv.pop(1)


def half_a_saved_model(module, export_dir, *args, **kwargs):
    path = os.path.join(export_dir, "saved_model.pb")
    with open(path, "wb") as handle:
        handle.write(b"half")
    if how == "kill -9":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "SIGTERM":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # the handler runs at once
    else:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


tf.saved_model.save = half_a_saved_model
main()
"""

# How each interruption ends t2t-export.
_ENDS = {
    "kill -9": -signal.SIGKILL,
    "SIGTERM": 128 + signal.SIGTERM,
    "full disk": 2,
}


def _digests(directory):
    """{path relative to `directory`: SHA-256} of every file below it."""
    return {
        os.path.relpath(os.path.join(parent, name), directory): hashlib.sha256(
            open(os.path.join(parent, name), "rb").read()
        ).hexdigest()
        for parent, _, names in os.walk(directory)
        for name in names
    }


@pytest.fixture(scope="module")
def interrupted_exports(toy_run_dir, tmp_path_factory):
    """{how: (export_dir, exit status, stderr, version 1's digests before)}
    of one t2t-export of version 2 per way to interrupt it, into an
    export_dir that already holds version 1; run at once."""
    started = {}
    for how in _ENDS:
        export_dir = tmp_path_factory.mktemp("exports")
        # Version 1 as TF Serving may be serving it.
        existing = export_dir / "1"
        (existing / "variables").mkdir(parents=True)
        (existing / "saved_model.pb").write_bytes(b"version 1's graph")
        (existing / "variables" / "variables.index").write_bytes(b"its weights")
        process = start_python(
            [
                "-c",
                _EXPORT_INTERRUPTED,
                how,
                "export",
                f"--model_dir={toy_run_dir}",
                f"--export_dir={export_dir}",
                "--version=2",
            ]
        )
        started[how] = (export_dir, process, _digests(existing))
    outcomes = {}
    for how, (export_dir, process, before) in started.items():
        try:
            _, stderr = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        outcomes[how] = (export_dir, process.returncode, stderr, before)
    return outcomes


@pytest.mark.parametrize("how", list(_ENDS))
def test_an_interrupted_export_leaves_no_version_and_the_others_whole(
    interrupted_exports, how
):
    export_dir, status, stderr, before = interrupted_exports[how]
    assert status == _ENDS[how], stderr[-3000:]
    # No half version 2 where TF Serving looks; version 1 byte for byte.
    versions = [name for name in os.listdir(export_dir) if not name.startswith(".")]
    assert versions == ["1"]
    assert _digests(export_dir / "1") == before
    partials = [name for name in os.listdir(export_dir) if name.startswith(".")]
    if how == "kill -9":
        # Its temporary directory, holding the half SavedModel, stays until
        # the next writer of version 2 removes it (its writer is dead).
        [partial] = partials
        assert partial.startswith(".2.partial-")
        assert (export_dir / partial / "saved_model.pb").read_bytes() == b"half"
        with directory_written_whole(str(export_dir / "2")) as writing:
            (export_dir / os.path.basename(writing) / "saved_model.pb").write_bytes(
                b"whole"
            )
        assert sorted(os.listdir(export_dir)) == ["1", "2"]
    else:
        assert partials == []
    if how == "full disk":
        # One line naming the file it could not write.
        assert "Traceback" not in stderr
        assert re.fullmatch(
            rf"t2t-export: error: {export_dir}/\.2\.partial-[^/]+/saved_model\.pb: "
            "No space left on device",
            stderr.strip().splitlines()[-1],
        ), stderr[-3000:]


def test_an_average_being_replaced_is_always_whole_at_its_name(
    toy_run_dir, tmp_path, monkeypatch
):
    """A kill -9 stops a process between two file-system calls: the state
    on disk before each call of the replace is what a kill there leaves,
    and MODEL_DIR/average must hold a whole average in every one."""
    run = tmp_path / "run"
    shutil.copytree(toy_run_dir, run)
    average = run / AVERAGE_DIRNAME
    average_of_last(str(run), 1)
    states = []

    def observed(call):
        def observing(*args, **kwargs):
            states.append((call.__name__, args, _whole_average(average)))
            return call(*args, **kwargs)

        return observing

    for name in ("rename", "rmtree", "remove"):
        monkeypatch.setattr(tf.io.gfile, name, observed(getattr(tf.io.gfile, name)))
    monkeypatch.setattr(averaging.shutil, "copyfile", observed(shutil.copyfile))
    average_of_last(str(run), 2)
    monkeypatch.undo()
    assert len(states) >= 3
    assert [state for state in states if state[2] is None] == []
    # Where a kill would leave the old average, the new one, nothing else.
    assert {state[2] for state in states} <= {1, 2}
    assert _whole_average(average) == 2
    check_intact(str(average), latest_checkpoint(str(average)))


def _whole_average(directory):
    """How many checkpoints the average in `directory` says it averages,
    if it is there whole (its record, its checkpoint list and the files of
    the checkpoint the list names); else None. Plain file reads only."""
    try:
        with open(directory / AVERAGED_FILENAME) as handle:
            count = json.load(handle)["count"]
        with open(directory / "checkpoint") as handle:
            newest = handle.readline().split('"')[1]
    except (OSError, ValueError, IndexError, KeyError):
        return None
    for suffix in (".index", ".data-00000-of-00001"):
        if not os.path.isfile(directory / (newest + suffix)):
            return None
    return count
