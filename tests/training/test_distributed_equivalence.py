"""Replicas, worker processes and accumulated micro-batches take the step
one device takes on the whole batch, and resume as one device does."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers.one_training_step import (
    CONFIG,
    direct_gradient_norm,
    global_batch,
    one_step,
)
from helpers.processes import HELPERS, free_port, run_python, start_python
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.config import TrainingOptions
from t2t_repro.training.prepare import prepare_run


def _helper_args(script, out, *args):
    """The arguments of a helper script that saves its result to `out`."""
    return [os.path.join(HELPERS, script), str(out), *map(str, args)]


def _saved(out, returncode, stderr):
    assert returncode == 0, stderr[-3000:]
    return dict(np.load(out))


def _run_helper(script, out, *args):
    """Runs a helper script in a process of its own; what it saved."""
    result = run_python(_helper_args(script, out, *args))
    return _saved(out, result.returncode, result.stderr)


def _start_cluster(layout, script, outputs, task_args):
    """Starts `script` as each task of a local cluster of task types
    `layout`, task N with its OUT.npz (`outputs` / taskN.npz) and then
    `task_args[N]`; [(OUT.npz, process)] of the tasks."""
    cluster, tasks = {}, []
    for kind in layout:
        tasks.append({"type": kind, "index": len(cluster.get(kind, []))})
        cluster.setdefault(kind, []).append(f"127.0.0.1:{free_port()}")
    started = []
    for index, (task, args) in enumerate(zip(tasks, task_args)):
        out = outputs / f"task{index}.npz"
        tf_config = json.dumps({"cluster": cluster, "task": task})
        process = start_python(
            _helper_args(script, out, *args), env={"TF_CONFIG": tf_config}
        )
        started.append((out, process))
    return started


def _run_cluster(layout, script, outputs, *args):
    """Runs `script` as each task of a local cluster of task types
    `layout`, with `args` after each task's OUT.npz (`outputs` / taskN.npz);
    returns what each task saved."""
    results = []
    for out, process in _start_cluster(layout, script, outputs, [args] * len(layout)):
        _, stderr = process.communicate(timeout=600)
        results.append(_saved(out, process.returncode, stderr))
    return results


def _one_step(tmp_path, name, cpu_devices):
    return _run_helper(
        "one_training_step.py", tmp_path / f"{name}.npz", tmp_path / name, cpu_devices
    )


def _assert_same_step(single, mirrored, replicas):
    assert int(mirrored["replicas"]) == replicas
    np.testing.assert_allclose(mirrored["loss"], single["loss"], atol=1e-5)
    # Adam's first update is nearly scale-free; the global gradient norm
    # catches a loss normalised per replica or summed twice.
    np.testing.assert_allclose(mirrored["grad_norm"], single["grad_norm"], rtol=1e-5)
    # The key projection's bias has an exactly zero gradient (softmax is
    # shift-invariant per query): its Adam update is amplified round-off.
    weights = [
        k
        for k in single
        if k not in ("loss", "replicas", "grad_norm") and not k.endswith("/key/bias")
    ]
    assert len(weights) > 20
    for key in weights:
        np.testing.assert_allclose(mirrored[key], single[key], atol=1e-5, err_msg=key)


@pytest.mark.slow
def test_two_mirrored_replicas_match_one_device(tmp_path):
    single = _one_step(tmp_path, "single", 1)
    mirrored = _one_step(tmp_path, "mirrored", 2)
    _assert_same_step(single, mirrored, replicas=2)


@pytest.mark.parametrize(
    "layout",
    [
        # The Kubernetes TFJob / Vertex AI layout; it once trained as two
        # unsynchronised one-process runs.
        ("chief", "worker"),
        pytest.param(("worker", "worker"), marks=pytest.mark.slow),
    ],
)
def test_two_worker_processes_match_one_device(tmp_path, layout):
    single = _one_step(tmp_path, "single", 1)
    for task in _run_cluster(
        layout, "one_training_step.py", tmp_path, tmp_path / "multiworker", 1
    ):
        _assert_same_step(single, task, replicas=2)


def test_accumulated_micro_batches_equal_one_big_batch(tmp_path):
    # Halves with different token counts (rows grow longer): the normaliser
    # must be the count over both micro-batches, not a mean of their means.
    (source, target_input), target = global_batch()
    halves = [
        ((source[rows], target_input[rows]), target[rows])
        for rows in (slice(0, 4), slice(4, None))
    ]
    strategy = tf.distribute.MirroredStrategy()
    whole = one_step(strategy, str(tmp_path / "whole"), [global_batch()])
    accumulated = one_step(strategy, str(tmp_path / "halves"), halves)
    _assert_same_step(whole, accumulated, replicas=1)


def test_the_step_takes_the_gradient_of_the_loss_per_target_token(tmp_path):
    # The mirrored and accumulated steps above are compared with one
    # device's step; this checks that step against the gradient of the
    # mean token loss, computed here, over two unequal micro-batches.
    (source, target_input), target = global_batch()
    options = TrainingOptions(
        model_dir=str(tmp_path), train_steps=1, warmup_steps=1, accum_steps=2
    )
    trainer = prepare_run(
        CONFIG, options, tf.distribute.MirroredStrategy(), tiny_vocab()
    )
    want, count = direct_gradient_norm(
        trainer,
        global_batch(),
        lambda logits, loss_sum, count: loss_sum / count,
    )
    halves = tuple(
        ((source[rows], target_input[rows]), target[rows])
        for rows in (slice(0, 3), slice(3, None))
    )
    step = trainer.compile_step(
        tf.nest.map_structure(
            lambda t: tf.TensorSpec([None, None], tf.as_dtype(t.dtype)), halves[0]
        )
    )
    outputs = step(tf.nest.map_structure(tf.constant, halves))
    assert float(outputs["target_tokens"]) == count
    # Eager and compiled gradients differ by round-off (amplified where
    # a LayerNorm offset's gradient sums terms that cancel): 2e-4 here. A
    # wrong normaliser is off by a factor (a micro-batch's count, the
    # replica count).
    np.testing.assert_allclose(float(outputs["grad_norm"]), want, rtol=2e-3)


def _two_workers(model_dir, steps):
    """Both workers of a 2-worker cluster train the toy run to `steps`
    (worker_training.py); each one's saved step and weights."""
    outputs = model_dir.parent / f"{model_dir.name}_{steps}"
    outputs.mkdir()
    return _run_cluster(
        ("worker", "worker"), "worker_training.py", outputs, model_dir, steps
    )


def _assert_same_weights(got, want):
    for key, value in want.items():
        if key not in ("step", "replayed"):
            np.testing.assert_allclose(got[key], value, atol=1e-5, err_msg=key)


@pytest.mark.slow
def test_two_workers_resume_from_the_chiefs_checkpoint(tmp_path):
    straight = _two_workers(tmp_path / "straight", 6)
    _two_workers(tmp_path / "resumed", 4)
    # Worker 1 keeps its input state beside the chief's checkpoints, and
    # deletes the copy of the checkpoint it had to save.
    assert (tmp_path / "resumed" / "input" / "worker-1" / "ckpt-4.index").exists()
    assert not (tmp_path / "resumed" / ".worker_1").exists()
    resumed = _two_workers(tmp_path / "resumed", 6)
    for worker in (0, 1):
        assert int(resumed[worker]["step"]) == 6
        # O(1): both workers' iterators came back from their checkpoints.
        assert int(resumed[worker]["replayed"]) == 0
        _assert_same_weights(resumed[worker], straight[0])


@pytest.mark.slow
def test_tasks_that_differ_are_refused_by_every_task(tmp_path):
    """Tasks with other flags, or a --model_dir not shared (another
    restored step), would train apart: each task names the difference."""
    _two_workers(tmp_path / "chiefs", 2)
    started = _start_cluster(
        ("worker", "worker"),
        "worker_training.py",
        tmp_path,
        # The chief resumes at step 2; the other worker starts a run of its
        # own, with another --train_steps.
        [(tmp_path / "chiefs", 4), (tmp_path / "own", 6)],
    )
    for (_, process), task, steps in zip(started, ("worker 0", "worker 1"), (4, 6)):
        _, stderr = process.communicate(timeout=300)
        assert process.returncode != 0
        assert (
            "the tasks of this run differ in --train_steps, the restored step "
            f"(this task is {task}; --train_steps={steps}; restored steps 2, 0, "
            "the chief's first)" in stderr
        ), stderr[-3000:]


def _mirrored_training(model_dir, steps, out):
    return _run_helper("worker_training.py", out, model_dir, steps, 2)


@pytest.mark.slow  # 76 s; a single device's resume is in the default suite
def test_two_replicas_resume_from_the_saved_input_state(tmp_path):
    straight = _mirrored_training(tmp_path / "straight", 6, tmp_path / "straight.npz")
    _mirrored_training(tmp_path / "resumed", 4, tmp_path / "first.npz")
    resumed = _mirrored_training(tmp_path / "resumed", 6, tmp_path / "resumed.npz")
    assert int(resumed["step"]) == 6
    assert int(resumed["replayed"]) == 0  # O(1) in the step
    _assert_same_weights(resumed, straight)
