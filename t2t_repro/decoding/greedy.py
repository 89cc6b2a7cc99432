"""Greedy decoding over the key/value cache: the most likely next token at
each position, run by a loop of `loops.py`."""

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


class GreedyState(NamedTuple):
    """The search loop's state, for R rows (sentences) and L output
    positions."""

    index: tf.Tensor  # int32 scalar: the position being decoded
    token: tf.Tensor  # int32 [R]: the token at `index`
    cache: dict  # the model's decoder state
    sentences: tf.Tensor  # int32 [R]: each row's index in the input batch
    finished: tf.Tensor  # bool [R]: ended with EOS or at its length limit
    output: tf.Tensor  # int32 [R, L]
    log_probs: tf.Tensor  # float32 [R]: log P(output)


def greedy_decode(
    model: DecodingModel,
    source_ids,
    extra_length=EXTRA_DECODE_LENGTH,
    fixed_shapes=False,
):
    """Most likely next token at each step until EOS or the length limit.

    Args:
        model: a `Transformer`.
        source_ids: int32 `[batch, source_length]`, PAD_ID padded.
        extra_length: output may be this much longer than the input.
        fixed_shapes: keep every loop tensor's shape fixed, as XLA needs
            (`fixed_shape_loop`); else finished sentences leave the batch
            and the cache grows with the output (`compacting_loop`). The
            results are the same.

    Returns:
        (ids int32 `[batch, max_decode_length]` ending in EOS then PAD, or
        cut at the sentence's `output_limits`; log-probability float32
        `[batch]` of each output).
    """
    batch = tf.shape(source_ids)[0]
    length = max_decode_length(model, source_ids, extra_length)
    limits = output_limits(source_ids, length, extra_length)

    def step(state):
        index = state.index
        logits, cache = model.decode_step(
            state.token[:, tf.newaxis], index, state.cache, buffered=fixed_shapes
        )
        log_probs = next_token_log_probs(logits, index == 0)
        finished = tf.logical_or(
            state.finished, index >= tf.gather(limits, state.sentences)
        )
        chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.where(finished, PAD_ID, chosen)
        gained = tf.gather(log_probs, chosen, batch_dims=1)
        return state._replace(
            index=index + 1,
            token=chosen,
            cache=cache,
            finished=tf.logical_or(finished, tf.equal(chosen, EOS_ID)),
            output=write_position(state.output, index, chosen),
            log_probs=state.log_probs + tf.where(finished, 0.0, gained),
        ), None

    def done(state):
        return tf.logical_or(
            state.finished, state.index >= tf.gather(limits, state.sentences)
        )

    def start(cache):
        return GreedyState(
            index=tf.constant(0),
            token=tf.fill([batch], BOS_ID),
            cache=cache,
            sentences=tf.range(batch),
            finished=tf.zeros([batch], tf.bool),
            output=tf.fill([batch, length], PAD_ID),
            log_probs=tf.zeros([batch]),
        )

    state = run_search(
        model, source_ids, start, step, done, length, extra_length, fixed_shapes
    )
    return state.output, state.log_probs
