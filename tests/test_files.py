"""Directories written whole: exports and averages never half-written,
never mixed, never left behind."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import tensorflow as tf

from helpers.processes import REPO
from t2t_repro.averaging import average_of_last
from t2t_repro.checkpoints import checkpoint_step, latest_checkpoint, listed_checkpoints
from t2t_repro.config import ConfigError
from t2t_repro.files import directory_written_whole, write_atomically
from t2t_repro.run_dir import AVERAGE_DIRNAME, AVERAGED_FILENAME, EVAL_DIRNAME


def _files(directory):
    return sorted(os.listdir(directory))


def test_two_writers_of_one_file_each_write_it_whole(tmp_path):
    path = str(tmp_path / "result.json")
    payloads = ["a" * 300_000, "b" * 200_000]
    failures = []

    def write(data):
        try:
            for _ in range(100):
                write_atomically(path, data)
        except Exception as error:  # noqa: BLE001  reported below
            failures.append(error)

    writers = [threading.Thread(target=write, args=(data,)) for data in payloads]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert failures == []
    assert open(path).read() in payloads
    assert _files(tmp_path) == ["result.json"]


def test_a_failed_file_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "result.json")
    write_atomically(path, "old")
    with pytest.raises(TypeError):
        write_atomically(path, 7)
    assert _files(tmp_path) == ["result.json"]
    assert open(path).read() == "old"


def test_the_first_of_two_writers_wins_and_the_other_leaves_nothing(tmp_path):
    destination = str(tmp_path / "7")
    with pytest.raises(FileExistsError, match="another process meanwhile"):
        with directory_written_whole(destination) as second:
            with directory_written_whole(destination) as first:
                assert first != second
                (tmp_path / os.path.basename(first) / "a").write_text("1")
            (tmp_path / os.path.basename(second) / "b").write_text("2")
    assert _files(tmp_path) == ["7"]
    assert _files(destination) == ["a"]
    with pytest.raises(FileExistsError, match="7 exists"):
        with directory_written_whole(destination):
            pass


def test_a_failed_write_leaves_nothing(tmp_path):
    destination = str(tmp_path / "out")
    with pytest.raises(RuntimeError):
        with directory_written_whole(destination) as partial:
            (tmp_path / os.path.basename(partial) / "half").write_text("x")
            raise RuntimeError("disk full")
    assert _files(tmp_path) == []


def test_sigterm_inside_the_block_leaves_nothing(tmp_path):
    script = (
        "import os, signal, sys\n"
        "from t2t_repro.files import directory_written_whole, write_atomically\n"
        "with directory_written_whole(sys.argv[1]) as partial:\n"
        "    open(os.path.join(partial, 'half'), 'w').write('x')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    open(os.path.join(partial, 'never'), 'w').write('x')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-2000:]
    assert _files(tmp_path) == []


def test_a_killed_writers_directory_is_removed_by_the_next(tmp_path):
    """A writer's directory holds a lock that dies with it: a live one's
    (another process, holding its lock) stays, a dead one's goes."""
    live = tmp_path / ".out.partial-otherhost-1-0a1b2c3d"
    dead = tmp_path / ".out.partial-otherhost-2-0a1b2c3d"
    for partial in (live, dead):
        partial.mkdir()
        (partial / ".writer.lock").write_bytes(b"")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; "
            "lock = open(sys.argv[1], 'rb'); fcntl.flock(lock, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)",
            str(live / ".writer.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with directory_written_whole(str(tmp_path / "out")):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert _files(tmp_path) == [live.name, "out"]
    assert _files(tmp_path / "out") == []  # no lock file left inside


def test_average_last_replaces_only_averages_it_wrote(toy_run_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(toy_run_dir, run)
    average_dir = run / AVERAGE_DIRNAME
    average_dir.mkdir()
    (average_dir / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not an average of the last"):
        average_of_last(str(run), 1)
    assert _files(average_dir) == ["notes.txt"]
    shutil.rmtree(average_dir)
    output, paths = average_of_last(str(run), 1)
    written = json.loads((average_dir / AVERAGED_FILENAME).read_text())
    assert written == {
        "select": "last",
        "count": 1,
        "checkpoints": [os.path.basename(paths[0])],
    }
    assert latest_checkpoint(output) is not None
    # Current: kept as it is. Outdated: replaced.
    (average_dir / "marker").write_text("")
    with pytest.raises(ConfigError):  # no longer only an average's files
        average_of_last(str(run), 2)
    (average_dir / "marker").unlink()
    # t2t-eval's scores of the average (docs/training.md) keep it one.
    (average_dir / EVAL_DIRNAME).mkdir()
    (average_dir / EVAL_DIRNAME / "test.step9.json").write_text("{}")
    (average_dir / f"{EVAL_DIRNAME}_bf16").mkdir()
    before = os.stat(average_dir / AVERAGED_FILENAME).st_ino
    average_of_last(str(run), 1)
    assert os.stat(average_dir / AVERAGED_FILENAME).st_ino == before
    _, paths = average_of_last(str(run), 2)
    assert json.loads((average_dir / AVERAGED_FILENAME).read_text())["checkpoints"] == [
        os.path.basename(p) for p in paths
    ]
    # Replaced by an average ending at the same step: the scores, named by
    # that step, were the other average's, and go with it.
    assert EVAL_DIRNAME not in _files(average_dir)
    # Replaced by one ending at a later step: kept beside its own.
    (average_dir / EVAL_DIRNAME).mkdir()
    (average_dir / EVAL_DIRNAME / "test.step9.json").write_text("{}")
    newest = paths[-1]
    later = f"{newest.rsplit('-', 1)[0]}-{checkpoint_step(newest) + 10}"
    for path in tf.io.gfile.glob(newest + ".*"):
        shutil.copy(path, later + path[len(newest) :])
    tf.compat.v1.train.update_checkpoint_state(
        str(run),
        later,
        all_model_checkpoint_paths=[*listed_checkpoints(str(run)), later],
    )
    average_of_last(str(run), 2)
    assert (average_dir / EVAL_DIRNAME / "test.step9.json").read_text() == "{}"
    assert not [name for name in _files(run) if ".partial" in name]


def test_an_existing_average_directory_is_refused_before_reading(
    toy_run_dir, tmp_path, monkeypatch
):
    from t2t_repro import averaging

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    monkeypatch.setattr(averaging, "check_intact", pytest.fail)
    with pytest.raises(FileExistsError, match="taken exists"):
        averaging.average_checkpoints(toy_run_dir, str(tmp_path / "taken"), 1)


@pytest.mark.parametrize("copy", ["average", "best"])
def test_training_in_an_average_or_best_directory_is_refused(
    toy_run_dir, tmp_path, copy
):
    """They hold a run's checkpoints without its optimizer or step: a
    trainer there would start at step 0 and rotate them away."""
    import shutil

    from t2t_repro.run_dir import BEST_DIRNAME, SCORES_FILENAME
    from t2t_repro.training.prepare import check_not_a_copy_of_a_run

    run = tmp_path / "run"
    shutil.copytree(toy_run_dir, run)
    check_not_a_copy_of_a_run(str(run))
    if copy == "average":
        directory, name = average_of_last(str(run), 1)[0], AVERAGED_FILENAME
    else:
        directory, name = str(run / BEST_DIRNAME), SCORES_FILENAME
        os.makedirs(directory)
        (run / BEST_DIRNAME / SCORES_FILENAME).write_text("{}")
    with pytest.raises(
        ConfigError, match=f"^{directory}: .*\\({name}\\), not a training run"
    ):
        check_not_a_copy_of_a_run(directory)
