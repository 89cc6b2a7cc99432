"""Choosing the decoder: the one place where beam size 1 means greedy
search (as in tensor2tensor). Scores are always log P / length penalty, so
that they compare across decoders."""

import tensorflow as tf

from t2t_repro.config import DecodingOptions
from t2t_repro.decoding.beam_search import beam_search, length_penalty
from t2t_repro.decoding.common import DecodingModel
from t2t_repro.decoding.greedy import greedy_decode
from t2t_repro.layers.masks import sequence_lengths


def _greedy_with_scores(
    model: DecodingModel, source_ids, alpha, extra_length, fixed_shapes=False
):
    ids, log_probs = greedy_decode(
        model, source_ids, extra_length, fixed_shapes=fixed_shapes
    )
    return ids, log_probs / length_penalty(sequence_lengths(ids), alpha)


def side_by_side(search, source_ids, searches):
    """`search(source_ids)`, a tuple of `[batch, ...]` tensors, computed as
    `searches` independent searches over consecutive slices of the batch
    (some empty if it has fewer sentences), joined in order.

    No search depends on another, so the graph executor runs them on
    different cores at once, each op on its search's share of the cores
    (`t2t_repro.inference.threads`): a decoding step's ops are too small
    to gain from more threads than that. A sentence's
    result does not depend on the others in its batch (the slices keep the
    batch's padded width, which sets the output length), so the results
    are those of one search.
    """
    if searches == 1:
        return search(source_ids)
    # Traced once and called per slice: a copy per slice would multiply
    # the tracing and graph optimisation that a tool's start waits for.
    search = tf.function(search, autograph=False)
    batch = tf.shape(source_ids)[0]
    bounds = [batch * part // searches for part in range(searches + 1)]
    parts = [search(source_ids[start:end]) for start, end in zip(bounds, bounds[1:])]
    return tuple(tf.concat(results, 0) for results in zip(*parts))


def best_translation_fn(model: DecodingModel, decoding: DecodingOptions):
    """`fn(source_ids) -> (ids [batch, length], scores [batch])` of `model`
    for `DecodingOptions`, to be called in a `tf.function`.

    With `decoding.jit_compile`, each of the `parallel_searches` is an XLA
    computation of its own (fixed shapes, `fixed_shape_loop`), called from
    the graph.
    """
    beam_size, alpha = decoding.beam_size, decoding.alpha
    extra_length, fixed = decoding.extra_length, decoding.jit_compile
    if beam_size == 1:

        def search(source_ids):
            return _greedy_with_scores(model, source_ids, alpha, extra_length, fixed)

    else:

        def search(source_ids):
            # Stops when the best cannot change (the others may not be the
            # true runners-up), sooner than an exact n-best search.
            ids, scores = beam_search(
                model,
                source_ids,
                beam_size,
                alpha,
                extra_length,
                exact_n_best=False,
                fixed_shapes=fixed,
            )
            return ids[:, 0], scores[:, 0]

    if fixed:
        search = tf.function(search, jit_compile=True, autograph=False)
    return lambda source_ids: side_by_side(
        search, source_ids, decoding.parallel_searches
    )


def n_best_translations(
    model: DecodingModel, source_ids, beam_size, alpha, decoding: DecodingOptions
):
    """(ids `[batch, beam_size, length]`, scores `[batch, beam_size]`),
    best first, for `beam_size` and `alpha` tensors (a serving request's)
    and the rest of `DecodingOptions`."""
    extra_length = decoding.extra_length

    def greedy(ids):
        ids, scores = _greedy_with_scores(model, ids, alpha, extra_length)
        return ids[:, tf.newaxis], scores[:, tf.newaxis]

    return tf.cond(
        tf.equal(beam_size, 1),
        lambda: side_by_side(greedy, source_ids, decoding.parallel_searches),
        lambda: side_by_side(
            lambda ids: beam_search(model, ids, beam_size, alpha, extra_length),
            source_ids,
            decoding.parallel_searches,
        ),
    )
