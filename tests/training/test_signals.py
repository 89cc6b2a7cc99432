"""Stopping a run by a signal, as docs/training.md and docs/reliability.md
promise: SIGTERM or SIGINT (Ctrl-C) saves a checkpoint, skips the test set,
exits with 128 + the signal number, and the same command resumes; a
second signal exits at once."""

import signal
import subprocess
import time

import pytest
import tensorflow as tf

from helpers.processes import (
    run_python,
    signal_after_step,
    start_python,
    wait_for_line,
)
from helpers.train_command import (
    MULTI30K_VAL,
    multi30k_test_set,
    run_train,
    start_train,
)
from t2t_repro.checkpoints import checkpoint_step


# A run stopped by the signal, then resumed to its end by the same
# command: two t2t-train processes (a minute and a half on 2 cores), in
# the slow tier; the default suite's second-signal tests below run the
# trainer's handlers in a process.
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigterm_or_sigint_checkpoints_and_the_same_command_resumes(tmp_path, signum):
    test_set = multi30k_test_set(tmp_path, 3)

    def flags(steps):
        return [
            f"--model_dir={tmp_path}/run",
            f"--train_steps={steps}",
            "--checkpoint_every=1000",
            "--log_every=1",
            *MULTI30K_VAL,
            *test_set,
            # The untrained model's test translations run to their
            # longest: kept short.
            "--beam_size=1",
            "--extra_decode_length=5",
        ]

    process = start_train(*flags(400))
    output, stderr = signal_after_step(process, signum, step=5)
    # Saved, told the scheduler it did not finish, and did not go on to
    # translate the test set.
    assert process.returncode == 128 + signum, stderr[-2000:]
    assert "KeyboardInterrupt" not in stderr and "Traceback" not in stderr
    assert f"stopped by signal {int(signum)} at step" in stderr
    assert "the same command resumes" in stderr and "sacreBLEU" not in output
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / "run"))
    stopped_at = checkpoint_step(checkpoint)
    assert 5 <= stopped_at < 400
    result = run_train(*flags(stopped_at + 3))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed from {checkpoint} at step {stopped_at}" in result.stderr
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(
        f"ckpt-{stopped_at + 3}"
    )
    assert "sacreBLEU" in result.stdout  # finished: the test set is scored


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


# 10-15 s each: two of them in the default suite.
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
    process = start_python(["-c", _SLOW_STOP, str(tmp_path), stage])
    try:
        # Training, under the trainer's handlers.
        wait_for_line(process, "step 2/50", 300)
        if stage == "evaluating":
            wait_for_line(process, "evaluating", 60)
        process.send_signal(signum)
        wait_for_line(process, "checkpointing and stopping", 60)
        if stage == "saving":
            wait_for_line(process, "saving", 60)
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


# A second signal can arrive while the first's handler still runs (Python
# handlers run between bytecodes, in a handler too): had the handler not
# recorded the first before it logs, the second would find none and be
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
