"""The two loops a search runs in (loops.py): the fixed-shape (XLA) one's
buffers and stages, both loops' results alike, outputs that do not
depend on batch padding, and the empty batch."""

import numpy as np
import pytest
import tensorflow as tf

from helpers.decoding_models import (
    RANDOM,
    assert_mostly_the_same,
    beam,
    greedy,
    random_sources,
)
from t2t_repro.config import PAD_ID
from t2t_repro.decoding.beam_search import beam_search
from t2t_repro.decoding.common import buffer_stages, max_decode_length
from t2t_repro.decoding.greedy import greedy_decode


def test_fixed_shape_buffers_double_in_stages_up_to_the_output_limit(random_model):
    def stages(source_ids, extra=50):
        length = max_decode_length(random_model, source_ids, extra)
        return [
            int(stage)
            for stage in buffer_stages(random_model, source_ids, length, extra)
        ]

    assert stages(tf.zeros([2, 10], tf.int32)) == [16, 32, 60]
    assert stages(tf.zeros([2, 10], tf.int32), extra=6) == [16]
    # Traced without a static length: stages up to max_length (32) + 50,
    # those past this input's limit (5 + 50) cut to it.
    traced = tf.function(
        stages, input_signature=[tf.TensorSpec([None, None], tf.int32)]
    ).get_concrete_function()
    assert [int(t) for t in traced(tf.zeros([1, 5], tf.int32))] == [16, 32, 55, 55]


def test_output_does_not_depend_on_batch_padding(random_model):
    # The untrained model rarely emits EOS, so outputs run to the limit of
    # input length + 50: the limit must come from the real length. (Exact:
    # it does not depend on which token wins a near-tie.)
    source = random_sources(np.random.default_rng(5), 16, RANDOM.vocab_size)
    padded = np.pad(source, [[0, 0], [0, 7]])
    limits = np.sum(source != PAD_ID, axis=1) + 50
    for decode in (
        lambda ids: greedy(random_model, ids),
        lambda ids: beam(random_model, ids, 3, 0.6),
    ):
        alone = [np.asarray(x) for x in decode(source)]
        wide = [np.asarray(x) for x in decode(padded)]
        width = alone[0].shape[-1]
        assert np.all(wide[0][..., width:] == PAD_ID)
        lengths = np.sum(wide[0] != PAD_ID, axis=-1)
        assert np.all(lengths.T <= limits) and np.any(lengths.T == limits)
        assert_mostly_the_same(
            random_model, source, alone, (wide[0][..., :width], wide[1])
        )


@pytest.mark.slow
def test_xla_and_graph_decoders_give_the_same_tokens(random_model):
    # The graph decoders' caches grow; XLA's are fixed-size buffers,
    # doubled in stages (16, 32, then the limit): untrained, the outputs
    # run past the second.
    source = tf.constant(
        random_sources(np.random.default_rng(3), 16, RANDOM.vocab_size)
    )
    for decode in (
        lambda ids, fixed: greedy_decode(random_model, ids, fixed_shapes=fixed),
        lambda ids, fixed: beam_search(random_model, ids, 4, 0.6, fixed_shapes=fixed),
    ):
        graph = tf.function(lambda ids: decode(ids, False))(source)
        xla = tf.function(lambda ids: decode(ids, True), jit_compile=True)(source)
        assert np.max(np.sum(graph[0].numpy() != PAD_ID, axis=-1)) > 32
        assert_mostly_the_same(random_model, source.numpy(), graph, xla)


def test_empty_batch_decodes(random_model):
    empty = tf.zeros([0, 5], tf.int32)
    assert greedy_decode(random_model, empty)[0].shape[0] == 0
    assert beam_search(random_model, empty, 4, 0.6)[0].shape[:2] == (0, 4)
