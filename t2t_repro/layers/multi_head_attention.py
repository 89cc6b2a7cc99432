"""Multi-head attention with an optional key/value cache."""

import keras
import tensorflow as tf

from t2t_repro.layers.dense import Dense
from t2t_repro.layers.dense_2d import dense_2d
from t2t_repro.layers.scaled_dot_product_attention import (
    ScaledDotProductAttention,
)
from t2t_repro.layers.shapes import dims


def write_positions(cache, update, index):
    """`cache` `[batch, heads, length, depth]` with `update` `[batch, heads,
    n, depth]` written at positions index .. index + n - 1.

    A scatter rather than a dynamic_update_slice: TensorFlow has no kernel
    of its own for XlaDynamicUpdateSlice (what `keras.ops.slice_update`
    emits), so a graph holding it runs only where XLA may compile, and
    TF Serving's model server disables XLA by default (its
    --xla_cpu_compilation_enabled). A scatter has both a CPU kernel and an
    XLA lowering.

    >>> cache = tf.zeros([1, 1, 4, 1])
    >>> update = tf.ones([1, 1, 2, 1])
    >>> write_positions(cache, update, 1)[0, 0, :, 0].numpy().tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    shape = dims(update)
    grid = tf.meshgrid(
        tf.range(shape[0]),
        tf.range(shape[1]),
        index + tf.range(shape[2]),
        indexing="ij",
    )
    return tf.tensor_scatter_nd_update(cache, tf.stack(grid, axis=-1), update)


def _beams_as_queries(x, sentences):
    """`[sentences * beams, heads, length, d]` -> `[sentences, heads,
    beams * length, d]` (row b * beams + k is sentence b's beam k), and
    beams."""
    shape = dims(x)
    beams = shape[0] // sentences
    x = tf.reshape(x, [sentences, beams, shape[1], shape[2], shape[3]])
    x = tf.transpose(x, [0, 2, 1, 3, 4])
    return tf.reshape(x, [sentences, shape[1], beams * shape[2], shape[3]]), beams


def _queries_as_beams(x, beams):
    """The inverse of `_beams_as_queries`."""
    shape = dims(x)
    x = tf.reshape(x, [shape[0], shape[1], beams, shape[2] // beams, shape[3]])
    x = tf.transpose(x, [0, 2, 1, 3, 4])
    return tf.reshape(x, [shape[0] * beams, shape[1], shape[2] // beams, shape[3]])


@keras.saving.register_keras_serializable(package="t2t_repro")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (section 3.2.2).

    head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i), with d_k = d_v =
    d_model / h unless `key_dim` / `value_dim` say otherwise (Table 3's
    rows A and B vary them). Used as self-attention (`key_value` is the
    query) and as encoder-decoder attention (`key_value` is the encoder
    output).

    Incremental decoding keeps projected keys and values in a cache, a pair
    (keys `[batch, heads, length, d_k]`, values `[batch, heads, length,
    d_v]`), laid out as attention reads them, so a step copies nothing per
    head:
    - self-attention: pass `cache` and the new position's `key_value`.
      With `cache_update_index`, the cache is a preallocated buffer of the
      longest output (fixed shapes, as XLA needs): the new keys and values
      are written there (a scatter, see `write_positions`) and the mask
      must hide the slots not yet written. Without it, they are appended,
      so each step reads and copies only the positions decoded so far;
    - cross-attention: build the cache once with `compute_cache(encoder
      output)` and pass it without `key_value`; it is only read. The query
      may have `beams` times the cache's rows (row b * beams + k follows
      sentence b): each sentence's keys and values are then read once for
      all its beams, in one matmul with `beams` query rows, rather than
      copied per beam.

    Shapes:
        query: `[batch, query_length, d_model]`
        key_value: `[batch, key_length, d_model]` (None when only reading
            a cache)
        attention_mask: boolean, broadcastable to
            `[batch, heads, query_length, key_length]`, True = attend.
        returns: `[batch, query_length, d_model]`; then the updated cache if
            `cache` was given; then weights `[batch, heads, query_length,
            key_length]` if `return_attention_scores`.

    Args:
        num_heads: h.
        d_model: model width; must be divisible by `num_heads` unless both
            depths are given.
        key_dim: d_k, the depth of each head's queries and keys (default
            d_model / h).
        value_dim: d_v, the depth of each head's values (default
            d_model / h).
        dropout: dropout on the attention weights.

    Example:
    >>> mha = MultiHeadAttention(num_heads=8, d_model=512)
    >>> x = tf.random.normal([2, 10, 512])
    >>> mha(x, x).shape
    TensorShape([2, 10, 512])
    """

    def __init__(
        self, num_heads, d_model, key_dim=None, value_dim=None, dropout=0.0, **kwargs
    ):
        super().__init__(**kwargs)
        if (key_dim is None or value_dim is None) and d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}"
            )
        self.num_heads = num_heads
        self.d_model = d_model
        self.key_dim = key_dim or d_model // num_heads
        self.value_dim = value_dim or d_model // num_heads
        self.dropout = dropout
        self.query_dense = Dense(num_heads * self.key_dim, name="query")
        self.key_dense = Dense(num_heads * self.key_dim, name="key")
        self.value_dense = Dense(num_heads * self.value_dim, name="value")
        self.output_dense = Dense(d_model, name="output")
        self.attention = ScaledDotProductAttention(dropout, name="attention")

    def build(self, query_shape, key_value_shape=None):
        inputs_shape = query_shape[:-1] + (self.d_model,)
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.build(inputs_shape)
        self.output_dense.build(query_shape[:-1] + (self.num_heads * self.value_dim,))
        self.built = True

    def _split_heads(self, x, depth):
        """[batch, length, heads * depth] -> [batch, heads, length, depth]."""
        shape = dims(x)
        if x.shape[1] == 1:
            # A decoding step: with one position, moving the heads axis
            # moves no data, and a reshape costs nothing where a transpose
            # op per head split costs ~30 us.
            return tf.reshape(x, [shape[0], self.num_heads, 1, depth])
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, depth])
        return tf.transpose(x, [0, 2, 1, 3])

    def compute_cache(self, key_value):
        """Projects keys and values once: (`[batch, heads, length, d_k]`,
        `[batch, heads, length, d_v]`)."""
        return (
            self._split_heads(dense_2d(self.key_dense, key_value), self.key_dim),
            self._split_heads(dense_2d(self.value_dense, key_value), self.value_dim),
        )

    def call(
        self,
        query,
        key_value=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        training=None,
        return_attention_scores=False,
    ):
        if cache is None:
            k, v = self.compute_cache(key_value)
        else:
            k, v = cache
            if key_value is not None:
                new_k, new_v = (
                    tf.cast(t, k.dtype) for t in self.compute_cache(key_value)
                )
                if cache_update_index is None:
                    k = tf.concat([k, new_k], axis=2)
                    v = tf.concat([v, new_v], axis=2)
                else:
                    k = write_positions(k, new_k, cache_update_index)
                    v = write_positions(v, new_v, cache_update_index)
        q = self._split_heads(dense_2d(self.query_dense, query), self.key_dim)
        shared_source = cache is not None and key_value is None
        if shared_source:
            q, beams = _beams_as_queries(q, dims(k)[0])
        attended, weights = self.attention(
            q,
            k,
            v,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=True,
        )
        if shared_source:
            attended = _queries_as_beams(attended, beams)
            weights = _queries_as_beams(weights, beams)
        shape = dims(attended)
        if query.shape[1] != 1:  # see _split_heads
            attended = tf.transpose(attended, [0, 2, 1, 3])
        # A static query length stays static: the next layer's
        # _split_heads needs it to know a step from a sequence.
        attended = tf.reshape(
            attended,
            [shape[0], query.shape[1] or shape[2], self.num_heads * self.value_dim],
        )
        output = dense_2d(self.output_dense, attended)
        results = (output,)
        if cache is not None:
            results += ((k, v),)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "d_model": self.d_model,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
            }
        )
        return config
