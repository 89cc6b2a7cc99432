"""MultiHeadAttention against the NumPy reference, with the depths of
Table 3 set on their own and with a cross-attention cache read by beams."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


@pytest.mark.parametrize(
    "key_dim, value_dim",
    [
        (None, None),  # d_k = d_v = d_model / h
        (2, 8),
        (8, 3),
    ],
)  # Table 3 rows (A) and (B): depths set on their own
def test_multi_head_attention_matches_reference(key_dim, value_dim):
    rng = np.random.default_rng(2)
    mha = layers.MultiHeadAttention(
        num_heads=4, d_model=16, key_dim=key_dim, value_dim=value_dim
    )
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    memory = rng.normal(size=(2, 7, 16)).astype(np.float32)
    mask = np.ones((2, 1, 1, 7), bool)
    mask[1, ..., 5:] = False
    out, weights = mha(x, memory, attention_mask=mask, return_attention_scores=True)
    w = {
        name: ref.dense_weights(getattr(mha, f"{name}_dense"))
        for name in ("query", "key", "value", "output")
    }
    assert w["query"][0].shape == w["key"][0].shape == (16, 4 * (key_dim or 4))
    assert w["value"][0].shape == (16, 4 * (value_dim or 4))
    assert w["output"][0].shape == (4 * (value_dim or 4), 16)
    ref_out, ref_weights = ref.multi_head_attention(x, memory, w, 4, mask)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-6)
    assert np.all(weights.numpy()[1, :, :, 5:] == 0.0)


def test_beams_read_their_sentences_cross_attention_cache():
    """Queries of row b * beams + k against a cache of one row per
    sentence: each beam attends to its own sentence's memory (the NumPy
    reference with that memory repeated per beam), weights included."""
    rng = np.random.default_rng(3)
    mha = layers.MultiHeadAttention(num_heads=4, d_model=16, key_dim=2, value_dim=8)
    beams, x = 3, rng.normal(size=(2 * 3, 1, 16)).astype(np.float32)
    memory = rng.normal(size=(2, 7, 16)).astype(np.float32)
    mask = np.ones((2, 1, 1, 7), bool)
    mask[1, ..., 5:] = False
    mha.build(x.shape)
    out, _, weights = mha(
        x,
        attention_mask=mask,
        cache=mha.compute_cache(memory),
        return_attention_scores=True,
    )
    w = {
        name: ref.dense_weights(getattr(mha, f"{name}_dense"))
        for name in ("query", "key", "value", "output")
    }
    ref_out, ref_weights = ref.multi_head_attention(
        x, np.repeat(memory, beams, 0), w, 4, np.repeat(mask, beams, 0)
    )
    np.testing.assert_allclose(out, ref_out, atol=1e-5)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-6)


def test_multi_head_attention_rejects_indivisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        layers.MultiHeadAttention(num_heads=3, d_model=16)
    # Unless both depths are given.
    x = tf.zeros([1, 2, 16])
    assert layers.MultiHeadAttention(num_heads=3, d_model=16, key_dim=4, value_dim=4)(
        x, x
    ).shape == (1, 2, 16)


def test_layer_contract(sequence, memory):
    check_layer_contract(
        layers.MultiHeadAttention(num_heads=2, d_model=8, dropout=0.1),
        (sequence, memory),
        (2, 6, 8),
        8,
    )
