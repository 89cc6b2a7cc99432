"""Decoding in bf16: the `--precision` of t2t-export, t2t-translate,
t2t-eval and t2t-score, and `precision=` in the Python API.

A bf16 decoder holds its weights in bfloat16 and multiplies in bfloat16
(Keras' "bfloat16" policy rather than "mixed_bfloat16", which would cast
every float32 weight at every decoding step); LayerNorm, the attention
softmax and the output log-probabilities stay float32. It pays where bf16
matmuls are fast (AMX, avx512_bf16 on some CPUs) and costs elsewhere, so
"auto" measures this machine, as `--mixed_precision=auto` does for
training. An export keeps the precision it was made in, whatever machine
serves it.
"""

import keras
import tensorflow as tf
from absl import logging

from t2t_repro.training.precision import (REQUIRED_SPEEDUP,
                                          bf16_matmul_speedup)

PRECISIONS = ("fp32", "bf16", "auto")
_POLICIES = {"fp32": "float32", "bf16": "bfloat16"}


def resolve_precision(precision):
    """"fp32" or "bf16" for `precision` (one of PRECISIONS); "auto"
    times bf16 against float32 matmuls here (about 0.3 s) and logs what
    it chose."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of "
                         f"{', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    speedup = bf16_matmul_speedup()
    chosen = "bf16" if speedup >= REQUIRED_SPEEDUP else "fp32"
    logging.info("--precision=auto: bf16 matmuls run %.2fx fp32 on this "
                 "CPU; decoding in %s", speedup, chosen)
    return chosen


def in_precision(model, precision):
    """`model` itself for fp32 (or a model already in that precision), else
    a copy of it whose weights and computation are bfloat16."""
    from t2t_repro.model import Transformer

    policy = _POLICIES[resolve_precision(precision)]
    if model.dtype_policy.name == policy:
        return model
    previous = keras.mixed_precision.global_policy()
    # Sub-layers take the global policy when built, not their parent's.
    keras.mixed_precision.set_global_policy(policy)
    try:
        copy = Transformer(model.config, name=model.name)
        copy.build_model()
    finally:
        keras.mixed_precision.set_global_policy(previous)
    for target, source in zip(copy.weights, model.weights, strict=True):
        target.assign(tf.cast(source, target.dtype))
    return copy
