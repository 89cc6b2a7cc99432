"""What greedy and beam search share: the model's decoding contract
(`DecodingModel`), the output length limits, the buffer stages of
fixed-shape decoding, and the log-probabilities a step may choose from."""

from typing import Protocol

import tensorflow as tf

from t2t_repro.config import (
    BOS_ID,
    EOS_ID,
    EXTRA_DECODE_LENGTH,
    PAD_ID,
    TransformerConfig,
)
from t2t_repro.layers.masks import NEG_INF, sequence_lengths


class DecodingModel(Protocol):
    """What the decoders call on a model (a `Transformer`): `start_decoding`,
    then `decode_step` once per position; `reorder_decode_cache` when beams
    take their parents' rows or finished sentences leave the batch;
    `grow_decode_buffers` between the stages of fixed-shape decoding. The
    decoder state (`cache`) is opaque to the decoders: they only carry it
    through their loops, whose shape invariants let its every axis change.
    """

    @property
    def max_positions(self) -> int | None:
        """The longest output the position encoding allows (None: any)."""

    @property
    def config(self) -> TransformerConfig:
        """Its `max_length` bounds the input of a fixed-shape search traced
        for inputs of any length (`buffer_stages`)."""

    def start_decoding(
        self, source_ids: tf.Tensor, buffer_length: tf.Tensor | None = None, beams=1
    ) -> dict:
        """The state for `beams` hypotheses per sentence of `source_ids`
        (row b * beams + k); with `buffer_length`, buffers of that length
        (fixed shapes) rather than ones that grow by a position per step."""

    def decode_step(
        self, token_ids: tf.Tensor, index: tf.Tensor, cache: dict, buffered=False
    ) -> tuple[tf.Tensor, dict]:
        """(logits `[rows, vocab]` for position `index` + 1, the state)
        given the tokens `[rows, 1]` at `index`."""

    def reorder_decode_cache(
        self, cache: dict, rows: tf.Tensor, sentences: tf.Tensor | None = None
    ) -> dict:
        """The state with row i taken from row `rows[i]`; with `sentences`,
        only those sentences' shared state kept."""

    def grow_decode_buffers(self, cache: dict, buffer_length: tf.Tensor) -> dict:
        """A buffered state zero-padded to `buffer_length` positions."""


def max_decode_length(model: DecodingModel, source_ids, extra=EXTRA_DECODE_LENGTH):
    """Padded input length + `extra`, capped by a learned position table's
    size: the length of the output buffers."""
    length = tf.shape(source_ids)[1] + extra
    if model.max_positions is not None:
        length = tf.minimum(length, model.max_positions)
    return length


def buffer_stages(model: DecodingModel, source_ids, length, extra=EXTRA_DECODE_LENGTH):
    """The decoder-cache buffer lengths, in order, of fixed-shape (XLA)
    decoding: 16, 32, 64... positions (at most `length`), then `length`
    (`max_decode_length`). Each stage's loop decodes the positions its
    buffer holds.

    A fixed-shape step attends over, and beam search reorders, its whole
    buffer, written or not. So the search runs in stages, a loop per
    buffer length, the cache zero-padded to the next length when positions
    run out, rather than over the longest allowed output from the first
    position: most outputs end well before it. Each stage is compiled (XLA
    compiles more); stages past `length` run no step. Their number is
    fixed when tracing, from the input's padded length if static, else
    from the model's max_length (the longest input the tools pass).
    """
    bound = source_ids.shape[1]
    bound = (model.config.max_length if bound is None else bound) + extra
    if model.max_positions is not None:
        bound = min(bound, model.max_positions)
    stages, stage = [], 16
    while stage < bound:
        stages.append(tf.minimum(stage, length))
        stage *= 2
    return stages + [length]


def output_limits(source_ids, buffer_length, extra=EXTRA_DECODE_LENGTH):
    """Each sentence's real input length + `extra`, `[batch]`: what a
    translation may not exceed, whatever padding its batch got."""
    return tf.minimum(sequence_lengths(source_ids) + extra, buffer_length)


def next_token_log_probs(logits, first):
    """log_softmax over the tokens a decoder may emit: never PAD or BOS,
    and not EOS as the first token.

    An empty translation is never right, yet a model gives its immediate
    EOS some probability, and under the length penalty (which divides
    longer outputs' log-probabilities more) beam search picks it for some
    sentences of a weakly trained model ("the empty translation problem",
    Stahlberg & Byrne, 2019). CTranslate2, fairseq and Marian forbid it
    too (a minimum length of 1).

    Args:
        logits: `[..., vocab]`.
        first: bool, broadcastable to `logits` without its last axis:
            whether the logits are for the first output position.
    """
    vocab = tf.shape(logits)[-1]
    banned = tf.reduce_any(
        tf.one_hot(
            [PAD_ID, BOS_ID], vocab, on_value=True, off_value=False, dtype=tf.bool
        ),
        0,
    )
    eos = tf.one_hot(EOS_ID, vocab, on_value=True, off_value=False, dtype=tf.bool)
    banned = banned | (tf.expand_dims(first, -1) & eos)
    return tf.nn.log_softmax(tf.where(banned, NEG_INF, logits))


def write_position(sequences, index, tokens):
    """`sequences[..., index] = tokens`, for `tokens` of `sequences`' shape
    without its last (position) axis."""
    hot = tf.one_hot(
        index, tf.shape(sequences)[-1], on_value=True, off_value=False, dtype=tf.bool
    )
    return tf.where(hot, tokens[..., tf.newaxis], sequences)
