"""Choosing the decoder: the one place where beam size 1 means greedy
search (as in tensor2tensor). Scores are always log P / length penalty, so
that they compare across decoders."""

import tensorflow as tf

from t2t_repro.decoding.beam_search import beam_search, length_penalty
from t2t_repro.decoding.greedy import greedy_decode
from t2t_repro.layers.masks import sequence_lengths


def _greedy_with_scores(model, source_ids, alpha, extra_length,
                        fixed_shapes=False):
    ids, log_probs = greedy_decode(model, source_ids, extra_length,
                                   fixed_shapes=fixed_shapes)
    return ids, log_probs / length_penalty(sequence_lengths(ids), alpha)


def best_translation_fn(decoding, fixed_shapes=False):
    """`fn(model, source_ids) -> (ids [batch, length], scores [batch])`
    for `DecodingOptions`; `fixed_shapes` for XLA (see `greedy_decode`)."""
    beam_size, alpha = decoding.beam_size, decoding.alpha
    extra_length = decoding.extra_length
    if beam_size == 1:
        return lambda model, source_ids: _greedy_with_scores(
            model, source_ids, alpha, extra_length, fixed_shapes)

    def best_of_beam(model, source_ids):
        # Stops when the best cannot change (the others may not be the
        # true runners-up), sooner than an exact n-best search.
        ids, scores = beam_search(model, source_ids, beam_size, alpha,
                                  extra_length, exact_n_best=False,
                                  fixed_shapes=fixed_shapes)
        return ids[:, 0], scores[:, 0]
    return best_of_beam


def n_best_translations(model, source_ids, beam_size, alpha, extra_length):
    """(ids `[batch, beam_size, length]`, scores `[batch, beam_size]`),
    best first, for a `beam_size` tensor (a serving request's)."""
    def greedy():
        ids, scores = _greedy_with_scores(model, source_ids, alpha,
                                          extra_length)
        return ids[:, tf.newaxis], scores[:, tf.newaxis]

    return tf.cond(tf.equal(beam_size, 1), greedy,
                   lambda: beam_search(model, source_ids, beam_size, alpha,
                                       extra_length))
