"""What docs/training.md and docs/reliability.md promise about stopping a
run and resuming it, beyond SIGTERM (test_training.py): SIGINT does what
SIGTERM does, a second signal exits at once, an infinite loss is skipped
like a NaN one, and a resume that changes the precision, the replica
count or --accum_steps is refused unless --allow_option_changes."""

import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
import tensorflow as tf

from helpers.processes import REPO, quiet_environment, run_python, signal_after_step
from helpers.run_inspection import checkpoint_weights, nonfinite_steps_logged
from helpers.shared_data import multi30k
from helpers.toy_run import toy_trainer
from t2t_repro.config import ConfigError
from t2t_repro.data import text_files
from t2t_repro.training import step as step_module

# SIGINT (Ctrl-C) ------------------------------------------------------


def _train_command(tmp_path, steps):
    """t2t-train on Multi30k's validation pairs, scoring a 10-sentence
    test set when it finishes."""
    for lang in ("en", "de"):
        (tmp_path / f"test.{lang}").write_text(
            "".join(
                line + "\n"
                for line in text_files.read_lines(multi30k("test_2016_flickr", lang))[
                    :10
                ]
            ),
            "utf-8",
        )
    return [
        sys.executable,
        "-m",
        "t2t_repro.cli",
        "train",
        "--flagfile=flags/tiny.cfg",
        f"--model_dir={tmp_path}/run",
        f"--train_steps={steps}",
        "--checkpoint_every=1000",
        "--log_every=1",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('val', 'de')}",
        f"--test_src={tmp_path}/test.en",
        f"--test_tgt={tmp_path}/test.de",
    ]


# Two t2t-train processes (50 s on a loaded 2-core machine).
@pytest.mark.slow
def test_sigint_checkpoints_exits_130_and_the_same_command_resumes(tmp_path):
    process = subprocess.Popen(
        _train_command(tmp_path, 400),
        cwd=REPO,
        env=quiet_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output, rest = signal_after_step(process, signal.SIGINT)
    # As for SIGTERM: saved, 128 + 2, and no test set translated.
    assert process.returncode == 128 + signal.SIGINT == 130, rest[-2000:]
    assert "KeyboardInterrupt" not in rest and "Traceback" not in rest
    assert f"stopped by signal {int(signal.SIGINT)} at step" in rest
    assert "the same command resumes" in rest and "sacreBLEU" not in output
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / "run"))
    stopped_at = int(checkpoint.rsplit("-", 1)[1])
    assert 5 <= stopped_at < 400
    result = subprocess.run(
        _train_command(tmp_path, stopped_at + 2),
        cwd=REPO,
        env=quiet_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed from {checkpoint} at step {stopped_at}" in result.stderr
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(
        f"ckpt-{stopped_at + 2}"
    )
    assert "sacreBLEU" in result.stdout


# A second signal --------------------------------------------------------

# A toy Trainer whose stop takes long, where the user would press Ctrl-C
# again: a dev evaluation in progress (the loop still runs: the first
# signal's handler is the trainer's), or the final checkpoint's save (after
# the loop: the process's own handlers are back). Sleeping in Python, as a
# real evaluation or save returns to Python between its TensorFlow calls.
_SLOW_STOP = r"""
import sys, time
from absl import logging
from t2t_repro.training.trainer import Trainer
from helpers.toy_run import toy_trainer

logging.set_verbosity(logging.INFO)  # the "step N/50" lines

model_dir, stage = sys.argv[1:]
save = Trainer._save

def slow_save(self):
    if self.interrupted_by is not None:
        print("saving", file=sys.stderr, flush=True)
        time.sleep(120)
    save(self)

def slow_evaluator(model, step, writer):
    print("evaluating", file=sys.stderr, flush=True)
    time.sleep(120)
    return {"bleu": 0.0}

if stage == "saving":
    Trainer._save = slow_save
trainer = toy_trainer(model_dir, 50, checkpoint_every=1000, log_every=1,
                      eval_every=3)
if stage == "evaluating":
    trainer.evaluator = slow_evaluator
trainer.train()
print("stopped by", trainer.interrupted_by, file=sys.stderr, flush=True)
"""


def _wait_for(process, text, seconds):
    """Reads `process`'s stderr up to a line containing `text`; kills it
    if none comes within `seconds`."""
    watchdog = threading.Timer(seconds, process.kill)
    watchdog.start()
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if text in line:
                return
    finally:
        watchdog.cancel()
    raise AssertionError(f"no {text!r} within {seconds} s:\n" + "".join(lines)[-3000:])


# 10 s each: two of them in the default suite.
@pytest.mark.parametrize(
    "stage, signum",
    [
        ("evaluating", signal.SIGINT),
        ("saving", signal.SIGTERM),
        pytest.param("evaluating", signal.SIGTERM, marks=pytest.mark.slow),
        pytest.param("saving", signal.SIGINT, marks=pytest.mark.slow),
    ],
)
def test_a_second_signal_while_stopping_exits_at_once(tmp_path, stage, signum):
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_STOP, str(tmp_path), stage],
        cwd=REPO,
        env=quiet_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Training, under the trainer's handlers.
        _wait_for(process, "step 2/50", 300)
        if stage == "evaluating":
            _wait_for(process, "evaluating", 60)
        process.send_signal(signum)
        _wait_for(process, "checkpointing and stopping", 60)
        if stage == "saving":
            _wait_for(process, "saving", 60)
        else:
            # Past the first handler's end: a signal while it logs is taken
            # for a first one (test_a_signal_while_the_first_is_handled_...).
            time.sleep(1)
        process.send_signal(signum)
        try:
            _, rest = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("still stopping 60 s after a second signal")
    finally:
        process.kill()
    # Killed by the signal itself, well before the 120 s stop ended, and
    # nothing saved (no checkpoint was due before the stop).
    assert process.returncode == -signum, rest[-3000:]
    assert "stopped by" not in rest
    assert tf.train.latest_checkpoint(str(tmp_path)) is None


# The first signal's handler logs, then records the signal: a second one
# that arrives while it logs runs the handler again (Python handlers run
# between bytecodes, in a handler too), finds no signal recorded, and is
# taken for the first. A second SIGTERM sent the moment the first's log
# line appeared was absorbed so in an early version of the test above.
_SIGNAL_WHILE_LOGGING = r"""
import os, signal, sys, time, types
from t2t_repro.training import trainer

stopping = types.SimpleNamespace(interrupted_by=None)
signal.signal(signal.SIGTERM,
              lambda *args: trainer.Trainer._request_stop(stopping, *args))
warning, calls = trainer.logging.warning, []

def warning_then_a_second_signal(*args):
    warning(*args)
    if not calls:
        calls.append(1)
        os.kill(os.getpid(), signal.SIGTERM)

trainer.logging.warning = warning_then_a_second_signal
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
print("absorbed; interrupted_by", stopping.interrupted_by, flush=True)
"""


def test_a_signal_while_the_first_is_handled_exits_at_once():
    result = run_python(["-c", _SIGNAL_WHILE_LOGGING], timeout=120)
    assert result.returncode == -signal.SIGTERM, result.stdout


# Infinite losses --------------------------------------------------------


def _infinite_at(monkeypatch, step, what):
    """Makes step `step` (1-based) of the next trainer compiled infinite:
    its loss (+inf, not NaN; the gradients stay finite, so only the loss
    can tell), or its gradients' global norm (a finite loss scaled by 1e30:
    every gradient stays finite, their squared norm overflows float32).
    Returns a dict to put that trainer in."""
    holder = {}
    original = step_module.smoothed_cross_entropy_stats

    def poisoned(*args):
        loss_sum, count, correct = original(*args)
        bad = tf.equal(holder["trainer"].global_step + 1, step)
        if what == "loss":
            loss_sum += tf.where(bad, tf.constant(np.inf, loss_sum.dtype), 0.0)
        else:
            loss_sum *= tf.where(bad, tf.constant(1e30, loss_sum.dtype), 1.0)
        return loss_sum, count, correct

    monkeypatch.setattr(step_module, "smoothed_cross_entropy_stats", poisoned)
    return holder


@pytest.mark.parametrize("what", ["loss", "gradient_norm"])
def test_an_infinite_step_applies_no_update_and_is_counted(tmp_path, monkeypatch, what):
    holder = _infinite_at(monkeypatch, 3, what)
    trainer = holder["trainer"] = toy_trainer(
        tmp_path, 5, checkpoint_every=1, log_every=5
    )
    assert trainer.train() == 5
    # Five batches consumed, four updates, nothing infinite kept.
    assert int(trainer.optimizer.iterations.numpy()) == 4
    assert all(np.isfinite(w.numpy()).all() for w in trainer.model.weights)
    after_2, after_3, after_4 = (
        checkpoint_weights(tmp_path, step) for step in (2, 3, 4)
    )
    for before, skipped in zip(after_2, after_3):
        np.testing.assert_array_equal(skipped, before)
    assert any((a != b).any() for a, b in zip(after_3, after_4))
    assert nonfinite_steps_logged(tmp_path) == 1.0


# Resuming with other options --------------------------------------------


@pytest.mark.parametrize(
    "before, after, changed",
    [
        (
            {"mixed_precision": "bf16"},
            {"mixed_precision": "fp32"},
            "'mixed_precision': ('bf16', 'fp32')",
        ),
        ({}, {"accum_steps": 2}, "'accum_steps': (1, 2)"),
    ],
)
def test_a_resume_with_another_precision_or_accum_steps_is_refused(
    tmp_path, before, after, changed
):
    assert toy_trainer(tmp_path, 1, **before).train() == 1
    with pytest.raises(ConfigError) as refused:
        toy_trainer(tmp_path, 2, **after)
    message = str(refused.value)
    assert "\n" not in message
    assert f"changed (old, new): {{{changed}}}" in message
    assert "--allow_option_changes" in message
    assert not (tmp_path / "train.lock").exists()
    resumed = toy_trainer(tmp_path, 2, allow_option_changes=True, **after)
    assert resumed.step == 1 and resumed.train() == 2
    # The run's options are the new ones now.
    assert toy_trainer(tmp_path, 2, **after).step == 2


def test_a_resume_with_another_replica_count_is_refused(tmp_path):
    assert toy_trainer(tmp_path, 1).train() == 1
    # The check comes before the strategy is used: a stand-in for 2 local
    # replicas (the CLI test below uses real ones).
    two_replicas = types.SimpleNamespace(num_replicas_in_sync=2, cluster_resolver=None)
    with pytest.raises(
        ConfigError,
        match=r"changed \(old, new\): "
        r"\{'replicas': \(1, 2\)\}",
    ):
        toy_trainer(tmp_path, 2, strategy=two_replicas)


# Three t2t-train processes (80 s on a loaded 2-core machine).
@pytest.mark.slow
def test_t2t_train_refuses_changed_options_with_one_line(tmp_path):
    flags = [
        "-m",
        "t2t_repro.cli",
        "train",
        "--flagfile=flags/tiny.cfg",
        f"--model_dir={tmp_path}/run",
        "--log_every=1",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('val', 'de')}",
    ]
    first = run_python(
        flags + ["--train_steps=1", "--cpu_devices=2", "--mixed_precision=bf16"]
    )
    assert first.returncode == 0, first.stderr[-3000:]
    changed = [
        "--train_steps=2",
        "--cpu_devices=1",
        "--mixed_precision=fp32",
        "--accum_steps=2",
    ]
    refused = run_python(flags + changed)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    # The last line, and the only error line.
    errors = [
        line
        for line in refused.stderr.splitlines()
        if line.startswith("t2t-train: error: ")
    ]
    assert errors == [refused.stderr.strip().splitlines()[-1]], errors
    assert (
        "changed (old, new): {'accum_steps': (1, 2), 'mixed_precision': "
        "('bf16', 'fp32'), 'replicas': (2, 1)}"
    ) in errors[0]
    allowed = run_python(flags + changed + ["--allow_option_changes"])
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-2")
