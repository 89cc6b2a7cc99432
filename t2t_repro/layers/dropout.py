"""Dropout that draws 16 random bits per element rather than a float."""

import keras
import tensorflow as tf

from t2t_repro import kernels

_THRESHOLD_STEPS = 1 << 16


@keras.saving.register_keras_serializable(package="t2t_repro")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same seed generator, same checkpoint) with a
    cheaper mask: one Philox draw of 32 bits decides two elements, each
    kept when its 16 bits reach round(rate * 2^16), where Keras draws a
    float per element; and the kept values are scaled by one multiply with
    a ready-made mask in the forward and backward passes. The random
    numbers and the extra passes of Keras' dropout were a tenth of a bf16
    training step (scripts/profile_train.py).

    The rate is thus a multiple of 2^-16 (0.1 drops 6,554 / 65,536 =
    0.100006), and the scale is the kept fraction's inverse, so expected
    values are unchanged. With `noise_shape`, one draw decides each
    broadcast slice (a whole token), applied in float32; with a rate that
    rounds to 0 or 1, Keras' dropout runs. Inside
    `t2t_repro.kernels.enabled(True)`
    (a training step on CPUs) a C++ kernel applies the same mask in one
    pass.

    Shapes: any -> the same.

    Example:
    >>> dropped = Dropout(0.5, seed=1)(tf.ones([1000]), training=True)
    >>> sorted(set(dropped.numpy().tolist()))
    [0.0, 2.0]
    """

    def call(self, inputs, training=False):
        threshold = round(self.rate * _THRESHOLD_STEPS)
        if not training or not 0 < threshold < _THRESHOLD_STEPS:
            return super().call(inputs, training=training)
        # As Keras' dropout: an int32 seed, which XLA requires.
        seed = tf.cast(
            tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32
        )
        if self.noise_shape is not None:
            # One decision per broadcast slice (a whole token, say): a small
            # mask, kept in float32 so that a bf16 model's scale is exact.
            shape = [
                tf.shape(inputs)[axis] if size is None else size
                for axis, size in enumerate(self.noise_shape)
            ]
            mask = _scaled_mask(shape, seed, threshold, tf.float32)
            return tf.cast(tf.cast(inputs, tf.float32) * mask, inputs.dtype)
        if kernels.applies_to(inputs.dtype):
            return kernels.dropout(inputs, seed, threshold)
        return inputs * _scaled_mask(tf.shape(inputs), seed, threshold, inputs.dtype)


def _scaled_mask(shape, seed, threshold, dtype):
    """`shape` elements of `dtype`, each 0 where its 16 random bits are
    below `threshold`, else 2^16 / (2^16 - threshold)."""
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform(
        [(size + 1) // 2],
        seed,
        minval=None,
        maxval=None,
        dtype=tf.uint32,
        alg="philox",
    )
    bits = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    scale = _THRESHOLD_STEPS / (_THRESHOLD_STEPS - threshold)
    return tf.where(
        tf.reshape(bits, shape) >= threshold,
        tf.constant(scale, dtype),
        tf.constant(0, dtype),
    )
