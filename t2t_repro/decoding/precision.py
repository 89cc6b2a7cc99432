"""Decoding in bf16: `--precision` of t2t-export, t2t-translate and
t2t-eval, and `precision=` of `export_saved_model` and `Translator`.

A bf16 decoder holds its weights in bfloat16 and multiplies in bfloat16
(Keras' "bfloat16" policy rather than "mixed_bfloat16", which would cast
every float32 weight at every decoding step); LayerNorm and the attention
softmax compute in float32 (from bf16 weights), and the scores are
float32. It pays where bf16 matmuls are much faster than float32 ones
(AMX), so "auto" measures this machine, as `--mixed_precision=auto` does
for training. An export keeps the precision it was made in, whatever
machine serves it.
"""

import tensorflow as tf
from absl import logging

from t2t_repro.config import BF16_DECODING_SPEEDUP, DECODING_PRECISIONS
from t2t_repro.training.precision import matmul_speedup

_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def resolve_precision(precision):
    """ "fp32" or "bf16" for `precision` (one of DECODING_PRECISIONS); "auto"
    times bf16 against float32 matmuls on the device that will decode
    (about 0.3 s) and logs what it chose."""
    if precision not in DECODING_PRECISIONS:
        raise ValueError(
            f"precision {precision!r}: expected one of {', '.join(DECODING_PRECISIONS)}"
        )
    if precision != "auto":
        return precision
    device = "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"
    speedup = matmul_speedup("bfloat16", device)
    chosen = "bf16" if speedup >= BF16_DECODING_SPEEDUP else "fp32"
    logging.info(
        "--precision=auto: bf16 matmuls run %.2fx fp32 on %s; decoding in %s",
        speedup,
        device,
        chosen,
    )
    return chosen


def in_precision(model, precision):
    """`model` as it is for precision None, or if its weights and
    computation are already in `precision` ("fp32", "bf16", "auto"); else
    a copy of it whose weights and computation are."""
    if precision is None:
        return model
    dtype = _DTYPES[resolve_precision(precision)]
    if model.compute_dtype == dtype and all(
        w.dtype == dtype for w in model.trainable_weights
    ):
        return model
    from t2t_repro.model import Transformer, global_policy

    with global_policy(dtype):
        copy = Transformer(model.config, name=model.name)
    for target, source in zip(copy.weights, model.weights, strict=True):
        target.assign(tf.cast(source, target.dtype))
    return copy
