"""The two loops that run a search, greedy or beam, one output position
per iteration: the search supplies its state, its step and when a
sentence's result is final; the loop owns the tf.while_loop (as in
tf-models' `DecodingModule`).

`compacting_loop` (graph execution): a sentence leaves the loop's batch as
soon as its result can no longer change, and the decoder caches grow with
the output, so a step costs what the sentences still being searched need.
`fixed_shape_loop` (XLA): every tensor keeps its shape within a loop, so
all sentences stay until the last is done, over cache buffers that double
in stages up to the longest allowed output (`buffer_stages`). The results
are the same.

A search's state is a NamedTuple with the fields `index` (int32 scalar,
the position being decoded), `cache` (the model's decoder state, from
`start_decoding`) and `sentences` (int32 `[rows]`, each row's sentence:
its index in the input batch); every other field is per sentence, of
leading axis `rows`. Its step and its test of the results:

    step(state) -> (state, parents): decodes position `state.index` of
        every row and returns the state at the next one, its cache as
        `decode_step` left it; and `parents`, int32 `[rows, beams]`: for
        each new hypothesis, the beam of its sentence whose cache row it
        continues (None: each row continues its own, as in greedy search).
    done(state) -> bool `[rows]`: whether a sentence's result is final.
"""

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from t2t_repro.decoding.common import DecodingModel, buffer_stages

# The state's fields that are not per sentence.
_SHARED = ("index", "cache")


def _per_sentence(state):
    return {
        name: value
        for name, value in state._asdict().items()
        if name not in _SHARED + ("sentences",)
    }


def _cache_rows(parents, sentences):
    """The flat cache rows, `[len(sentences) * beams]`, that the new
    hypotheses of the state's rows `sentences` continue."""
    beams = tf.shape(parents)[1]
    return tf.reshape(parents + beams * sentences[:, tf.newaxis], [-1])


def any_shape_of_rank(state):
    """Shape invariants for a tf.while_loop under which every tensor of
    `state` may change shape (a growing decoder cache)."""
    return tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), state)


def compacting_loop(model: DecodingModel, step, done, start, length):
    """Runs `step` from `start` until position `length` or every sentence
    is done, the finished sentences leaving the batch after each step.

    Returns:
        The state after the last step, its per-sentence fields holding
        every sentence's as it left the loop, in input order.
    """

    def body(state, results):
        state, parents = step(state)
        results = {
            name: tf.tensor_scatter_nd_update(
                results[name], state.sentences[:, tf.newaxis], value
            )
            for name, value in _per_sentence(state).items()
        }
        # Only the sentences whose result may still change go on.
        going_on = tf.cast(tf.where(tf.logical_not(done(state)))[:, 0], tf.int32)
        rows = (
            going_on
            if parents is None
            else _cache_rows(tf.gather(parents, going_on), going_on)
        )
        state = state._replace(
            cache=model.reorder_decode_cache(state.cache, rows, sentences=going_on),
            sentences=tf.gather(state.sentences, going_on),
            **{
                name: tf.gather(value, going_on)
                for name, value in _per_sentence(state).items()
            },
        )
        return state, results

    results = _per_sentence(start)
    # Sentences leave the state's batch; its cache grows.
    shapes = start._replace(
        index=start.index.shape,
        cache=any_shape_of_rank(start.cache),
        **{
            name: tf.TensorShape([None] + value.shape[1:].as_list())
            for name, value in start._asdict().items()
            if name not in _SHARED
        },
    )
    state, results = tf.while_loop(
        lambda state, _: tf.logical_and(
            state.index < length, tf.size(state.sentences) > 0
        ),
        body,
        [start, results],
        shape_invariants=[shapes, tf.nest.map_structure(lambda t: t.shape, results)],
    )
    return state._replace(sentences=start.sentences, **results)


def fixed_shape_loop(model: DecodingModel, step, done, start, stages):
    """Runs `step` from `start` until every sentence is done, a loop per
    buffer length of `stages` (`buffer_stages`; `start`'s cache has
    buffers of the first), each until its buffer is full.

    Returns:
        The state after the last step.
    """
    # Every sentence stays, so the loops do not carry `sentences`: XLA
    # fails to compile a third loop that carries an unchanged constant
    # (tensorflow/tensorflow#122886).
    sentences = start.sentences

    def body(state):
        state, parents = step(state._replace(sentences=sentences))
        if parents is not None:
            rows = _cache_rows(parents, tf.range(tf.shape(parents)[0]))
            state = state._replace(cache=model.reorder_decode_cache(state.cache, rows))
        return (state._replace(sentences=()),)

    def cond(state, *, stage):
        return tf.logical_and(
            state.index < stage,
            tf.logical_not(tf.reduce_all(done(state._replace(sentences=sentences)))),
        )

    state = start._replace(sentences=())
    for stage in stages:
        (state,) = tf.while_loop(
            functools.partial(cond, stage=stage),
            body,
            [state._replace(cache=model.grow_decode_buffers(state.cache, stage))],
        )
    return state._replace(sentences=sentences)


def run_search(
    model: DecodingModel,
    source_ids: tf.Tensor,
    start: Callable[[dict], Any],
    step: Callable[[Any], tuple[Any, tf.Tensor | None]],
    done: Callable[[Any], tf.Tensor],
    length: tf.Tensor,
    extra_length: int,
    fixed_shapes: bool,
    beams: int | tf.Tensor = 1,
):
    """The final state of a search of `source_ids` from `start(cache)`,
    `cache` the model's decoder state for `beams` hypotheses per sentence:
    by `fixed_shape_loop` over `buffer_stages` if `fixed_shapes`, else by
    `compacting_loop` (one growing cache)."""
    if fixed_shapes:
        stages = buffer_stages(model, source_ids, length, extra_length)
        cache = model.start_decoding(source_ids, stages[0], beams=beams)
        return fixed_shape_loop(model, step, done, start(cache), stages)
    cache = model.start_decoding(source_ids, beams=beams)
    return compacting_loop(model, step, done, start(cache), length)
