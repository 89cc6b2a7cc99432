"""Learned absolute position embeddings (paper Table 3, row E)."""

import keras
import tensorflow as tf

from t2t_repro.layers.shapes import dims


@keras.saving.register_keras_serializable(package="t2t_repro")
class LearnedPositionEncoding(keras.layers.Layer):
    """A trained `[max_length, d_model]` table, one row per position.

    Shapes:
        inputs: `[batch, length, d_model]` (only its shape is used).
        start_index: scalar position of the first input.
        returns: `[batch, length, d_model]`.

    Args:
        max_length: number of positions; longer inputs are an error.

    Example:
    >>> layer = LearnedPositionEncoding(max_length=64)
    >>> layer(tf.zeros([2, 7, 16])).shape
    TensorShape([2, 7, 16])
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, inputs_shape[-1]),
            initializer=keras.initializers.RandomNormal(
                stddev=inputs_shape[-1] ** -0.5
            ),
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = dims(inputs)
        tf.debugging.assert_less_equal(
            shape[1] + start_index,
            self.max_length,
            message="sequence longer than the learned position table",
        )
        encoding = tf.slice(
            tf.convert_to_tensor(self.position_embeddings),
            [start_index, 0],
            [shape[1], -1],
        )
        return tf.broadcast_to(tf.cast(encoding, inputs.dtype), shape)

    def get_config(self):
        config = super().get_config()
        config.update({"max_length": self.max_length})
        return config
