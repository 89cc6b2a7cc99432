"""The model's incremental decoding: one step at a time over a cache equals
teacher forcing, whatever the cache's kind."""

import dataclasses
import itertools

import numpy as np
import pytest

from helpers.decoding_models import RANDOM, random_sources
from t2t_repro.config import BOS_ID
from t2t_repro.model import Transformer


@pytest.mark.parametrize("head_dims", [None, (3, 5)])
def test_cached_decoding_equals_teacher_forcing(random_model, head_dims):
    if head_dims:  # d_k != d_v != d_model / h
        random_model = Transformer(
            dataclasses.replace(RANDOM, key_dim=head_dims[0], value_dim=head_dims[1])
        )
    rng = np.random.default_rng(0)
    source = random_sources(rng, 3, RANDOM.vocab_size)
    target_in = np.concatenate(
        [np.full([3, 1], BOS_ID), rng.integers(4, 40, [3, 7])], 1
    )
    target_in = target_in.astype(np.int32)
    expected = random_model((source, target_in), training=False).numpy()
    # Rows b * beams + k all follow sentence b; a growing cache, a
    # preallocated (XLA) buffer, and one grown from 4 to 12 positions when
    # it is full (a stage of fixed-shape decoding).
    for beams, buffer_length in itertools.product((1, 2), (None, 12, 4)):
        cache = random_model.start_decoding(source, buffer_length, beams=beams)
        rows = np.repeat(target_in, beams, axis=0)
        for index in range(target_in.shape[1]):
            if index == buffer_length:
                cache = random_model.grow_decode_buffers(cache, 12)
            logits, cache = random_model.decode_step(
                rows[:, index : index + 1],
                index,
                cache,
                buffered=buffer_length is not None,
            )
            np.testing.assert_allclose(
                logits.numpy(), np.repeat(expected[:, index], beams, axis=0), atol=1e-5
            )
