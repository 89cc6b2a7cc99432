"""Beam search over the key/value cache, run by a loop of `loops.py`.

Follows tensor2tensor / tensorflow-models' `SequenceBeamSearch`, in its
phases: each step grows the `beam_size` alive hypotheses into their
2 * beam_size best continuations (`grow_alive`), so that at least
`beam_size` of them have not just ended; those refill the alive beams
(`new_alive`) and the ones that ended with EOS compete for the `beam_size`
finished slots under the GNMT length penalty (`new_finished`). A sentence's
result is final once no alive hypothesis can beat the finished ones that
matter; then the best finished, or alive if too few finished, are its
result (`best_first`).
"""

from typing import NamedTuple

import tensorflow as tf

from t2t_repro.config import BOS_ID, EOS_ID, EXTRA_DECODE_LENGTH, PAD_ID
from t2t_repro.decoding.common import (
    DecodingModel,
    max_decode_length,
    next_token_log_probs,
    output_limits,
    write_position,
)
from t2t_repro.decoding.loops import run_search
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


class Candidates(NamedTuple):
    """The 2K best continuations by one token of a step's alive
    hypotheses, best first."""

    seq: tf.Tensor  # int32 [B, 2K, L]
    log_probs: tf.Tensor  # float32 [B, 2K]
    beams: tf.Tensor  # int32 [B, 2K]: the alive beam each continues
    ended: tf.Tensor  # bool [B, 2K]: its new token is EOS


def grow_alive(model: DecodingModel, state, beam_size, buffered):
    """(the `Candidates` of `state`'s alive hypotheses at position
    `state.index`, the decoder state `decode_step` left, rows not yet
    reordered)."""
    index = state.index
    rows = tf.shape(state.alive_seq)[0]
    previous = tf.where(
        index == 0,
        BOS_ID,
        tf.gather(state.alive_seq, tf.maximum(index - 1, 0), axis=2),
    )
    logits, cache = model.decode_step(
        tf.reshape(previous, [-1, 1]), index, state.cache, buffered=buffered
    )
    vocab = tf.shape(logits)[-1]
    log_probs = (
        tf.reshape(next_token_log_probs(logits, index == 0), [rows, beam_size, vocab])
        + state.alive_log_probs[:, :, tf.newaxis]
    )
    top_log_probs, top_indices = tf.math.top_k(
        tf.reshape(log_probs, [rows, beam_size * vocab]), k=2 * beam_size
    )
    top_beams = top_indices // vocab
    top_tokens = top_indices % vocab
    top_seq = write_position(
        tf.gather(state.alive_seq, top_beams, batch_dims=1), index, top_tokens
    )
    return Candidates(
        top_seq, top_log_probs, top_beams, tf.equal(top_tokens, EOS_ID)
    ), cache


def new_alive(candidates, beam_size):
    """(`alive_seq` and `alive_log_probs` of the `beam_size` best
    candidates that did not end, the beams they continue `[B, K]`)."""
    log_probs, chosen = tf.math.top_k(
        tf.where(candidates.ended, NEG_INF, candidates.log_probs), k=beam_size
    )
    return {
        "alive_seq": tf.gather(candidates.seq, chosen, batch_dims=1),
        "alive_log_probs": log_probs,
    }, tf.gather(candidates.beams, chosen, batch_dims=1)


def new_finished(state, candidates, beam_size, alpha):
    """The finished slots of `state` refilled with the `beam_size` best of
    them and the candidates that ended, by log P / length penalty."""
    ended_scores = tf.where(
        candidates.ended,
        candidates.log_probs / length_penalty(state.index + 1, alpha),
        NEG_INF,
    )
    scores, chosen = tf.math.top_k(
        tf.concat([state.finished_scores, ended_scores], axis=1), k=beam_size
    )
    return {
        "finished_seq": tf.gather(
            tf.concat([state.finished_seq, candidates.seq], axis=1),
            chosen,
            batch_dims=1,
        ),
        "finished_scores": scores,
        "finished_flags": tf.gather(
            tf.concat([state.finished_flags, candidates.ended], axis=1),
            chosen,
            batch_dims=1,
        ),
    }


def best_first(state, limit_penalties, beam_size):
    """(ids `[B, K, L]`, scores `[B, K]`) of the final `state`: its
    finished hypotheses, best first, then, for the slots no hypothesis
    finished for, the best alive ones, scored at the length limit's
    penalty (`limit_penalties` `[B]`)."""
    sequences = tf.concat([state.finished_seq, state.alive_seq], axis=1)
    scores = tf.concat(
        [
            state.finished_scores,
            state.alive_log_probs / limit_penalties[:, tf.newaxis],
        ],
        axis=1,
    )
    rank = tf.concat(
        [
            tf.where(state.finished_flags, 0, 2),
            tf.ones_like(state.alive_log_probs, tf.int32),
        ],
        axis=1,
    )
    order = _stable_order(rank, scores)[:, :beam_size]
    return (
        tf.gather(sequences, order, batch_dims=1),
        tf.gather(scores, order, batch_dims=1),
    )


def _stable_order(primary, secondary):
    """Indices sorting rows by `primary` ascending, ties by `secondary`
    descending."""
    by_secondary = tf.argsort(secondary, axis=-1, direction="DESCENDING", stable=True)
    primary = tf.gather(primary, by_secondary, batch_dims=1)
    return tf.gather(
        by_secondary, tf.argsort(primary, axis=-1, stable=True), batch_dims=1
    )


def beam_search(
    model: DecodingModel,
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
            (`fixed_shape_loop`); else sentences leave the batch once their
            result is final and the cache grows with the output
            (`compacting_loop`). The results are the same.

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
    limits = output_limits(source_ids, length, extra_length)
    # The penalty is largest at the limit (alpha >= 0).
    limit_penalties = length_penalty(limits, alpha)

    def step(state):
        """One position for every sentence of `state`, and the beams its
        new hypotheses continue."""
        candidates, cache = grow_alive(model, state, beam_size, fixed_shapes)
        alive, parents = new_alive(candidates, beam_size)
        finished = new_finished(state, candidates, beam_size, alpha)
        # Sentences past their limit keep their hypotheses and cache rows.
        active = state.index < tf.gather(limits, state.sentences)

        def if_active(new, old):
            return tf.where(
                tf.reshape(active, [-1] + [1] * (new.shape.rank - 1)), new, old
            )

        return state._replace(
            index=state.index + 1,
            cache=cache,
            **{
                name: if_active(new, getattr(state, name))
                for name, new in {**alive, **finished}.items()
            },
        ), if_active(parents, tf.range(beam_size)[tf.newaxis])

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

    def start(cache):
        empty = tf.fill([batch, beam_size, length], PAD_ID)
        return BeamState(
            index=tf.constant(0),
            alive_seq=empty,
            # One live hypothesis per sentence at first: the others are
            # copies.
            alive_log_probs=tf.concat(
                [tf.zeros([batch, 1]), tf.fill([batch, beam_size - 1], NEG_INF)],
                axis=1,
            ),
            cache=cache,
            finished_seq=empty,
            finished_scores=tf.fill([batch, beam_size], NEG_INF),
            finished_flags=tf.zeros([batch, beam_size], tf.bool),
            sentences=tf.range(batch),
        )

    state = run_search(
        model,
        source_ids,
        start,
        step,
        done,
        length,
        extra_length,
        fixed_shapes,
        beams=beam_size,
    )
    return best_first(state, limit_penalties, beam_size)
