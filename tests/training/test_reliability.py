"""Nothing lost to a NaN or infinite loss, a second trainer, a kill or a
damaged checkpoint: each test removes a protection's reason to exist and
checks the protection."""

import json
import logging
import os
import random
import shutil
import signal
import socket
import time

import numpy as np
import pytest
import tensorflow as tf

from helpers.processes import start_python, wait_for_line
from helpers.run_inspection import checkpoint_weights, nonfinite_steps_logged
from helpers.toy_run import toy_trainer
from helpers.train_command import MULTI30K_VAL, run_train, start_train
from t2t_repro.checkpoints import holds, latest_checkpoint, load_model, model_checkpoint
from t2t_repro.config import ConfigError
from t2t_repro.training import TrainingError, input_state
from t2t_repro.training import step as step_module

# How a poisoned step goes wrong: its loss NaN or +inf (the gradients
# stay finite, so only the loss can tell), or its gradients' global norm
# infinite (a finite loss scaled by 1e30: every gradient stays finite,
# their squared norm overflows float32).
_POISONS = {
    "nan loss": lambda loss_sum, bad: tf.where(
        bad, tf.constant(np.nan, loss_sum.dtype), loss_sum
    ),
    "+inf loss": lambda loss_sum, bad: (
        loss_sum + tf.where(bad, tf.constant(np.inf, loss_sum.dtype), 0.0)
    ),
    "infinite gradient norm": lambda loss_sum, bad: (
        loss_sum * tf.where(bad, tf.constant(1e30, loss_sum.dtype), 1.0)
    ),
}


def _poison_losses(monkeypatch, steps, poison="nan loss"):
    """Makes the given (1-based) steps of the next trainer whose step is
    compiled go wrong as `_POISONS[poison]` says; returns a dict to put
    that trainer in."""
    holder = {}
    original = step_module.smoothed_cross_entropy_stats

    def poisoned(*args):
        loss_sum, count, correct = original(*args)
        this_step = holder["trainer"].global_step + 1
        bad = tf.reduce_any(tf.equal(this_step, tf.constant(steps, tf.int64)))
        return _POISONS[poison](loss_sum, bad), count, correct

    monkeypatch.setattr(step_module, "smoothed_cross_entropy_stats", poisoned)
    return holder


@pytest.mark.parametrize(
    "poison",
    [
        "nan loss",
        "+inf loss",
        pytest.param("infinite gradient norm", marks=pytest.mark.slow),
    ],
)
def test_a_nonfinite_step_applies_no_update_and_is_counted(
    tmp_path, monkeypatch, poison
):
    holder = _poison_losses(monkeypatch, [3], poison)
    trainer = holder["trainer"] = toy_trainer(
        tmp_path, 6, checkpoint_every=1, log_every=3
    )
    assert trainer.train() == 6
    # Six batches consumed, five updates, nothing that is not finite kept.
    assert int(trainer.optimizer.iterations.numpy()) == 5
    assert all(np.isfinite(w.numpy()).all() for w in trainer.model.weights)
    after_2, after_3, after_4 = (
        checkpoint_weights(tmp_path, step) for step in (2, 3, 4)
    )
    for before, skipped in zip(after_2, after_3):
        np.testing.assert_array_equal(skipped, before)
    assert any((a != b).any() for a, b in zip(after_3, after_4))
    assert nonfinite_steps_logged(tmp_path) == 1.0


def test_nonfinite_steps_in_a_row_stop_at_the_last_good_checkpoint(
    tmp_path, monkeypatch
):
    holder = _poison_losses(monkeypatch, list(range(4, 20)))
    trainer = holder["trainer"] = toy_trainer(
        tmp_path, 19, checkpoint_every=2, max_nonfinite=3
    )
    with pytest.raises(
        TrainingError,
        match=(
            r"step 6: the loss or gradient norm was not finite for 3 steps "
            r"in a row .* the last good checkpoint is .*ckpt-4\."
        ),
    ):
        trainer.train()
    assert latest_checkpoint(str(tmp_path)).endswith("ckpt-4")
    for step in (2, 4):
        assert all(np.isfinite(w).all() for w in checkpoint_weights(tmp_path, step))


def test_weights_that_are_not_finite_are_never_saved(tmp_path):
    trainer = toy_trainer(tmp_path, 1)
    trainer.train()
    trainer.model.weights[0].assign(tf.fill(trainer.model.weights[0].shape, np.nan))
    trainer.global_step.assign_add(1)
    with pytest.raises(
        TrainingError,
        match=(
            r"step 2: the weights are not finite, so they were not saved; "
            r"the last good checkpoint is .*ckpt-1$"
        ),
    ):
        trainer._save()
    assert latest_checkpoint(str(tmp_path)).endswith("ckpt-1")


def test_a_second_trainer_on_one_model_dir_is_refused(tmp_path):
    holder = start_python(
        [
            "-c",
            "import sys, time; from t2t_repro.run_lock import training_lock\n"
            "with training_lock(sys.argv[1]): "
            "print('locked', flush=True); time.sleep(600)",
            str(tmp_path),
        ]
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(
            ConfigError,
            match=(
                rf"train.lock: another trainer \(pid {holder.pid} on "
                rf"{socket.gethostname()}\) is using this model_dir"
            ),
        ):
            toy_trainer(tmp_path, 1)
        assert not (tmp_path / "ckpt-1.index").exists()
    finally:
        holder.kill()  # SIGKILL: its lock file stays behind
        holder.wait()
    # The holder is dead: its stale lock is taken over.
    assert json.loads((tmp_path / "train.lock").read_text())["pid"] == (holder.pid)
    trainer = toy_trainer(tmp_path, 1)
    mine = json.loads((tmp_path / "train.lock").read_text())
    assert {key: mine[key] for key in ("pid", "host")} == {
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    assert trainer.train() == 1
    # Released when training ends.
    assert not (tmp_path / "train.lock").exists()
    # A container restarted on the same host often has its dead
    # predecessor's pid: that lock is not this process's. Judged by its
    # freshness, it is refused while touched, then taken over (and kept
    # fresh and released), never adopted.
    lock = tmp_path / "train.lock"
    lock.write_text(
        json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "token": "old"})
    )
    with pytest.raises(ConfigError, match="another trainer"):
        toy_trainer(tmp_path, 2)
    os.utime(lock, (time.time() - 120, time.time() - 120))
    trainer = toy_trainer(tmp_path, 2)
    assert json.loads((tmp_path / "train.lock").read_text()) == mine
    assert trainer.train() == 2
    assert not (tmp_path / "train.lock").exists()


@pytest.fixture(scope="module")
def straight_run_weights(tmp_path_factory):
    """The weights of an uninterrupted 12-step toy run, which every resumed
    one must end at."""
    straight = toy_trainer(tmp_path_factory.mktemp("straight"), 12)
    straight.train()
    return [w.numpy() for w in straight.model.weights]


def test_resume_continues_the_saved_input_stream_without_replaying_it(
    tmp_path, monkeypatch, straight_run_weights
):
    replayed = []
    advance = input_state._advance
    monkeypatch.setattr(
        input_state,
        "_advance",
        lambda iterator, count: (replayed.append(count), advance(iterator, count)),
    )
    expected = straight_run_weights

    first_half = toy_trainer(tmp_path / "resumed", 6)
    first_half.train()
    assert holds(latest_checkpoint(str(tmp_path / "resumed")), "input")
    resumed = toy_trainer(tmp_path / "resumed", 12)
    assert resumed.train() == 12
    assert replayed == []  # O(1): the iterator's state came back
    for want, got in zip(expected, resumed.model.weights):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)

    # A checkpoint without input state (as written before it was saved):
    # the pipeline replays the consumed batches, to the same weights.
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("config.json", "spm.model", "training.json"):
        shutil.copy(tmp_path / "resumed" / name, legacy / name)
    without_input = model_checkpoint(
        first_half.model,
        optimizer=first_half.optimizer,
        global_step=first_half.global_step,
        train_seconds=first_half.train_seconds,
        tokens_seen=first_half.tokens_seen,
    )
    tf.train.CheckpointManager(
        without_input, str(legacy), 1, checkpoint_name="ckpt"
    ).save(6)
    from_legacy = toy_trainer(legacy, 12)
    assert replayed == [6]
    assert from_legacy.train() == 12
    for want, got in zip(expected, from_legacy.model.weights):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_corrupt_newest_checkpoints_are_set_aside_and_the_run_resumed(
    tmp_path, caplog, straight_run_weights
):
    toy_trainer(tmp_path, 12, checkpoint_every=4).train()
    damaged = {}
    for name in ("ckpt-12.index", "ckpt-8.data-00000-of-00001"):
        with open(tmp_path / name, "r+b") as handle:
            handle.truncate(os.path.getsize(tmp_path / name) // 2)
        damaged[name] = (tmp_path / name).read_bytes()

    with caplog.at_level(logging.WARNING):
        resumed = toy_trainer(tmp_path, 12, checkpoint_every=4)
    warnings = [
        r.getMessage() for r in caplog.records if "corrupt checkpoint" in r.getMessage()
    ]
    [set_aside] = (tmp_path / "corrupt").iterdir()
    assert [w.split(" (")[0] for w in warnings] == [
        f"{tmp_path}/ckpt-12: corrupt checkpoint",
        f"{tmp_path}/ckpt-8: corrupt checkpoint",
    ]
    assert all(
        w.endswith(f", moved to {set_aside}; resuming from {tmp_path}/ckpt-4")
        for w in warnings
    )
    assert resumed.step == 4
    # Its input iterator came back from ckpt-4 too: the run ends where an
    # uninterrupted one does.
    assert resumed.train() == 12
    for want, got in zip(straight_run_weights, resumed.model.weights):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    # Kept byte for byte, not overwritten by the new ckpt-8 and ckpt-12.
    for name, data in damaged.items():
        assert (set_aside / name).read_bytes() == data


KILL_RUN_STEPS = 16


def _kill_run_flags(model_dir):
    """A checkpoint at every step, so that a kill often lands inside a
    save."""
    return [
        f"--model_dir={model_dir}",
        f"--train_steps={KILL_RUN_STEPS}",
        "--checkpoint_every=1",
        "--log_every=1",
        "--mixed_precision=fp32",
        "--shuffle_buffer=2000",
        *MULTI30K_VAL,
    ]


def _final_weights(model_dir):
    model, _, _ = load_model(str(model_dir))
    return [w.numpy() for w in model.weights]


@pytest.fixture(scope="module")
def uninterrupted_cli_run(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("uninterrupted")
    result = run_train(*_kill_run_flags(model_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return _final_weights(model_dir)


# About 110 s a seed (with the uninterrupted run) on a slow CI machine; the
# default suite kills inside each stage of a save on purpose
# (tests/training/test_interrupted_saves.py).
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_at_a_random_step_then_the_same_command_ends_identically(
    tmp_path, uninterrupted_cli_run, seed
):
    kill_after = random.Random(seed).randint(2, KILL_RUN_STEPS - 3)
    process = start_train(*_kill_run_flags(tmp_path))
    wait_for_line(process, f"step {kill_after}/{KILL_RUN_STEPS} loss")
    process.kill()
    process.wait()
    assert process.returncode == -signal.SIGKILL
    killed_at = latest_checkpoint(str(tmp_path))
    assert killed_at is not None
    # Whatever the kill interrupted, every checkpoint left is readable.
    for path in tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths:
        load_model(str(tmp_path), path)
    result = run_train(*_kill_run_flags(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in result.stderr
    for want, got in zip(uninterrupted_cli_run, _final_weights(tmp_path)):
        np.testing.assert_allclose(got, want, atol=1e-5)
