"""Multi-head attention with an optional key/value cache."""

import keras
import tensorflow as tf

from t2t_repro.layers.dense_2d import dense_2d
from t2t_repro.layers.scaled_dot_product_attention import (
    ScaledDotProductAttention,
)


def write_positions(cache, update, index):
    """`cache` `[batch, 2, heads, length, depth]` with `update` `[batch, 2,
    heads, n, depth]` written at positions index .. index + n - 1.

    A scatter rather than a dynamic_update_slice: TensorFlow has no kernel
    of its own for XlaDynamicUpdateSlice (what `keras.ops.slice_update`
    emits), so a graph holding it runs only where XLA may compile, and
    TF Serving's model server disables XLA by default (its
    --xla_cpu_compilation_enabled). A scatter has both a CPU kernel and an
    XLA lowering.

    >>> cache = tf.zeros([1, 2, 1, 4, 1])
    >>> update = tf.ones([1, 2, 1, 2, 1])
    >>> write_positions(cache, update, 1)[0, :, 0, :, 0].numpy().tolist()
    [[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]
    """
    shape = tf.shape(update)
    grid = tf.meshgrid(tf.range(shape[0]), tf.range(shape[1]),
                       tf.range(shape[2]), index + tf.range(shape[3]),
                       indexing="ij")
    return tf.tensor_scatter_nd_update(cache, tf.stack(grid, axis=-1),
                                       update)


@keras.saving.register_keras_serializable(package="t2t_repro")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (section 3.2.2).

    head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i) with d_k = d_v = d_model / h.
    Used as self-attention (`key_value` is the query) and as
    encoder-decoder attention (`key_value` is the encoder output).

    Incremental decoding keeps projected keys and values in a cache of shape
    `[batch, 2, heads, max_length, d_k]` (index 0 keys, 1 values; laid out
    as attention reads them, so a decoding step copies nothing per head):
    - self-attention: pass `cache` and `cache_update_index`; the projections
      of the new `key_value` positions are written into the cache at that
      index (a fixed-shape scatter, see `write_positions`) and attention
      runs over the whole cache, with the mask hiding the slots not yet
      written;
    - cross-attention: build the cache once with `compute_cache(encoder
      output)` and pass it without an index; it is only read.

    Shapes:
        query: `[batch, query_length, d_model]`
        key_value: `[batch, key_length, d_model]` (ignored when reading a
            cache without an update index, may be None then)
        attention_mask: boolean, broadcastable to
            `[batch, heads, query_length, key_length]`, True = attend.
        returns: `[batch, query_length, d_model]`; then the updated cache if
            `cache` was given; then weights `[batch, heads, query_length,
            key_length]` if `return_attention_scores`.

    Args:
        num_heads: h.
        d_model: model width; must be divisible by `num_heads`.
        dropout: dropout on the attention weights.

    Example:
    >>> mha = MultiHeadAttention(num_heads=8, d_model=512)
    >>> x = tf.random.normal([2, 10, 512])
    >>> mha(x, x).shape
    TensorShape([2, 10, 512])
    """

    def __init__(self, num_heads, d_model, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.d_model = d_model
        self.dropout = dropout
        self.depth = d_model // num_heads
        self.query_dense = keras.layers.Dense(d_model, name="query")
        self.key_dense = keras.layers.Dense(d_model, name="key")
        self.value_dense = keras.layers.Dense(d_model, name="value")
        self.output_dense = keras.layers.Dense(d_model, name="output")
        self.attention = ScaledDotProductAttention(dropout, name="attention")

    def build(self, query_shape, key_value_shape=None):
        for dense in (self.query_dense, self.key_dense, self.value_dense,
                      self.output_dense):
            dense.build(query_shape[:-1] + (self.d_model,))
        self.built = True

    def _split_heads(self, x):
        """[batch, length, d_model] -> [batch, heads, length, depth]."""
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, self.depth])
        return tf.transpose(x, [0, 2, 1, 3])

    def _keys_and_values(self, key_value):
        return (self._split_heads(dense_2d(self.key_dense, key_value)),
                self._split_heads(dense_2d(self.value_dense, key_value)))

    def compute_cache(self, key_value):
        """Projects keys and values once: `[batch, 2, heads, length, depth]`."""
        return tf.stack(self._keys_and_values(key_value), axis=1)

    def call(self, query, key_value=None, attention_mask=None, cache=None,
             cache_update_index=None, training=None,
             return_attention_scores=False):
        if cache is None:
            k, v = self._keys_and_values(key_value)
        else:
            kv = cache
            if cache_update_index is not None:
                update = tf.cast(self.compute_cache(key_value), cache.dtype)
                kv = write_positions(cache, update, cache_update_index)
            k, v = kv[:, 0], kv[:, 1]
        q = self._split_heads(dense_2d(self.query_dense, query))
        attended, weights = self.attention(
            q, k, v, attention_mask=attention_mask, training=training,
            return_attention_scores=True)
        attended = tf.transpose(attended, [0, 2, 1, 3])
        shape = tf.shape(attended)
        attended = tf.reshape(attended, [shape[0], shape[1], self.d_model])
        output = dense_2d(self.output_dense, attended)
        results = (output,)
        if cache is not None:
            results += (kv,)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "d_model": self.d_model,
                       "dropout": self.dropout})
        return config
