"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5)."""

import keras
import tensorflow as tf

from t2t_repro.layers.shapes import dims


@keras.saving.register_keras_serializable(package="t2t_repro")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).

    Sine and cosine are interleaved exactly as in the paper's formula, for
    any sequence length; there are no weights.

    Shapes:
        inputs: `[batch, length, d_model]` (only its shape is used).
        start_index: scalar position of the first input (incremental
            decoding feeds one position at a time).
        returns: `[batch, length, d_model]`, the encoding broadcast to the
            input's shape, in the input's dtype.

    Example:
    >>> x = tf.zeros([2, 7, 16])
    >>> SinusoidalPositionEncoding()(x).shape
    TensorShape([2, 7, 16])
    """

    def call(self, inputs, start_index=0):
        shape = dims(inputs)
        d_model = inputs.shape[-1]
        if d_model % 2:
            raise ValueError(f"d_model must be even, got {d_model}")
        positions = tf.cast(tf.range(shape[1]) + start_index, tf.float32)[:, tf.newaxis]
        two_i = tf.range(0, d_model, 2, dtype=tf.float32)[tf.newaxis, :]
        angles = positions / tf.pow(10000.0, two_i / d_model)
        encoding = tf.reshape(
            tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1), [shape[1], d_model]
        )
        return tf.broadcast_to(tf.cast(encoding, inputs.dtype), shape)
