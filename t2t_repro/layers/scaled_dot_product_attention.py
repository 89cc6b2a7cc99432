"""Scaled dot-product attention (Vaswani et al., 2017, section 3.2.1)."""

import keras
import tensorflow as tf

from t2t_repro import kernels
from t2t_repro.layers.dropout import Dropout
from t2t_repro.layers.masks import NEG_INF
from t2t_repro.layers.shapes import dims


@keras.saving.register_keras_serializable(package="t2t_repro")
class ScaledDotProductAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k)) V with a boolean mask.

    Shapes:
        query: `[batch, heads, query_length, d_k]`
        key: `[batch, heads, key_length, d_k]`
        value: `[batch, heads, key_length, d_v]`
        attention_mask: boolean, broadcastable to `[batch, heads, query_length,
            key_length]`; True where attention is allowed. Disallowed
            positions receive exactly zero weight; a query with no allowed
            key gets a zero output.
        returns: `[batch, heads, query_length, d_v]`, and with
            `return_attention_scores=True` also the weights
            `[batch, heads, query_length, key_length]`.

    The softmax is computed in float32 whatever the compute dtype.

    Args:
        dropout: dropout rate applied to the attention weights in training.

    Example:
    >>> attention = ScaledDotProductAttention()
    >>> q = tf.random.normal([2, 4, 5, 16]); kv = tf.random.normal([2, 4, 7, 16])
    >>> attention(q, kv, kv).shape
    TensorShape([2, 4, 5, 16])
    """

    def __init__(self, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self._dropout_layer = Dropout(dropout)

    def call(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        depth_sqrt = tf.sqrt(tf.cast(dims(query)[-1], tf.float32))
        logits = tf.matmul(query, key, transpose_b=True)
        if (
            attention_mask is not None
            and attention_mask.shape.rank == 4
            # The kernel's mask has the keys axis (broadcasts the others).
            and attention_mask.shape[-1] != 1
            and kernels.applies_to(logits.dtype)
        ):
            weights = kernels.masked_softmax(logits, attention_mask, depth_sqrt)
        else:
            weights = tf.cast(
                _masked_softmax(logits, attention_mask, depth_sqrt), query.dtype
            )
        dropped = self._dropout_layer(weights, training=training)
        output = tf.matmul(dropped, value)
        if return_attention_scores:
            return output, weights
        return output

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout})
        return config


def _masked_softmax(logits, attention_mask, depth_sqrt):
    """float32 softmax(where(mask, logits / depth_sqrt, NEG_INF)) * mask."""
    logits = tf.cast(logits, tf.float32) / depth_sqrt
    if attention_mask is None:
        return tf.nn.softmax(logits, axis=-1)
    attention_mask = tf.cast(attention_mask, tf.bool)
    weights = tf.nn.softmax(tf.where(attention_mask, logits, NEG_INF), axis=-1)
    return weights * tf.cast(attention_mask, weights.dtype)
