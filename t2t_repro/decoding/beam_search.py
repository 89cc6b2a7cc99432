"""Beam search over the key/value cache, one fixed-shape tf.while_loop.

Follows tensor2tensor / tensorflow-models' `SequenceBeamSearch`: each step
expands the `beam_size` alive hypotheses into their 2 * beam_size best
continuations, so that at least `beam_size` of them have not just ended;
those refill the alive beams and the ones that ended with EOS compete for
the `beam_size` finished slots under the GNMT length penalty. Every tensor
has a fixed shape, so the loop compiles with XLA as well as without.
"""

import tensorflow as tf

from t2t_repro.config import BOS_ID, EOS_ID, PAD_ID
from t2t_repro.decoding.greedy import (EXTRA_DECODE_LENGTH, greedy_decode,
                                       max_decode_length, next_token_log_probs,
                                       output_limits)
from t2t_repro.model import padding_mask

# Finite: XLA and `0 * score` stay NaN-free, and real log-probabilities of
# any sequence we decode are far above it.
NEG_INF = -1e9


def length_penalty(length, alpha):
    """GNMT's ((5 + length) / 6) ** alpha (Wu et al., 2016)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0,
                  tf.cast(alpha, tf.float32))


def _write_position(sequences, index, tokens):
    """`sequences[..., index] = tokens` for `[batch, beams, length]`."""
    hot = tf.one_hot(index, tf.shape(sequences)[-1], on_value=True,
                     off_value=False, dtype=tf.bool)
    return tf.where(hot, tokens[..., tf.newaxis], sequences)


def _stable_order(primary, secondary):
    """Indices sorting rows by `primary` ascending, ties by `secondary`
    descending."""
    by_secondary = tf.argsort(secondary, axis=-1, direction="DESCENDING",
                              stable=True)
    primary = tf.gather(primary, by_secondary, batch_dims=1)
    return tf.gather(by_secondary,
                     tf.argsort(primary, axis=-1, stable=True), batch_dims=1)


def beam_search(model, source_ids, beam_size=4, alpha=0.6,
                extra_length=EXTRA_DECODE_LENGTH, exact_n_best=True):
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
    limit_penalties = length_penalty(limits, alpha)[:, tf.newaxis]
    vocab = model.config.vocab_size
    cache = model.initial_decode_cache(
        model.encode(source_ids, training=False), length)
    # Beams of one sentence sit next to each other: row b * beam_size + k.
    cache = tf.nest.map_structure(
        lambda layer_cache: tf.repeat(layer_cache, beam_size, axis=0), cache)
    source_mask = padding_mask(tf.repeat(source_ids, beam_size, axis=0))
    beam_offsets = tf.range(batch)[:, tf.newaxis] * beam_size

    def step(index, alive_seq, alive_log_probs, cache, finished_seq,
             finished_scores, finished_flags):
        # Sentences past their limit keep their state.
        active = (index < limits)[:, tf.newaxis]
        old = (alive_seq, alive_log_probs, finished_seq, finished_scores,
               finished_flags)
        previous = tf.where(
            index == 0, BOS_ID,
            tf.gather(alive_seq, tf.maximum(index - 1, 0), axis=2))
        logits, cache = model.decode_step(
            tf.reshape(previous, [-1, 1]), index, cache, source_mask)
        log_probs = (tf.reshape(next_token_log_probs(logits),
                                [batch, beam_size, vocab])
                     + alive_log_probs[:, :, tf.newaxis])
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(log_probs, [batch, beam_size * vocab]),
            k=2 * beam_size)
        top_beams = top_indices // vocab
        top_tokens = top_indices % vocab
        top_seq = _write_position(
            tf.gather(alive_seq, top_beams, batch_dims=1), index, top_tokens)
        top_ended = tf.equal(top_tokens, EOS_ID)

        alive_log_probs, chosen = tf.math.top_k(
            tf.where(top_ended, NEG_INF, top_log_probs), k=beam_size)
        alive_seq = tf.gather(top_seq, chosen, batch_dims=1)
        parents = tf.where(active, tf.gather(top_beams, chosen, batch_dims=1),
                           tf.range(beam_size)[tf.newaxis]) + beam_offsets
        flat_parents = tf.reshape(parents, [-1])
        cache = {"self": tuple(tf.gather(layer_cache, flat_parents)
                               for layer_cache in cache["self"]),
                 "cross": cache["cross"]}

        ended_scores = tf.where(
            top_ended, top_log_probs / length_penalty(index + 1, alpha),
            NEG_INF)
        finished_scores, chosen = tf.math.top_k(
            tf.concat([finished_scores, ended_scores], axis=1), k=beam_size)
        finished_seq = tf.gather(tf.concat([finished_seq, top_seq], axis=1),
                                 chosen, batch_dims=1)
        finished_flags = tf.gather(
            tf.concat([finished_flags, top_ended], axis=1), chosen,
            batch_dims=1)
        new = (alive_seq, alive_log_probs, finished_seq, finished_scores,
               finished_flags)
        (alive_seq, alive_log_probs, finished_seq, finished_scores,
         finished_flags) = [
            tf.where(tf.reshape(active, [-1] + [1] * (n.shape.rank - 1)),
                     n, o) for n, o in zip(new, old)]
        return (index + 1, alive_seq, alive_log_probs, cache, finished_seq,
                finished_scores, finished_flags)

    def not_done(index, alive_seq, alive_log_probs, cache, finished_seq,
                 finished_scores, finished_flags):
        # Log-probabilities only fall as a hypothesis grows and the penalty
        # is largest at the limit: this bounds any alive beam's final
        # score. Once the finished slots that matter beat it, they stay.
        best_alive = alive_log_probs[:, 0] / limit_penalties[:, 0]
        finished = tf.where(finished_flags, finished_scores, NEG_INF)
        bar = (tf.reduce_min(finished, axis=1) if exact_n_best
               else finished[:, 0])
        done = tf.logical_or(bar > best_alive, index >= limits)
        return tf.logical_and(index < length,
                              tf.logical_not(tf.reduce_all(done)))

    initial_log_probs = tf.concat(
        [tf.zeros([batch, 1]), tf.fill([batch, beam_size - 1], NEG_INF)],
        axis=1)
    empty = tf.fill([batch, beam_size, length], PAD_ID)
    (_, alive_seq, alive_log_probs, _, finished_seq, finished_scores,
     finished_flags) = tf.while_loop(
        not_done, step,
        (tf.constant(0), empty, initial_log_probs, cache, empty,
         tf.fill([batch, beam_size], NEG_INF),
         tf.zeros([batch, beam_size], tf.bool)))

    # Slots no hypothesis finished for go to the best that hit the limit.
    sequences = tf.concat([finished_seq, alive_seq], axis=1)
    scores = tf.concat([finished_scores, alive_log_probs / limit_penalties],
                       axis=1)
    rank = tf.concat([tf.where(finished_flags, 0, 2),
                      tf.ones_like(alive_log_probs, tf.int32)], axis=1)
    order = _stable_order(rank, scores)[:, :beam_size]
    return (tf.gather(sequences, order, batch_dims=1),
            tf.gather(scores, order, batch_dims=1))


def best_translation_fn(beam_size=4, alpha=0.6):
    """`fn(model, source_ids) -> (ids [batch, length], scores [batch])`.

    Beam size 1 is greedy decoding, as in tensor2tensor; scores are always
    log P / length_penalty so that they compare across decoders.
    """
    if beam_size == 1:
        def greedy(model, source_ids):
            ids, log_probs = greedy_decode(model, source_ids)
            lengths = tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1)
            return ids, log_probs / length_penalty(lengths, alpha)
        return greedy

    def best_of_beam(model, source_ids):
        ids, scores = beam_search(model, source_ids, beam_size, alpha,
                                  exact_n_best=False)
        return ids[:, 0], scores[:, 0]
    return best_of_beam
