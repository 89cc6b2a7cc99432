"""Choosing the training precision: `--mixed_precision=auto`.

A 16-bit format pays only where the hardware multiplies it natively, and
CPU flags do not tell: CPUs that report the same avx512_bf16 flag run bf16
matmuls slower or several times faster than fp32 (docs/performance.md),
and GPUs before Ampere have no bf16 and some have no fast fp16. So "auto"
measures instead of trusting flags or device names: it times a 1024^3
matmul per precision on the device that will train (about 0.3 s) and
picks the first of bf16 (no loss scaling needed) and, on a GPU, fp16
(with loss scaling) that is clearly faster than float32.
"""

import time

from absl import logging

# Keras dtype policy of each resolved --mixed_precision value.
POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# bf16 must beat fp32 matmuls by this much: the rest of a training step
# (casts, float32 softmax/LayerNorm/loss) gains less than the matmuls.
_REQUIRED_SPEEDUP = 1.3


def matmul_seconds(dtype, size=1024, repeats=5):
    """Best of `repeats` timings of a `size`^3 matmul in `dtype` (a
    TensorFlow dtype or its name), after a warm-up run."""
    import tensorflow as tf

    a = tf.cast(tf.random.stateless_normal([size, size], [1, 2]), dtype)
    multiply = tf.function(
        lambda x: tf.reduce_sum(tf.cast(tf.matmul(x, x)[0, 0], tf.float32)),
        autograph=False,
    )
    multiply(a).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        multiply(a).numpy()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_speedup(dtype, device):
    """fp32 time / `dtype` time of a 1024^3 matmul on `device` (e.g.
    "/GPU:0"); 0 where the device cannot run `dtype`."""
    import tensorflow as tf

    with tf.device(device):
        try:
            return matmul_seconds(tf.float32) / matmul_seconds(dtype)
        except (
            tf.errors.InvalidArgumentError,
            tf.errors.NotFoundError,
            tf.errors.UnimplementedError,
        ):
            return 0.0


def bf16_matmul_speedup():
    """fp32 time / bf16 time of a 1024^3 matmul on this machine's CPU."""
    return matmul_speedup("bfloat16", "/CPU:0")


def _measured_choice():
    """The resolved precision for "auto" on a fresh run, and a log line."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        device = "/GPU:0"
        speedups = {
            "bf16": matmul_speedup("bfloat16", device),
            "fp16": matmul_speedup("float16", device),
        }
    else:
        device = "/CPU:0"
        # fp16 needs loss scaling and CPUs gain nothing from it.
        speedups = {"bf16": bf16_matmul_speedup()}
    chosen = next(
        (
            precision
            for precision, speedup in speedups.items()
            if speedup >= _REQUIRED_SPEEDUP
        ),
        "fp32",
    )
    measured = ", ".join(
        f"{precision} matmuls run {speedup:.2f}x fp32"
        for precision, speedup in speedups.items()
    )
    return chosen, (
        f"--mixed_precision=auto on {device}: {measured}; "
        f"training in {POLICIES[chosen]}"
    )


def resolve_precision(requested, model_dir=None):
    """ "fp32", "bf16" or "fp16" for `requested` (one of config.PRECISIONS).

    "auto" keeps the choice a run in `model_dir` started with, so that a
    resumed run does not switch precision on a machine near the threshold.
    """
    from t2t_repro.run_dir import RunDir

    if requested != "auto":
        return requested
    started = RunDir(model_dir).load_training_options() if model_dir else None
    if started:
        return started["mixed_precision"]
    chosen, described = _measured_choice()
    logging.info("%s", described)
    return chosen
