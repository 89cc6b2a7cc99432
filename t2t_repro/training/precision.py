"""Choosing the training precision: `--mixed_precision=auto`.

bf16 pays only where the CPU multiplies bf16 natively (avx512_bf16, AMX):
on the 2-core EPYC machines here a bf16 matmul ran 1.3-3x faster than fp32
in some sessions and no faster in others, although both reported
avx512_bf16. So "auto" measures instead of trusting the flags: it times a
1024^3 matmul in both precisions (about 0.3 s) and picks bf16 when it is
clearly faster. With a GPU it keeps float32 (the GPU decides, not the CPU).
"""

import time

from absl import logging

# Keras dtype policy of each resolved --mixed_precision value.
POLICIES = {"none": "float32", "bf16": "mixed_bfloat16",
            "fp16": "mixed_float16"}
# bf16 must beat fp32 matmuls by this much: the rest of a training step
# (casts, float32 softmax/LayerNorm/loss) gains less than the matmuls.
_REQUIRED_SPEEDUP = 1.3


def matmul_seconds(dtype, size=1024, repeats=5):
    """Best of `repeats` timings of a `size`^3 matmul in `dtype` (a
    TensorFlow dtype or its name), after a warm-up run."""
    import tensorflow as tf

    a = tf.cast(tf.random.stateless_normal([size, size], [1, 2]), dtype)
    multiply = tf.function(lambda x: tf.reduce_sum(
        tf.cast(tf.matmul(x, x)[0, 0], tf.float32)))
    multiply(a).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        multiply(a).numpy()
        best = min(best, time.perf_counter() - start)
    return best


def bf16_matmul_speedup():
    """fp32 time / bf16 time of a 1024^3 matmul on this machine's CPU."""
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return matmul_seconds(tf.float32) / matmul_seconds(tf.bfloat16)


def resolve_precision(requested, model_dir=None):
    """"none", "bf16" or "fp16" for `requested` (one of config.PRECISIONS).

    "auto" keeps the choice a run in `model_dir` started with, so that a
    resumed run does not switch precision on a machine near the threshold.
    """
    import tensorflow as tf

    from t2t_repro.checkpoints import RunDir

    if requested != "auto":
        return requested
    started = RunDir(model_dir).load_training_options() if model_dir else None
    if started:
        return started["mixed_precision"]
    if tf.config.list_physical_devices("GPU"):
        return "none"
    speedup = bf16_matmul_speedup()
    chosen = "bf16" if speedup >= _REQUIRED_SPEEDUP else "none"
    logging.info("--mixed_precision=auto: bf16 matmuls run %.2fx fp32 on "
                 "this CPU; training in %s", speedup,
                 "bf16" if chosen == "bf16" else "float32")
    return chosen
