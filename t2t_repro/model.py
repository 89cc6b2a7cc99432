"""The Transformer: encoder and decoder stacks over a shared embedding."""

import contextlib
import dataclasses

import keras
import tensorflow as tf

from t2t_repro import layers
from t2t_repro.config import TransformerConfig
from t2t_repro.layers.dropout import Dropout
from t2t_repro.layers.encoder_layer import LAYER_NORM_EPSILON
from t2t_repro.layers.layer_normalization import LayerNormalization
from t2t_repro.layers.masks import causal_mask, padding_mask, positions_up_to


@keras.saving.register_keras_serializable(package="t2t_repro")
class Transformer(keras.Model):
    """Encoder-decoder Transformer (Vaswani et al., 2017).

    `call((source_ids, target_input_ids))` returns logits; `encode` and
    `decode` run the halves separately, and `decode_step` runs the decoder
    one position at a time over a key/value cache (see
    `start_decoding`) for greedy and beam search.

    Shapes:
        source_ids: int `[batch, source_length]`, padded with PAD_ID (0).
        target_input_ids: int `[batch, target_length]`, BOS then the target.
        returns: logits `[batch, target_length, vocab_size]`, float32
            unless `float32_logits=False` (see `SharedEmbedding.project`).

    Args:
        config: a `TransformerConfig` (or its dict form).

    Example:
    >>> model = Transformer(TransformerConfig(vocab_size=100, d_model=32,
    ...     num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2))
    >>> model((tf.constant([[5, 6, 3]]), tf.constant([[2, 7]]))).shape
    TensorShape([1, 2, 100])
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig(**config)
        self.config = config
        c = config
        self.embedding = layers.SharedEmbedding(
            c.vocab_size, c.d_model, name="shared_embedding"
        )
        if c.position_encoding == "learned":
            self.position_encoding = layers.LearnedPositionEncoding(
                c.max_length, name="position_encoding"
            )
        else:
            self.position_encoding = layers.SinusoidalPositionEncoding(
                name="position_encoding"
            )
        self.embedding_dropout = Dropout(c.dropout)
        # Only where asked: its seed is a checkpointed variable.
        self.source_word_dropout = (
            Dropout(c.source_word_dropout, noise_shape=(None, None, 1))
            if c.source_word_dropout
            else None
        )
        key_dim, value_dim = c.head_dims
        sizes = dict(
            d_model=c.d_model,
            num_heads=c.num_heads,
            d_ff=c.d_ff,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout=c.dropout,
            attention_dropout=c.attention_dropout,
            relu_dropout=c.relu_dropout,
            layer_dropout=c.layer_dropout,
            pre_norm=c.pre_norm,
        )
        self.encoder_layers = [
            layers.EncoderLayer(**sizes, name=f"encoder_layer_{i}")
            for i in range(c.num_encoder_layers)
        ]
        self.decoder_layers = [
            layers.DecoderLayer(**sizes, name=f"decoder_layer_{i}")
            for i in range(c.num_decoder_layers)
        ]
        if c.pre_norm:
            self.encoder_norm = LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name="encoder_norm"
            )
            self.decoder_norm = LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name="decoder_norm"
            )
        self.build()

    def build(self, input_shape=None):
        """Creates every weight from shapes alone, in the order a first call
        would (so a seed gives the same initial weights). Without it, Keras
        would build a model by tracing its whole call once more."""
        sequence_shape = (None, None, self.config.d_model)
        self.embedding.build()
        self.position_encoding.build(sequence_shape)
        for layer in self.encoder_layers:
            layer.build(sequence_shape)
        if self.config.pre_norm:
            self.encoder_norm.build(sequence_shape)
        for layer in self.decoder_layers:
            layer.build(sequence_shape, sequence_shape)
        if self.config.pre_norm:
            self.decoder_norm.build(sequence_shape)

    def _final_norm(self, norm_name, x):
        return getattr(self, norm_name)(x) if self.config.pre_norm else x

    def embed(self, ids, start_index=0, training=None, word_dropout=None):
        """sqrt(d_model) * E[ids] + PE, then dropout; `word_dropout` (a
        `Dropout` over whole tokens) applies to E[ids] only, so a dropped
        token keeps its position."""
        x = self.embedding(ids)
        if word_dropout is not None:
            x = word_dropout(x, training=training)
        x = x + self.position_encoding(x, start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Returns the encoder output `[batch, source_length, d_model]`.

        With `return_attention_scores`, also the list of per-layer
        self-attention weights `[batch, heads, source_length, source_length]`.
        """
        mask = padding_mask(source_ids)
        x = self.embed(
            source_ids,
            training=training,
            word_dropout=self.source_word_dropout,
        )
        all_weights = []
        for layer in self.encoder_layers:
            x, weights = layer(
                x, attention_mask=mask, training=training, return_attention_scores=True
            )
            all_weights.append(weights)
        x = self._final_norm("encoder_norm", x)
        if return_attention_scores:
            return x, all_weights
        return x

    def decode(
        self,
        target_input_ids,
        encoder_output,
        source_ids,
        training=None,
        return_attention_scores=False,
        float32_logits=True,
    ):
        """Teacher-forced decoder: logits `[batch, target_length, vocab]`.

        With `return_attention_scores`, also a list (one per layer) of
        `{"self": ..., "cross": ...}` attention weights.
        """
        x = self.embed(target_input_ids, training=training)
        self_mask = causal_mask(tf.shape(target_input_ids)[1])
        cross_mask = padding_mask(source_ids)
        all_weights = []
        for layer in self.decoder_layers:
            x, weights = layer(
                x,
                encoder_output,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                training=training,
                return_attention_scores=True,
            )
            all_weights.append(weights)
        logits = self.embedding.project(
            self._final_norm("decoder_norm", x), float32_logits
        )
        if return_attention_scores:
            return logits, all_weights
        return logits

    def call(self, inputs, training=None, float32_logits=True):
        source_ids, target_input_ids = inputs
        encoder_output = self.encode(source_ids, training=training)
        return self.decode(
            target_input_ids,
            encoder_output,
            source_ids,
            training=training,
            float32_logits=float32_logits,
        )

    @property
    def max_positions(self):
        """The longest sequence the position encoding allows (None: any)."""
        return self.config.max_positions

    # The decoders' contract (`t2t_repro.decoding.common.DecodingModel`).

    def start_decoding(self, source_ids, buffer_length=None, beams=1):
        """Encodes `source_ids` and returns the state `decode_step` needs,
        for `beams` hypotheses per sentence (row b * beams + k).

        A dict of per-layer (keys, values) pairs: "self", the decoder's own
        positions `[rows, heads, length, d_k or d_v]`, empty (they grow by
        one position per step) or, with `buffer_length`, zeros of that
        length (fixed shapes, for XLA); "cross", the projected encoder keys
        and values, once per sentence (all its beams read them) `[batch,
        heads, source_length, d_k or d_v]`; and "source_mask". Separate
        tensors per layer, so that a step rewrites each cache once and
        never restacks them.
        """
        encoder_output = self.encode(source_ids, training=False)
        cross = tuple(
            layer.cross_attention.compute_cache(encoder_output)
            for layer in self.decoder_layers
        )
        rows = tf.shape(source_ids)[0] * beams
        heads = self.config.num_heads
        length = 0 if buffer_length is None else buffer_length
        return {
            "self": tuple(
                tuple(
                    tf.zeros([rows, heads, length, depth], encoder_output.dtype)
                    for depth in self.config.head_dims
                )
                for _ in self.decoder_layers
            ),
            "cross": cross,
            "source_mask": padding_mask(source_ids),
        }

    def decode_step(self, token_ids, index, cache, buffered=False):
        """Decodes position `index` given the token there.

        Args:
            token_ids: int `[rows, 1]`, the token at position `index`.
            index: scalar int, the position being decoded.
            cache: from `start_decoding` (or a previous step).
            buffered: whether `start_decoding` was given a `buffer_length`.

        Returns:
            (logits `[rows, vocab]` for position index + 1, updated cache).
        """
        x = self.embed(token_ids, start_index=index, training=False)
        self_mask = None  # a growing cache holds only positions <= index
        if buffered:
            self_mask = positions_up_to(index, tf.shape(cache["self"][0][0])[2])
        new_self_cache = []
        for layer, self_cache, cross_cache in zip(
            self.decoder_layers, cache["self"], cache["cross"]
        ):
            x, layer_cache = layer(
                x,
                self_attention_mask=self_mask,
                cross_attention_mask=cache["source_mask"],
                self_attention_cache=self_cache,
                cache_update_index=index if buffered else None,
                cross_attention_cache=cross_cache,
                training=False,
            )
            new_self_cache.append(layer_cache)
        logits = self.embedding.project(self._final_norm("decoder_norm", x))
        return logits[:, 0], {**cache, "self": tuple(new_self_cache)}

    @staticmethod
    def grow_decode_buffers(cache, buffer_length):
        """A `start_decoding(..., buffer_length=n)` state with its buffers
        zero-padded to `buffer_length` >= n positions."""

        def grow(buffer):
            missing = buffer_length - tf.shape(buffer)[2]
            return tf.pad(buffer, [[0, 0], [0, 0], [0, missing], [0, 0]])

        return {**cache, "self": tf.nest.map_structure(grow, cache["self"])}

    @staticmethod
    def reorder_decode_cache(cache, rows, sentences=None):
        """The state with row i taken from row `rows[i]` (a beam's parent,
        or a hypothesis that goes on while others leave the batch); with
        `sentences`, the state keeps only those sentences (indices, in the
        order of the rows' sentences), as when finished ones leave."""
        cache = {
            **cache,
            "self": tf.nest.map_structure(lambda t: tf.gather(t, rows), cache["self"]),
        }
        if sentences is None:
            return cache
        return {
            **cache,
            **tf.nest.map_structure(
                lambda t: tf.gather(t, sentences),
                {"cross": cache["cross"], "source_mask": cache["source_mask"]},
            ),
        }

    def get_config(self):
        return {
            "config": dataclasses.asdict(self.config),
            **{
                k: v
                for k, v in super().get_config().items()
                if k in ("name", "trainable", "dtype")
            },
        }

    @classmethod
    def from_config(cls, config):
        """The model of `get_config`'s `config`, in its dtype policy
        (a mixed_bfloat16 model reloads as one), whatever the global
        policy is."""
        config = dict(config)
        if "dtype" not in config:  # a config written without it
            return cls(**config)
        with global_policy(keras.dtype_policies.get(config.pop("dtype"))):
            return cls(**config)


@contextlib.contextmanager
def global_policy(policy):
    """Keras' global dtype policy is `policy` (a name or a DTypePolicy)
    while the block runs, and the process's again after (models built
    later, by decoders, tools or tests, are unaffected): a model's
    sub-layers take the global policy when created, not their parent's."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
