"""Greedy decoding over the key/value cache, one tf.while_loop."""

import functools

import tensorflow as tf

from t2t_repro.config import BOS_ID, EOS_ID, EXTRA_DECODE_LENGTH, PAD_ID
from t2t_repro.layers.masks import NEG_INF, sequence_lengths


def max_decode_length(model, source_ids, extra=EXTRA_DECODE_LENGTH):
    """Padded input length + `extra`, capped by a learned position table's
    size: the length of the output buffers."""
    length = tf.shape(source_ids)[1] + extra
    if model.max_positions is not None:
        length = tf.minimum(length, model.max_positions)
    return length


def buffer_stages(model, source_ids, length, extra=EXTRA_DECODE_LENGTH):
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
    longer outputs' log-probabilities more) beam search picked it for 17 of
    200 test sentences of a quickstart model ("the empty
    translation problem", Stahlberg & Byrne, 2019). CTranslate2, fairseq
    and Marian forbid it too (a minimum length of 1).

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


def any_shape_of_rank(state):
    """Shape invariants for a tf.while_loop under which every tensor of
    `state` may change shape (a growing decoder cache)."""
    return tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), state)


def greedy_decode(
    model, source_ids, extra_length=EXTRA_DECODE_LENGTH, fixed_shapes=False
):
    """Most likely next token at each step until EOS or the length limit.

    Args:
        model: a `Transformer`.
        source_ids: int32 `[batch, source_length]`, PAD_ID padded.
        extra_length: output may be this much longer than the input.
        fixed_shapes: keep every loop tensor's shape fixed, as XLA needs:
            every sentence stays in the loop until the last ends, over
            decoder cache buffers that double in stages up to the longest
            allowed output (`buffer_stages`). Without
            it, finished sentences leave the batch and the cache grows
            with the output, so a step costs what the unfinished need.
            The results are the same.

    Returns:
        (ids int32 `[batch, max_decode_length]` ending in EOS then PAD, or
        cut at the sentence's `output_limits`; log-probability float32
        `[batch]` of each output).
    """
    batch = tf.shape(source_ids)[0]
    length = max_decode_length(model, source_ids, extra_length)
    limits = output_limits(source_ids, length, extra_length)
    # Without fixed shapes, one growing cache.
    stages = (
        buffer_stages(model, source_ids, length, extra_length)
        if fixed_shapes
        else [None]
    )
    cache = model.start_decoding(source_ids, stages[0])

    def step(index, token, cache, sentences, finished, output, scores):
        """One position for the rows of `sentences` (indices into the
        batch); the results go to `output` and `scores`, in input order."""
        logits, cache = model.decode_step(
            token[:, tf.newaxis], index, cache, buffered=fixed_shapes
        )
        log_probs = next_token_log_probs(logits, index == 0)
        row_limits = tf.gather(limits, sentences)
        finished = tf.logical_or(finished, index >= row_limits)
        chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.where(finished, PAD_ID, chosen)
        gained = tf.gather(log_probs, chosen, batch_dims=1)
        scores = tf.tensor_scatter_nd_add(
            scores, sentences[:, tf.newaxis], tf.where(finished, 0.0, gained)
        )
        output = tf.tensor_scatter_nd_update(
            output,
            tf.stack([sentences, tf.fill(tf.shape(sentences), index)], 1),
            chosen,
        )
        finished = tf.logical_or(finished, tf.equal(chosen, EOS_ID))
        if not fixed_shapes:
            # Finished sentences leave the batch.
            going_on = tf.cast(
                tf.where(
                    tf.logical_not(tf.logical_or(finished, index + 1 >= row_limits))
                )[:, 0],
                tf.int32,
            )
            chosen, sentences, finished = (
                tf.gather(t, going_on) for t in (chosen, sentences, finished)
            )
            cache = model.reorder_decode_cache(cache, going_on, sentences=going_on)
        return index + 1, chosen, cache, sentences, finished, output, scores

    def not_done(index, token, cache, sentences, finished, output, scores):
        done = tf.logical_or(finished, index >= tf.gather(limits, sentences))
        return tf.logical_and(index < length, tf.logical_not(tf.reduce_all(done)))

    state = (
        tf.constant(0),
        tf.fill([batch], BOS_ID),
        cache,
        tf.range(batch),
        tf.zeros([batch], tf.bool),
        tf.fill([batch, length], PAD_ID),
        tf.zeros([batch]),
    )
    if fixed_shapes:
        # Every sentence stays, so the loops do not carry `sentences` (see
        # beam_search: XLA fails on a third loop carrying a constant).
        sentences = state[3]

        def fixed_step(index, token, cache, _, *rest):
            index, token, cache, _, *rest = step(index, token, cache, sentences, *rest)
            return (index, token, cache, (), *rest)

        def fixed_not_done(index, token, cache, _, *rest, stage):
            return tf.logical_and(
                index < stage, not_done(index, token, cache, sentences, *rest)
            )

        state = (*state[:3], (), *state[4:])
        for stage in stages:
            state = tf.while_loop(
                functools.partial(fixed_not_done, stage=stage),
                fixed_step,
                (*state[:2], model.grow_decode_buffers(state[2], stage), *state[3:]),
            )
    else:
        shapes = list(tf.nest.map_structure(lambda t: t.shape, state))
        shapes[1:5] = (
            tf.TensorShape([None]),
            any_shape_of_rank(cache),
            tf.TensorShape([None]),
            tf.TensorShape([None]),
        )
        state = tf.while_loop(not_done, step, state, shape_invariants=tuple(shapes))
    *_, output, scores = state
    return output, scores
