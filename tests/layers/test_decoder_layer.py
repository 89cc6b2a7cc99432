"""DecoderLayer against the NumPy reference, post-norm and pre-norm, on the
whole sequence and one position at a time with the self-attention cache
(growing, and a preallocated buffer); and the contract every layer meets."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers
from t2t_repro.layers.masks import causal_mask

BATCH, TARGET_LENGTH, SOURCE_LENGTH = 2, 6, 7
D_MODEL, NUM_HEADS = 16, 2


def _decoder_layer(pre_norm):
    """A built layer whose weights are all drawn at random
    (`randomize_weights`). Every dropout is on, for inference to turn
    off."""
    layer = layers.DecoderLayer(
        d_model=D_MODEL,
        num_heads=NUM_HEADS,
        d_ff=32,
        dropout=0.1,
        attention_dropout=0.1,
        relu_dropout=0.1,
        pre_norm=pre_norm,
    )
    layer.build((BATCH, TARGET_LENGTH, D_MODEL))
    ref.randomize_weights(layer, seed=8)
    return layer


def _inputs():
    """Target `[batch, target_length, d_model]`, encoder output `[batch,
    source_length, d_model]`, and the encoder output's padding mask (the
    first sentence is padded after 4 tokens)."""
    rng = np.random.default_rng(4)
    target = rng.normal(size=(BATCH, TARGET_LENGTH, D_MODEL)).astype(np.float32)
    memory = rng.normal(size=(BATCH, SOURCE_LENGTH, D_MODEL)).astype(np.float32)
    memory_mask = np.ones((BATCH, 1, 1, SOURCE_LENGTH), bool)
    memory_mask[0, ..., 4:] = False
    return target, memory, memory_mask


def _decoder_reference(layer, target, memory, memory_mask, branch_scale=1.0):
    def norm(n):
        return n.gamma.numpy(), n.beta.numpy()

    w = {
        "self_attention": ref.attention_weights(layer.self_attention),
        "cross_attention": ref.attention_weights(layer.cross_attention),
        "feed_forward": (
            *ref.dense_weights(layer.feed_forward.inner),
            *ref.dense_weights(layer.feed_forward.outer),
        ),
        "self_attention_norm": norm(layer.attention_norm),
        "cross_attention_norm": norm(layer.cross_attention_norm),
        "feed_forward_norm": norm(layer.feed_forward_norm),
    }
    return ref.decoder_layer(
        target, memory, w, layer.num_heads, memory_mask, layer.pre_norm, branch_scale
    )


def test_layer_dropout_skips_whole_layers_per_sentence():
    rate, batch = 0.25, 64
    keras.utils.set_random_seed(3)  # the mask's draws: a fixed outcome
    layer = layers.DecoderLayer(
        d_model=D_MODEL,
        num_heads=NUM_HEADS,
        d_ff=32,
        dropout=0.0,
        layer_dropout=rate,
        pre_norm=True,
    )
    layer.build((batch, TARGET_LENGTH, D_MODEL))
    ref.randomize_weights(layer, seed=8)
    rng = np.random.default_rng(4)
    target = rng.normal(size=(batch, TARGET_LENGTH, D_MODEL)).astype(np.float32)
    memory = rng.normal(size=(batch, SOURCE_LENGTH, D_MODEL)).astype(np.float32)
    memory_mask = np.ones((batch, 1, 1, SOURCE_LENGTH), bool)
    memory_mask[0, ..., 4:] = False
    self_mask = causal_mask(TARGET_LENGTH)
    out = layer(
        target,
        memory,
        self_attention_mask=self_mask,
        cross_attention_mask=memory_mask,
        training=True,
    ).numpy()
    skipped = (out == target).all(axis=(1, 2))
    assert 0.1 < skipped.mean() < 0.45
    # Kept sentences: all three residual branches scaled by 1 / (1 - rate).
    keep = np.where(skipped, 0.0, 1 / (1 - rate))[:, None, None]
    np.testing.assert_allclose(
        out, _decoder_reference(layer, target, memory, memory_mask, keep), atol=1e-4
    )
    inference = layer(
        target,
        memory,
        self_attention_mask=self_mask,
        cross_attention_mask=memory_mask,
        training=False,
    )
    np.testing.assert_allclose(
        inference, _decoder_reference(layer, target, memory, memory_mask), atol=1e-4
    )


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoder_layer_matches_reference(pre_norm):
    layer = _decoder_layer(pre_norm)
    target, memory, memory_mask = _inputs()
    out = layer(
        target,
        memory,
        self_attention_mask=causal_mask(TARGET_LENGTH),
        cross_attention_mask=memory_mask,
        training=False,
    )
    np.testing.assert_allclose(
        out, _decoder_reference(layer, target, memory, memory_mask), atol=1e-4
    )


@pytest.mark.parametrize("buffered", [False, True], ids=["growing", "buffer"])
@pytest.mark.parametrize("pre_norm", [False, True])
def test_decoding_one_position_at_a_time_matches_reference(pre_norm, buffered):
    """Steps through the target as a decoder does: each step gets one
    position, the self-attention cache of the positions before it (grown
    by one position a step, or a zeroed buffer of the whole length that
    the mask hides beyond the step) and the cross-attention cache; the
    steps' outputs together are the whole sequence's."""
    layer = _decoder_layer(pre_norm)
    target, memory, memory_mask = _inputs()
    cache_length = TARGET_LENGTH if buffered else 0
    self_cache = tuple(
        tf.zeros([BATCH, NUM_HEADS, cache_length, D_MODEL // NUM_HEADS])
        for _ in ("keys", "values")
    )
    cross_cache = layer.cross_attention.compute_cache(memory)
    steps = []
    for index in range(TARGET_LENGTH):
        step, self_cache = layer(
            target[:, index : index + 1],
            self_attention_mask=(
                np.arange(TARGET_LENGTH)[np.newaxis, np.newaxis, np.newaxis] <= index
                if buffered
                else None
            ),
            cross_attention_mask=memory_mask,
            self_attention_cache=self_cache,
            cache_update_index=index if buffered else None,
            cross_attention_cache=cross_cache,
            training=False,
        )
        steps.append(step)
    np.testing.assert_allclose(
        np.concatenate(steps, axis=1),
        _decoder_reference(layer, target, memory, memory_mask),
        atol=1e-4,
    )


def test_layer_contract(sequence, memory):
    check_layer_contract(
        layers.DecoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.3),
        (sequence, memory),
        (2, 6, 8),
        26,
    )
