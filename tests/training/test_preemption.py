"""Two `t2t-train` processes in the chief + worker layout: a SIGTERM to
either stops both after the same step, with that step's checkpoint, and
the same command resumes exactly; a stalled worker ends the other with one
line once `--collective_timeout` passes."""

import json
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from helpers.processes import free_port, wait_for_line
from helpers.run_inspection import checkpoint_weights
from helpers.train_command import MULTI30K_VAL, multi30k_test_set, start_train
from t2t_repro.checkpoints import load_model

STEPS = 30


def _start(model_dir, steps, *extra, worker_extra=()):
    """Chief and worker processes of one run (the worker with
    `worker_extra` flags too), stderr piped."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    cluster = {"chief": addresses[:1], "worker": addresses[1:]}
    flags = [
        f"--model_dir={model_dir}",
        f"--train_steps={steps}",
        "--checkpoint_every=1000",
        "--log_every=1",
        *MULTI30K_VAL,
        "--test_src=",
        "--test_tgt=",
        *extra,
    ]
    return [
        start_train(
            *flags,
            *(worker_extra if kind == "worker" else ()),
            env={
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": kind, "index": 0}}
                )
            },
        )
        for kind in ("chief", "worker")
    ]


def _finish(processes, timeout=300):
    results = []
    for process in processes:
        _, stderr = process.communicate(timeout=timeout)
        results.append((process.returncode, stderr))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("signalled", ["chief", "worker"])
def test_a_sigterm_to_one_worker_stops_both_at_one_step_and_resumes_exactly(
    tmp_path, signalled
):
    straight = tmp_path / "straight"
    assert [code for code, _ in _finish(_start(straight, STEPS))] == [0, 0]

    resumed = tmp_path / "resumed"
    processes = _start(resumed, STEPS)
    target = processes[["chief", "worker"].index(signalled)]
    wait_for_line(target, "step 5/")
    target.send_signal(signal.SIGTERM)
    signalled_at = time.time()
    results = _finish(processes, timeout=120)
    assert time.time() - signalled_at < 60
    for code, stderr in results:
        assert code == 128 + signal.SIGTERM, stderr[-2000:]
    stopped_at = int(tf.train.latest_checkpoint(str(resumed)).rsplit("-", 1)[1])
    assert 5 <= stopped_at < STEPS
    # Each says it stopped at that step: the same one.
    for _, stderr in results:
        assert f"at step {stopped_at}, checkpoint saved" in stderr, stderr[-2000:]
    peer = results[1 - ["chief", "worker"].index(signalled)][1]
    assert "another worker's signal" in peer

    results = _finish(_start(resumed, STEPS))
    for code, stderr in results:
        assert code == 0, stderr[-2000:]
        assert f"at step {stopped_at}" in stderr
        # Both input pipelines came back from their saved state.
        assert "holds no input state" not in stderr
    for got, want in zip(
        checkpoint_weights(resumed, STEPS), checkpoint_weights(straight, STEPS)
    ):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.slow
def test_a_stalled_worker_ends_the_chief_with_one_line(tmp_path):
    timeout = 20
    chief, worker = _start(
        tmp_path,
        100_000,
        f"--collective_timeout={timeout}",
        "--checkpoint_every=3",
    )
    wait_for_line(worker, "step 5/")
    worker.send_signal(signal.SIGSTOP)
    stalled_at = time.time()
    try:
        _, stderr = chief.communicate(timeout=timeout + 120)
    finally:
        worker.kill()
        worker.communicate()
    assert time.time() - stalled_at < timeout + 60
    assert chief.returncode not in (0, None)
    # One line from the tool (TensorFlow's runtime logs its own abort).
    errors = [line for line in stderr.splitlines() if "t2t-train: error:" in line]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert "a collective operation with the other workers failed" in errors[0]
    # The run keeps what it saved: the tool names the latest checkpoint,
    # which loads.
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest and f"the latest checkpoint is {latest}" in errors[0]
    load_model(str(tmp_path), latest)


@pytest.mark.slow
def test_a_chief_that_refuses_the_run_ends_the_worker_with_one_line(tmp_path):
    """Only the chief checks the run's files: when it stops at start-up,
    the worker, already in the strategy's collectives, says so in one
    line, not with TensorFlow's traceback."""
    first, other = _finish(_start(tmp_path, 2))
    assert first[0] == other[0] == 0, first[1][-3000:]
    config = tmp_path / "config.json"
    config.write_text(config.read_text().replace('"d_ff": ', '"d_ff": 1'))
    (chief_status, chief_stderr), (worker_status, worker_stderr) = _finish(
        _start(tmp_path, 4)
    )
    assert chief_status == 2 and "a different model config" in chief_stderr
    assert worker_status == 2 and "Traceback" not in worker_stderr, worker_stderr[
        -3000:
    ]
    errors = [
        line for line in worker_stderr.splitlines() if "t2t-train: error:" in line
    ]
    assert len(errors) == 1, worker_stderr[-3000:]
    assert errors[0].startswith(
        "t2t-train: error: preparing the run: an operation failed ("
    )
    assert "most likely because another task stopped" in errors[0]


@pytest.mark.slow
def test_tasks_with_other_model_flags_stop_before_building_the_model(tmp_path):
    """Tasks that would build other variables stop, each naming the flag,
    before the strategy pairs their variables (a traceback or a hang)."""
    results = _finish(_start(tmp_path, 2, "--d_ff=64", worker_extra=["--d_ff=32"]))
    for (status, stderr), (task, d_ff) in zip(
        results, [("chief 0", 64), ("worker 0", 32)]
    ):
        errors = [line for line in stderr.splitlines() if "t2t-train: error:" in line]
        assert status == 2 and len(errors) == 1, stderr[-3000:]
        assert errors[0].startswith(
            "t2t-train: error: the tasks of this run differ in --d_ff (this task "
            f"is {task}; --d_ff={d_ff}): start every task with the same flags"
        )
    # Nothing was written for a run that never started.
    assert not (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_the_chief_scores_the_test_set_after_the_worker_has_gone(tmp_path):
    """After the last step the worker exits and the chief alone averages
    the last checkpoints and scores the test set, which TensorFlow's
    shutdown of the cluster must not cut short."""
    test_flags = multi30k_test_set(tmp_path, 40)
    processes = _start(
        tmp_path / "run",
        8,
        "--checkpoint_every=4",
        "--average_last=2",
        *test_flags,
        # The untrained model's translations run to their longest.
        "--beam_size=1",
        "--extra_decode_length=5",
    )
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-3000:]
    chief_stdout, worker_stdout = outputs[0][0], outputs[1][0]
    assert "test: " in chief_stdout and "40 sentences" in chief_stdout
    assert "average of steps 4, 8" in chief_stdout
    assert "BLEU" in chief_stdout, chief_stdout
    assert "test: " not in worker_stdout
    assert (tmp_path / "run" / "average").is_dir()
