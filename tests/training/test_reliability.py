"""Nothing lost to a NaN, a second trainer or a kill: each test removes a
protection's reason to exist and checks the protection."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from processes import REPO, quiet_environment
from t2t_repro.checkpoints import RunDir
from t2t_repro.config import ConfigError
from t2t_repro.training import TrainingError
from t2t_repro.training import trainer as trainer_module
from toy_run import toy_trainer


def _poison_losses(monkeypatch, steps):
    """Makes the loss NaN in the given (1-based) steps of the next trainer
    whose step is compiled; returns a dict to put that trainer in."""
    holder = {}
    original = trainer_module.smoothed_cross_entropy_stats

    def poisoned(*args):
        loss_sum, count, correct = original(*args)
        this_step = holder["trainer"].global_step + 1
        bad = tf.reduce_any(tf.equal(this_step, tf.constant(steps, tf.int64)))
        return (tf.where(bad, tf.constant(np.nan, loss_sum.dtype), loss_sum),
                count, correct)

    monkeypatch.setattr(trainer_module, "smoothed_cross_entropy_stats",
                        poisoned)
    return holder


def _checkpoint_weights(run_dir, step):
    model, _, _ = RunDir(str(run_dir)).load_model(
        str(run_dir / f"ckpt-{step}"))
    return [w.numpy() for w in model.weights]


def _nonfinite_steps_logged(directory):
    total = 0.0
    for path in tf.io.gfile.glob(str(directory / "train" / "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "nonfinite_steps":
                    total += float(tf.make_ndarray(value.tensor))
    return total


def test_a_nonfinite_step_applies_no_update_and_is_counted(tmp_path,
                                                           monkeypatch):
    holder = _poison_losses(monkeypatch, [3])
    trainer = holder["trainer"] = toy_trainer(tmp_path, 6, checkpoint_every=1,
                                              log_every=3)
    assert trainer.train() == 6
    # Six batches consumed, five updates.
    assert int(trainer.optimizer.iterations.numpy()) == 5
    assert all(np.isfinite(w.numpy()).all() for w in trainer.model.weights)
    after_2, after_3, after_4 = (_checkpoint_weights(tmp_path, step)
                                 for step in (2, 3, 4))
    for before, skipped in zip(after_2, after_3):
        np.testing.assert_array_equal(skipped, before)
    assert any((a != b).any() for a, b in zip(after_3, after_4))
    assert _nonfinite_steps_logged(tmp_path) == 1.0


def test_nonfinite_steps_in_a_row_stop_at_the_last_good_checkpoint(
        tmp_path, monkeypatch):
    holder = _poison_losses(monkeypatch, list(range(4, 20)))
    trainer = holder["trainer"] = toy_trainer(
        tmp_path, 19, checkpoint_every=2, max_nonfinite=3)
    with pytest.raises(TrainingError, match=(
            r"step 6: the loss or gradient norm was not finite for 3 steps "
            r"in a row .* the last good checkpoint is .*ckpt-4\.")):
        trainer.train()
    assert RunDir(str(tmp_path)).latest_checkpoint().endswith("ckpt-4")
    for step in (2, 4):
        assert all(np.isfinite(w).all()
                   for w in _checkpoint_weights(tmp_path, step))


def test_weights_that_are_not_finite_are_never_saved(tmp_path):
    trainer = toy_trainer(tmp_path, 1)
    trainer.train()
    trainer.model.weights[0].assign(
        tf.fill(trainer.model.weights[0].shape, np.nan))
    trainer.global_step.assign_add(1)
    with pytest.raises(TrainingError, match=(
            r"step 2: the weights are not finite, so they were not saved; "
            r"the last good checkpoint is .*ckpt-1$")):
        trainer._save()
    assert RunDir(str(tmp_path)).latest_checkpoint().endswith("ckpt-1")


def test_a_second_trainer_on_one_model_dir_is_refused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from t2t_repro.checkpoints import RunDir; "
         "RunDir(sys.argv[1]).lock_for_training(); print('locked', "
         "flush=True); time.sleep(600)", str(tmp_path)],
        cwd=REPO, env=quiet_environment(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(ConfigError, match=(
                rf"train.lock: another trainer \(pid {holder.pid} on "
                rf"{socket.gethostname()}\) is using this model_dir")):
            toy_trainer(tmp_path, 1)
        assert not (tmp_path / "ckpt-1.index").exists()
    finally:
        holder.kill()  # SIGKILL: its lock file stays behind
        holder.wait()
    # The holder is dead: its stale lock is taken over.
    assert json.loads((tmp_path / "train.lock").read_text())["pid"] == (
        holder.pid)
    trainer = toy_trainer(tmp_path, 1)
    assert json.loads((tmp_path / "train.lock").read_text()) == {
        "pid": os.getpid(), "host": socket.gethostname()}
    assert trainer.train() == 1
    # Released when training ends.
    assert not (tmp_path / "train.lock").exists()
