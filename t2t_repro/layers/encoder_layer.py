"""Transformer encoder layer (section 3.1)."""

import keras

from t2t_repro.layers.dropout import Dropout
from t2t_repro.layers.layer_normalization import LayerNormalization
from t2t_repro.layers.multi_head_attention import MultiHeadAttention
from t2t_repro.layers.position_wise_feed_forward import (
    PositionWiseFeedForward,
)

LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package="t2t_repro")
class EncoderLayer(keras.layers.Layer):
    """Self-attention then feed-forward, each with residual and LayerNorm.

    Post-norm (the paper): x = LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm: x = x + Dropout(Sublayer(LayerNorm(x))); the stack then needs
    a final LayerNorm, which the model adds.

    Shapes:
        inputs: `[batch, source_length, d_model]`
        attention_mask: boolean `[batch, 1, 1, source_length]`, True for real tokens.
        returns: `[batch, source_length, d_model]`, plus the self-attention
            weights `[batch, heads, source_length, source_length]` with
            `return_attention_scores=True`.

    Args:
        d_model, num_heads, d_ff: sizes.
        dropout: residual dropout (P_drop).
        attention_dropout: dropout on attention weights.
        relu_dropout: dropout inside the feed-forward network.
        layer_dropout: in training, the probability that the whole layer
            is skipped for a sentence (stochastic depth; LayerDrop, Fan et
            al., 2020, decides per batch): each residual branch of the
            layer is multiplied by one mask per sentence, 0 or
            1 / (1 - layer_dropout), so a skipped layer passes its input
            through and the expected output is unchanged. Pre-norm only:
            a post-norm layer normalises its output even when skipped.
        pre_norm: use pre-norm instead of the paper's post-norm.

    Example:
    >>> layer = EncoderLayer(d_model=64, num_heads=4, d_ff=128)
    >>> layer(keras.ops.zeros([2, 9, 64])).shape
    TensorShape([2, 9, 64])
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        dropout=0.1,
        attention_dropout=0.0,
        relu_dropout=0.0,
        layer_dropout=0.0,
        pre_norm=False,
        key_dim=None,
        value_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.layer_dropout = layer_dropout
        self.pre_norm = pre_norm
        if layer_dropout and not pre_norm:
            raise ValueError("layer_dropout needs pre_norm")
        self.self_attention = self._attention("self_attention")
        self.feed_forward = PositionWiseFeedForward(
            d_model, d_ff, relu_dropout, name="feed_forward"
        )
        self.attention_norm = LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="self_attention_norm"
        )
        self.feed_forward_norm = LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="feed_forward_norm"
        )
        self.residual_dropout = Dropout(dropout)
        # Only where asked: its seed is a checkpointed variable. Float32,
        # so that a bf16 model's branches are scaled by 1 / (1 - rate)
        # exactly (bf16 rounds 1 / 0.9 to 1.109).
        self.layer_drop = (
            Dropout(layer_dropout, dtype="float32") if layer_dropout else None
        )

    def _attention(self, name):
        return MultiHeadAttention(
            self.num_heads,
            self.d_model,
            self.key_dim,
            self.value_dim,
            self.attention_dropout,
            name=name,
        )

    def build(self, inputs_shape):
        self.self_attention.build(inputs_shape)
        self.feed_forward.build(inputs_shape)
        self.attention_norm.build(inputs_shape)
        self.feed_forward_norm.build(inputs_shape)
        self.built = True

    def _layer_keep(self, inputs, training):
        """The layer's scaled keep mask `[batch, 1, 1]` (one draw per
        sentence for all its sub-layers), or None outside training."""
        if self.layer_drop is None or not training:
            return None
        ones = keras.ops.ones([keras.ops.shape(inputs)[0], 1, 1], "float32")
        return self.layer_drop(ones, training=training)

    def _residual(self, x, sublayer, norm, training, keep=None):
        if self.pre_norm:
            branch = self.residual_dropout(sublayer(norm(x)), training=training)
            if keep is not None:
                scaled = keras.ops.cast(branch, "float32") * keep
                branch = keras.ops.cast(scaled, branch.dtype)
            return x + branch
        return norm(x + self.residual_dropout(sublayer(x), training=training))

    def call(
        self, inputs, attention_mask=None, training=None, return_attention_scores=False
    ):
        weights = []

        def attend(x):
            output, scores = self.self_attention(
                x,
                x,
                attention_mask=attention_mask,
                training=training,
                return_attention_scores=True,
            )
            weights.append(scores)
            return output

        keep = self._layer_keep(inputs, training)
        x = self._residual(inputs, attend, self.attention_norm, training, keep)
        x = self._residual(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            training,
            keep,
        )
        if return_attention_scores:
            return x, weights[0]
        return x

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "d_ff": self.d_ff,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "relu_dropout": self.relu_dropout,
                "layer_dropout": self.layer_dropout,
                "pre_norm": self.pre_norm,
            }
        )
        return config
