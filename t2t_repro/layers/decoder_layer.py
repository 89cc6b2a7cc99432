"""Transformer decoder layer (section 3.1) with incremental decoding."""

import keras

from t2t_repro.layers.encoder_layer import LAYER_NORM_EPSILON, EncoderLayer
from t2t_repro.layers.layer_normalization import LayerNormalization


@keras.saving.register_keras_serializable(package="t2t_repro")
class DecoderLayer(EncoderLayer):
    """Masked self-attention, encoder-decoder attention, feed-forward.

    Each sub-layer has a residual connection and LayerNorm, post-norm or
    pre-norm as in `EncoderLayer`, whose sizes and arguments it shares.

    Incremental decoding: pass the `self_attention_cache` (keys, values)
    of the positions before the new token's, or a preallocated buffer with
    `cache_update_index` (the position of the single new token; see
    `MultiHeadAttention`), and `cross_attention_cache` built by
    `cross_attention.compute_cache(encoder_output)`; the layer then also
    returns the updated self-attention cache.

    Shapes:
        inputs: `[batch, target_length, d_model]`
        encoder_output: `[batch, source_length, d_model]` (unused when a
            cross-attention cache is given)
        self_attention_mask: boolean broadcastable to
            `[batch, 1, target_length, target_length or max_length]`:
            causal and padding, True = attend.
        cross_attention_mask: boolean `[batch, 1, 1, source_length]`.
        returns: `[batch, target_length, d_model]`, then the updated cache
            (if given), then `{"self": ..., "cross": ...}` attention weights
            (if `return_attention_scores`).

    Example:
    >>> layer = DecoderLayer(d_model=64, num_heads=4, d_ff=128)
    >>> y = keras.ops.zeros([2, 5, 64]); memory = keras.ops.zeros([2, 9, 64])
    >>> layer(y, memory).shape
    TensorShape([2, 5, 64])
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention_norm = LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="cross_attention_norm"
        )

    def build(self, inputs_shape, encoder_output_shape=None):
        super().build(inputs_shape)
        self.cross_attention.build(inputs_shape)
        self.cross_attention_norm.build(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        self_attention_cache=None,
        cache_update_index=None,
        cross_attention_cache=None,
        training=None,
        return_attention_scores=False,
    ):
        weights = {}
        new_cache = []

        def self_attend(x):
            result = self.self_attention(
                x,
                x,
                attention_mask=self_attention_mask,
                cache=self_attention_cache,
                cache_update_index=cache_update_index,
                training=training,
                return_attention_scores=True,
            )
            if self_attention_cache is not None:
                output, cache, weights["self"] = result
                new_cache.append(cache)
            else:
                output, weights["self"] = result
            return output

        def cross_attend(x):
            if cross_attention_cache is None:
                output, weights["cross"] = self.cross_attention(
                    x,
                    encoder_output,
                    attention_mask=cross_attention_mask,
                    training=training,
                    return_attention_scores=True,
                )
            else:
                output, _, weights["cross"] = self.cross_attention(
                    x,
                    attention_mask=cross_attention_mask,
                    cache=cross_attention_cache,
                    training=training,
                    return_attention_scores=True,
                )
            return output

        keep = self._layer_keep(inputs, training)
        x = self._residual(inputs, self_attend, self.attention_norm, training, keep)
        x = self._residual(x, cross_attend, self.cross_attention_norm, training, keep)
        x = self._residual(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            training,
            keep,
        )
        results = (x,)
        if self_attention_cache is not None:
            results += (new_cache[0],)
        if return_attention_scores:
            results += (weights,)
        return results[0] if len(results) == 1 else results
