"""Projections of sequences as one 2-D matmul."""

import tensorflow as tf

from t2t_repro.layers.shapes import dims


def dense_2d(dense, x):
    """Applies `dense` to `[..., width]` via a `[rows, width]` matmul.

    `dense` maps `[rows, width]` to `[rows, units]`: a Keras Dense layer,
    or a function such as the tied output projection's matmul. TensorFlow's
    broadcasting 3-D x 2-D matmul goes through tensordot's reshapes and
    transposes, and oneDNN's fused 2-D MatMul(+BiasAdd) is the fast path on
    a CPU, so sequences are flattened first.
    """
    leading = dims(x)[:-1]
    flat = tf.reshape(x, [-1, x.shape[-1]])
    output = dense(flat)
    return tf.reshape(output, [*leading, output.shape[-1]])
