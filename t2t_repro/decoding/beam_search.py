"""Beam search over the key/value cache, one tf.while_loop.

Follows tensor2tensor / tensorflow-models' `SequenceBeamSearch`: each step
expands the `beam_size` alive hypotheses into their 2 * beam_size best
continuations, so that at least `beam_size` of them have not just ended;
those refill the alive beams and the ones that ended with EOS compete for
the `beam_size` finished slots under the GNMT length penalty.

Without XLA, a sentence leaves the loop's batch as soon as its result can
no longer change, and the decoder caches grow with the output, so a step
costs what the sentences still being searched need. With `fixed_shapes`
(for XLA) every tensor keeps its shape within a loop: all sentences stay
until the last is done, over cache buffers that double in stages up to
the longest allowed output (`buffer_stages`).
"""

import functools
from typing import NamedTuple

import tensorflow as tf

from t2t_repro.config import BOS_ID, EOS_ID, EXTRA_DECODE_LENGTH, PAD_ID
from t2t_repro.decoding.greedy import (
    any_shape_of_rank,
    buffer_stages,
    max_decode_length,
    next_token_log_probs,
    output_limits,
)
from t2t_repro.layers.masks import NEG_INF


def length_penalty(length, alpha):
    """GNMT's ((5 + length) / 6) ** alpha (Wu et al., 2016)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, tf.cast(alpha, tf.float32))


class BeamState(NamedTuple):
    """The search loop's state, for B sentences, K beams and L output
    positions. Alive hypotheses have not ended; finished slots hold the K
    best that ended with EOS (or NEG_INF scores while fewer did)."""

    index: tf.Tensor  # int32 scalar: the position being decoded
    alive_seq: tf.Tensor  # int32 [B, K, L]
    alive_log_probs: tf.Tensor  # float32 [B, K], log P, best first
    cache: dict  # the model's decoder state, row b * K + k
    finished_seq: tf.Tensor  # int32 [B, K, L]
    finished_scores: tf.Tensor  # float32 [B, K], log P / length penalty
    finished_flags: tf.Tensor  # bool [B, K]: the slot holds a hypothesis
    sentences: tf.Tensor  # int32 [B]: each row's index in the input batch


# The per-sentence fields that make up a result.
_RESULT_FIELDS = (
    "alive_seq",
    "alive_log_probs",
    "finished_seq",
    "finished_scores",
    "finished_flags",
)


def _write_position(sequences, index, tokens):
    """`sequences[..., index] = tokens` for `[batch, beams, length]`."""
    hot = tf.one_hot(
        index, tf.shape(sequences)[-1], on_value=True, off_value=False, dtype=tf.bool
    )
    return tf.where(hot, tokens[..., tf.newaxis], sequences)


def _stable_order(primary, secondary):
    """Indices sorting rows by `primary` ascending, ties by `secondary`
    descending."""
    by_secondary = tf.argsort(secondary, axis=-1, direction="DESCENDING", stable=True)
    primary = tf.gather(primary, by_secondary, batch_dims=1)
    return tf.gather(
        by_secondary, tf.argsort(primary, axis=-1, stable=True), batch_dims=1
    )


def beam_search(
    model,
    source_ids,
    beam_size=4,
    alpha=0.6,
    extra_length=EXTRA_DECODE_LENGTH,
    exact_n_best=True,
    fixed_shapes=False,
):
    """The `beam_size` best translations of each source sentence.

    Args:
        model: a `Transformer`.
        source_ids: int32 `[batch, source_length]`, PAD_ID padded.
        beam_size: int or scalar int32 tensor (the paper: 4).
        alpha: length penalty exponent, >= 0 (the paper: 0.6).
        extra_length: output may be this much longer than the input.
        exact_n_best: search until no alive hypothesis can still beat any
            of the `beam_size` finished ones; if False, only until none can
            beat the best (tensor2tensor's rule: the best is the same, the
            others may not be the true runners-up, and it stops sooner).
        fixed_shapes: keep every loop tensor's shape fixed, as XLA needs
            (see the module docstring); the results are the same.

    Returns:
        (ids int32 `[batch, beam_size, max_decode_length]`, each row ending
        in EOS then PAD, or cut at the sentence's `output_limits`; scores
        float32 `[batch, beam_size]` = log P(ids) / length_penalty(len(ids)),
        best first). Hypotheses that ended with EOS rank before any that hit the
        length limit.

    Example (an untrained model: the shapes, not the words):
        >>> from t2t_repro.config import TransformerConfig
        >>> from t2t_repro.model import Transformer
        >>> model = Transformer(TransformerConfig(
        ...     vocab_size=20, d_model=16, num_heads=2, d_ff=32,
        ...     num_encoder_layers=1, num_decoder_layers=1))
        >>> ids, scores = beam_search(model, tf.constant([[5, 6, EOS_ID]]),
        ...                           beam_size=4)
        >>> ids.shape, scores.shape  # output limit: 3 source tokens + 50
        (TensorShape([1, 4, 53]), TensorShape([1, 4]))
    """
    batch = tf.shape(source_ids)[0]
    length = max_decode_length(model, source_ids, extra_length)
    # Without fixed shapes, one growing cache.
    stages = (
        buffer_stages(model, source_ids, length, extra_length)
        if fixed_shapes
        else [None]
    )
    limits = output_limits(source_ids, length, extra_length)
    # The penalty is largest at the limit (alpha >= 0).
    limit_penalties = length_penalty(limits, alpha)

    def done(state):
        """Per sentence of `state`: whether its result is final. Log-
        probabilities only fall as a hypothesis grows and the penalty is
        largest at the limit: this bounds any alive beam's final score.
        Once the finished slots that matter beat it, they stay."""
        best_alive = state.alive_log_probs[:, 0] / tf.gather(
            limit_penalties, state.sentences
        )
        finished = tf.where(state.finished_flags, state.finished_scores, NEG_INF)
        bar = tf.reduce_min(finished, axis=1) if exact_n_best else finished[:, 0]
        return tf.logical_or(
            bar > best_alive, state.index >= tf.gather(limits, state.sentences)
        )

    def step(state):
        """One position for every sentence in `state`, and the rows of the
        new cache's parents, `[sentences, beam_size]`."""
        index = state.index
        rows = tf.shape(state.alive_seq)[0]
        # Sentences past their limit keep their state.
        active = (index < tf.gather(limits, state.sentences))[:, tf.newaxis]
        previous = tf.where(
            index == 0,
            BOS_ID,
            tf.gather(state.alive_seq, tf.maximum(index - 1, 0), axis=2),
        )
        logits, cache = model.decode_step(
            tf.reshape(previous, [-1, 1]), index, state.cache, buffered=fixed_shapes
        )
        vocab = tf.shape(logits)[-1]
        log_probs = (
            tf.reshape(
                next_token_log_probs(logits, index == 0), [rows, beam_size, vocab]
            )
            + state.alive_log_probs[:, :, tf.newaxis]
        )
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(log_probs, [rows, beam_size * vocab]), k=2 * beam_size
        )
        top_beams = top_indices // vocab
        top_tokens = top_indices % vocab
        top_seq = _write_position(
            tf.gather(state.alive_seq, top_beams, batch_dims=1), index, top_tokens
        )
        top_ended = tf.equal(top_tokens, EOS_ID)

        alive_log_probs, chosen = tf.math.top_k(
            tf.where(top_ended, NEG_INF, top_log_probs), k=beam_size
        )
        alive_seq = tf.gather(top_seq, chosen, batch_dims=1)
        parents = tf.where(
            active,
            tf.gather(top_beams, chosen, batch_dims=1),
            tf.range(beam_size)[tf.newaxis],
        )

        ended_scores = tf.where(
            top_ended, top_log_probs / length_penalty(index + 1, alpha), NEG_INF
        )
        finished_scores, chosen = tf.math.top_k(
            tf.concat([state.finished_scores, ended_scores], axis=1), k=beam_size
        )
        finished_seq = tf.gather(
            tf.concat([state.finished_seq, top_seq], axis=1), chosen, batch_dims=1
        )
        finished_flags = tf.gather(
            tf.concat([state.finished_flags, top_ended], axis=1), chosen, batch_dims=1
        )

        def keep_if_inactive(new, old):
            return tf.where(
                tf.reshape(active, [-1] + [1] * (new.shape.rank - 1)), new, old
            )

        return BeamState(
            index + 1,
            keep_if_inactive(alive_seq, state.alive_seq),
            keep_if_inactive(alive_log_probs, state.alive_log_probs),
            cache,
            keep_if_inactive(finished_seq, state.finished_seq),
            keep_if_inactive(finished_scores, state.finished_scores),
            keep_if_inactive(finished_flags, state.finished_flags),
            state.sentences,
        ), parents

    def reorder(state, parents, sentences=None):
        """The state's cache rows taken from `parents`, for the sentences
        at positions `sentences` of the state (default: all)."""
        if sentences is not None:
            parents = tf.gather(parents, sentences)
        rows = (
            parents
            + beam_size
            * (
                tf.range(tf.shape(state.alive_seq)[0])
                if sentences is None
                else sentences
            )[:, tf.newaxis]
        )
        return model.reorder_decode_cache(
            state.cache, tf.reshape(rows, [-1]), sentences
        )

    empty = tf.fill([batch, beam_size, length], PAD_ID)
    start = BeamState(
        index=tf.constant(0),
        alive_seq=empty,
        # One live hypothesis per sentence at first: the others are copies.
        alive_log_probs=tf.concat(
            [tf.zeros([batch, 1]), tf.fill([batch, beam_size - 1], NEG_INF)], axis=1
        ),
        cache=model.start_decoding(source_ids, stages[0], beams=beam_size),
        finished_seq=empty,
        finished_scores=tf.fill([batch, beam_size], NEG_INF),
        finished_flags=tf.zeros([batch, beam_size], tf.bool),
        sentences=tf.range(batch),
    )

    if fixed_shapes:
        # Every sentence stays, so the loops do not carry `sentences`: XLA
        # fails to compile a third loop that carries an unchanged constant
        # (tensorflow/tensorflow#122886).
        def fixed_step(state):
            state, parents = step(state._replace(sentences=start.sentences))
            return (state._replace(cache=reorder(state, parents), sentences=()),)

        def fixed_cond(state, *, stage):
            return tf.logical_and(
                state.index < stage,
                tf.logical_not(
                    tf.reduce_all(done(state._replace(sentences=start.sentences)))
                ),
            )

        state = start._replace(sentences=())
        for stage in stages:
            (state,) = tf.while_loop(
                functools.partial(fixed_cond, stage=stage),
                fixed_step,
                [state._replace(cache=model.grow_decode_buffers(state.cache, stage))],
            )
        results = {name: getattr(state, name) for name in _RESULT_FIELDS}
    else:

        def compacting_step(state, results):
            state, parents = step(state)
            # Every sentence's latest result, in input order.
            results = {
                name: tf.tensor_scatter_nd_update(
                    value, state.sentences[:, tf.newaxis], getattr(state, name)
                )
                for name, value in results.items()
            }
            # Only the sentences whose result may still change go on.
            going_on = tf.cast(tf.where(tf.logical_not(done(state)))[:, 0], tf.int32)
            state = state._replace(
                cache=reorder(state, parents, going_on),
                **{
                    name: tf.gather(getattr(state, name), going_on)
                    for name in _RESULT_FIELDS + ("sentences",)
                },
            )
            return state, results

        results = {name: getattr(start, name) for name in _RESULT_FIELDS}
        # Sentences leave the state's batch; its cache grows.
        shapes = BeamState(
            **{
                name: tf.TensorShape([None] + value.shape[1:].as_list())
                for name, value in start._asdict().items()
                if name not in ("index", "cache")
            },
            index=start.index.shape,
            cache=any_shape_of_rank(start.cache),
        )
        _, results = tf.while_loop(
            lambda state, _: tf.logical_and(
                state.index < length, tf.size(state.sentences) > 0
            ),
            compacting_step,
            [start, results],
            shape_invariants=[
                shapes,
                tf.nest.map_structure(lambda t: t.shape, results),
            ],
        )

    # Slots no hypothesis finished for go to the best that hit the limit.
    sequences = tf.concat([results["finished_seq"], results["alive_seq"]], axis=1)
    scores = tf.concat(
        [
            results["finished_scores"],
            results["alive_log_probs"] / limit_penalties[:, tf.newaxis],
        ],
        axis=1,
    )
    rank = tf.concat(
        [
            tf.where(results["finished_flags"], 0, 2),
            tf.ones_like(results["alive_log_probs"], tf.int32),
        ],
        axis=1,
    )
    order = _stable_order(rank, scores)[:, :beam_size]
    return (
        tf.gather(sequences, order, batch_dims=1),
        tf.gather(scores, order, batch_dims=1),
    )
