"""ScaledDotProductAttention against the NumPy reference, and its masking,
which holds exactly: with dropout, and for a query with no key to see."""

import numpy as np
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers

_HEADS = np.random.default_rng(7).normal(size=(2, 2, 6, 4)).astype(np.float32)


def test_scaled_dot_product_attention_matches_reference():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 5, 8)).astype(np.float32)
    k = rng.normal(size=(2, 3, 7, 8)).astype(np.float32)
    v = rng.normal(size=(2, 3, 7, 4)).astype(np.float32)
    mask = rng.random((2, 1, 5, 7)) > 0.3
    mask[..., 0] = True  # every query keeps at least one key
    out, weights = layers.ScaledDotProductAttention()(
        q, k, v, attention_mask=mask, return_attention_scores=True
    )
    ref_out, ref_weights = ref.attention(q, k, v, mask)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-6)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)


def test_masked_positions_get_exactly_zero_weight_even_with_dropout():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(1, 2, 6, 4)).astype(np.float32) * 30.0
    k = rng.normal(size=(1, 2, 6, 4)).astype(np.float32) * 30.0
    causal = np.tril(np.ones((6, 6), bool))[None, None]
    attention = layers.ScaledDotProductAttention(dropout=0.5)
    _, weights = attention(q, k, k, attention_mask=causal, return_attention_scores=True)
    assert np.all(weights.numpy()[..., ~causal[0, 0]] == 0.0)
    np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, atol=1e-6)
    # In training, with dropout, the output still only mixes allowed values:
    # an identity value matrix exposes the dropped weights themselves.
    identity = np.broadcast_to(np.eye(6, dtype=np.float32), (1, 2, 6, 6))
    dropped = attention(q, k, identity, attention_mask=causal, training=True)
    assert np.all(dropped.numpy()[..., ~causal[0, 0]] == 0.0)
    assert np.any(dropped.numpy()[..., causal[0, 0]] == 0.0)  # dropout ran


def test_fully_masked_query_gives_zero_output_and_finite_gradients():
    q = tf.random.normal([1, 1, 2, 4])
    k = tf.random.normal([1, 1, 3, 4])
    mask = np.array([[[[True, False, False], [False, False, False]]]])
    with tf.GradientTape() as tape:
        tape.watch(k)
        out = layers.ScaledDotProductAttention()(q, k, k, attention_mask=mask)
    np.testing.assert_array_equal(out.numpy()[0, 0, 1], 0.0)
    assert np.all(np.isfinite(tape.gradient(out, k).numpy()))


def test_layer_contract():
    check_layer_contract(
        layers.ScaledDotProductAttention(dropout=0.2), (_HEADS,) * 3, (2, 2, 6, 4), 0
    )
