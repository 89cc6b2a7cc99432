"""A kill -9 inside each stage of a checkpoint save, and inside the write
of a run file, leaves the previous checkpoint and the run files whole:
they load, the run resumes from them, and its next save is not disturbed
by what the kill left (docs/reliability.md, "kill -9 at any moment" and
"Files are never half-written"; that a resumed run ends with an
uninterrupted one's weights is tests/training/test_resume.py's). A kill
while the save deletes a checkpoint beyond --keep_checkpoints leaves
every checkpoint the run lists whole, and the resumed run removes the
data of the one being deleted.

Each kill lands where it is aimed: a hook in the trainer's process kills
it at that point of TensorFlow's save (or of `write_atomically`), and the
test checks what that stage leaves behind."""

import shutil
import signal

import numpy as np
import pytest

from helpers.processes import run_python
from helpers.toy_run import SMALL, toy_trainer
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.checkpoints import (
    check_intact,
    latest_checkpoint,
    listed_checkpoints,
    load_model,
)
from t2t_repro.run_dir import RunDir

# In the toy run's directory, at step 2: killed at STAGE of writing the
# checkpoint of step 4 (the weights it saves do not matter, so it does not
# train to them), or at STAGE "training.json" of a restart that rewrites
# training.json (other options, allowed).
_KILLED_INSIDE = r"""
import os, signal, sys
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.lib.io import file_io
from tensorflow.python.ops import gen_io_ops
from helpers.toy_run import toy_trainer

model_dir, stage = sys.argv[1:]


def kill_at(module, name, aimed):
    original = getattr(module, name)

    def hooked(*args, **kwargs):
        if aimed(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(module, name, hooked)


def step_4_list(source, destination, overwrite=False):
    return destination.endswith("/checkpoint") and "ckpt-4" in open(source).read()


if stage == "training.json":
    kill_at(tf.io.gfile, "rename", lambda source, destination, **_: (
        destination.endswith("/training.json")))
    toy_trainer(model_dir, 4, checkpoint_every=2, batch_tokens=256,
                allow_option_changes=True)
else:
    options = {}
    if stage == "shards written, not merged":
        kill_at(gen_io_ops, "merge_v2_checkpoints",
                lambda prefixes, destination, **_: b"ckpt-4" in destination.numpy())
    elif stage == "merged, not listed":
        kill_at(checkpoint_management.CheckpointManager, "_record_state",
                lambda manager: manager.latest_checkpoint.endswith("ckpt-4"))
    elif stage == "list written, not renamed":
        kill_at(file_io, "rename", step_4_list)
    elif stage == "ckpt-2 half deleted":
        # Its .index deleted, its .data not yet (TensorFlow deletes the
        # checkpoints beyond --keep_checkpoints after listing the new one).
        kill_at(checkpoint_management, "_delete_file_if_exists",
                lambda pattern: pattern.endswith("ckpt-2.data-?????-of-?????"))
        options["keep_checkpoints"] = 1
    trainer = toy_trainer(model_dir, 4, checkpoint_every=2, **options)
    trainer.global_step.assign(4)
    trainer._save()
print("not killed", file=sys.stderr)
"""


@pytest.fixture(scope="module")
def run_at_step_2(tmp_path_factory):
    """A toy run to step 4 stopped at its checkpoint of step 2; its
    weights."""
    directory = tmp_path_factory.mktemp("run_at_step_2")
    trainer = toy_trainer(directory, 2, checkpoint_every=2)
    assert trainer.train() == 2
    return directory, [w.numpy() for w in trainer.model.weights]


@pytest.mark.parametrize(
    "stage, left_behind",
    [
        ("shards written, not merged", "ckpt-4_temp"),
        pytest.param("merged, not listed", "ckpt-4.index", marks=pytest.mark.slow),
        pytest.param(
            "list written, not renamed", "checkpoint.tmp", marks=pytest.mark.slow
        ),
        ("training.json", "training.json.tmp"),
    ],
)
def test_a_kill_inside_a_save_leaves_the_last_checkpoint_and_run_files_whole(
    tmp_path, run_at_step_2, stage, left_behind
):
    directory, weights = run_at_step_2
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    killed = run_python(["-c", _KILLED_INSIDE, str(tmp_path), stage])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    # Killed where aimed: that stage's unfinished work is there.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(left_behind)]
    previous = str(tmp_path / "ckpt-2")
    assert latest_checkpoint(str(tmp_path)) == previous
    check_intact(str(tmp_path), previous)  # every tensor, checksummed
    assert load_model(str(tmp_path))[2] == previous
    run_dir = RunDir(str(tmp_path))
    assert run_dir.load_config() == SMALL
    assert run_dir.load_vocabulary() == tiny_vocab()
    # The options the run was started with, not the half-written new ones.
    assert run_dir.load_training_options()["batch_tokens"] == 128
    # The same command resumes from it, and what the kill left does not
    # get in the way of the next save of step 4.
    resumed = toy_trainer(tmp_path, 4, checkpoint_every=2)
    assert resumed.step == 2
    for want, got in zip(weights, resumed.model.weights):
        np.testing.assert_array_equal(got.numpy(), want)
    resumed.global_step.assign(4)
    resumed._save()
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")
    check_intact(str(tmp_path), str(tmp_path / "ckpt-4"))
    assert resumed.train() == 4  # at its last step: lets go of the lock


def _killed_while_deleting_ckpt_2(tmp_path, run_at_step_2):
    """The save of step 4 with --keep_checkpoints=1 deletes ckpt-2 once
    ckpt-4 is listed: the run killed halfway through that deletion."""
    directory, _ = run_at_step_2
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    killed = run_python(["-c", _KILLED_INSIDE, str(tmp_path), "ckpt-2 half deleted"])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    # Killed where aimed: ckpt-2's index deleted, its data not.
    assert not (tmp_path / "ckpt-2.index").exists()
    assert (tmp_path / "ckpt-2.data-00000-of-00001").exists()


def test_a_kill_while_an_old_checkpoint_is_deleted_leaves_every_listed_one_whole(
    tmp_path, run_at_step_2
):
    """Every checkpoint the run's list names must still load
    (docs/reliability.md: "every checkpoint left can be loaded";
    t2t-average and --average_last read them)."""
    _killed_while_deleting_ckpt_2(tmp_path, run_at_step_2)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")
    for checkpoint in listed_checkpoints(str(tmp_path)):
        check_intact(str(tmp_path), checkpoint)


def test_resuming_removes_the_data_of_the_checkpoint_being_deleted(
    tmp_path, run_at_step_2
):
    """The run was killed in its last save, so no later save would sweep
    ckpt-2's data away: resuming does."""
    _killed_while_deleting_ckpt_2(tmp_path, run_at_step_2)
    resumed = toy_trainer(tmp_path, 4, checkpoint_every=2, keep_checkpoints=1)
    assert resumed.step == 4
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == [
        "ckpt-4.data-00000-of-00001",
        "ckpt-4.index",
    ]
    assert resumed.train() == 4  # at its last step: lets go of the lock
