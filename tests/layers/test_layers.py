"""Layers against the NumPy reference and exact masking properties."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


def _dense_weights(layer):
    return layer.kernel.numpy(), layer.bias.numpy()


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
        name: _dense_weights(getattr(mha, f"{name}_dense"))
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
        name: _dense_weights(getattr(mha, f"{name}_dense"))
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


def test_sinusoidal_position_encoding_matches_formula():
    x = tf.zeros([2, 50, 24])
    pe = layers.SinusoidalPositionEncoding()(x).numpy()
    np.testing.assert_allclose(pe[0], ref.positional_encoding(50, 24), atol=1e-5)
    np.testing.assert_array_equal(pe[0], pe[1])
    shifted = layers.SinusoidalPositionEncoding()(x[:, :1], start_index=17)
    np.testing.assert_allclose(shifted[0, 0], pe[0, 17], atol=1e-5)


def test_sinusoidal_position_encoding_any_length():
    pe = layers.SinusoidalPositionEncoding()(tf.zeros([1, 3000, 8])).numpy()
    np.testing.assert_allclose(
        pe[0, 2999], ref.positional_encoding(3000, 8)[2999], atol=1e-3
    )


def test_learned_position_encoding_slices_its_table():
    layer = layers.LearnedPositionEncoding(max_length=10)
    out = layer(tf.zeros([2, 4, 6]), start_index=3).numpy()
    np.testing.assert_array_equal(out[1], layer.position_embeddings.numpy()[3:7])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer"):
        layer(tf.zeros([1, 11, 6]))


def test_feed_forward_matches_reference():
    ffn = layers.PositionWiseFeedForward(d_model=8, d_ff=32)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype(np.float32)
    out = ffn(x)
    expected = ref.feed_forward(
        x, *_dense_weights(ffn.inner), *_dense_weights(ffn.outer)
    )
    np.testing.assert_allclose(out, expected, atol=1e-5)


def _encoder_reference(layer, x, mask):
    w = {
        name: _dense_weights(getattr(layer.self_attention, f"{name}_dense"))
        for name in ("query", "key", "value", "output")
    }

    def norm(n):
        return n.gamma.numpy(), n.beta.numpy()

    if layer.pre_norm:
        normed = ref.layer_norm(x, *norm(layer.attention_norm))
        attended, _ = ref.multi_head_attention(normed, normed, w, layer.num_heads, mask)
        h = x + attended
        return h + ref.feed_forward(
            ref.layer_norm(h, *norm(layer.feed_forward_norm)),
            *_dense_weights(layer.feed_forward.inner),
            *_dense_weights(layer.feed_forward.outer),
        )
    attended, _ = ref.multi_head_attention(x, x, w, layer.num_heads, mask)
    h = ref.layer_norm(x + attended, *norm(layer.attention_norm))
    ffn = ref.feed_forward(
        h,
        *_dense_weights(layer.feed_forward.inner),
        *_dense_weights(layer.feed_forward.outer),
    )
    return ref.layer_norm(h + ffn, *norm(layer.feed_forward_norm))


@pytest.mark.parametrize("pre_norm", [False, True])
def test_encoder_layer_matches_reference(pre_norm):
    layer = layers.EncoderLayer(
        d_model=16, num_heads=2, d_ff=32, dropout=0.1, pre_norm=pre_norm
    )
    x = np.random.default_rng(4).normal(size=(2, 6, 16)).astype(np.float32)
    mask = np.ones((2, 1, 1, 6), bool)
    mask[0, ..., 4:] = False
    out = layer(x, attention_mask=mask, training=False)
    np.testing.assert_allclose(out, _encoder_reference(layer, x, mask), atol=1e-4)


def test_residual_dropout_is_active_only_in_training():
    layer = layers.EncoderLayer(d_model=16, num_heads=2, d_ff=32, dropout=0.5)
    x = tf.random.normal([2, 6, 16])
    np.testing.assert_array_equal(layer(x), layer(x))
    assert not np.allclose(layer(x, training=True), layer(x))


_X = np.random.default_rng(5).normal(size=(2, 6, 8)).astype(np.float32)
_MEMORY = np.random.default_rng(6).normal(size=(2, 7, 8)).astype(np.float32)
_HEADS = np.random.default_rng(7).normal(size=(2, 2, 6, 4)).astype(np.float32)


@pytest.mark.parametrize(
    "layer, inputs, shape, trainable_weights",
    [
        (layers.ScaledDotProductAttention(dropout=0.2), (_HEADS,) * 3, (2, 2, 6, 4), 0),
        (
            layers.MultiHeadAttention(num_heads=2, d_model=8, dropout=0.1),
            (_X, _MEMORY),
            (2, 6, 8),
            8,
        ),
        (layers.SinusoidalPositionEncoding(), (_X,), (2, 6, 8), 0),
        (layers.LearnedPositionEncoding(max_length=12), (_X,), (2, 6, 8), 1),
        (
            layers.PositionWiseFeedForward(d_model=8, d_ff=16, dropout=0.1),
            (_X,),
            (2, 6, 8),
            4,
        ),
        (
            layers.EncoderLayer(d_model=8, num_heads=2, d_ff=16, pre_norm=True),
            (_X,),
            (2, 6, 8),
            16,
        ),
        (
            layers.DecoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.3),
            (_X, _MEMORY),
            (2, 6, 8),
            26,
        ),
        (
            layers.SharedEmbedding(vocab_size=20, d_model=8),
            (np.array([[3, 5, 0]]),),
            (1, 3, 8),
            1,
        ),
    ],
    ids=lambda value: (
        type(value).__name__ if isinstance(value, keras.layers.Layer) else ""
    ),
)
def test_layer_contract(layer, inputs, shape, trainable_weights):
    check_layer_contract(layer, inputs, shape, trainable_weights)


def test_shared_embedding_scales_and_ties_projection():
    embedding = layers.SharedEmbedding(vocab_size=11, d_model=4)
    ids = tf.constant([[1, 5, 0]])
    vectors = embedding(ids).numpy()
    table = embedding.embeddings.numpy()
    np.testing.assert_allclose(vectors[0], table[[1, 5, 0]] * 2.0, atol=1e-6)
    logits = embedding.project(tf.constant(vectors)).numpy()
    np.testing.assert_allclose(logits[0], vectors[0] @ table.T, atol=1e-5)
