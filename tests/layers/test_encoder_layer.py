"""EncoderLayer against the NumPy reference, post-norm and pre-norm; its
residual dropout; and, as it composes them, that our Dropout and
LayerNormalization keep the checkpoint layout of Keras' layers."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers
from t2t_repro.layers import encoder_layer


def _encoder_reference(layer, x, mask, branch_scale=1.0):
    w = {
        name: ref.dense_weights(getattr(layer.self_attention, f"{name}_dense"))
        for name in ("query", "key", "value", "output")
    }

    def norm(n):
        return n.gamma.numpy(), n.beta.numpy()

    if layer.pre_norm:
        normed = ref.layer_norm(x, *norm(layer.attention_norm))
        attended, _ = ref.multi_head_attention(normed, normed, w, layer.num_heads, mask)
        h = x + branch_scale * attended
        return h + branch_scale * ref.feed_forward(
            ref.layer_norm(h, *norm(layer.feed_forward_norm)),
            *ref.dense_weights(layer.feed_forward.inner),
            *ref.dense_weights(layer.feed_forward.outer),
        )
    attended, _ = ref.multi_head_attention(x, x, w, layer.num_heads, mask)
    h = ref.layer_norm(x + attended, *norm(layer.attention_norm))
    ffn = ref.feed_forward(
        h,
        *ref.dense_weights(layer.feed_forward.inner),
        *ref.dense_weights(layer.feed_forward.outer),
    )
    return ref.layer_norm(h + ffn, *norm(layer.feed_forward_norm))


@pytest.mark.parametrize("pre_norm", [False, True])
def test_encoder_layer_matches_reference(pre_norm):
    layer = layers.EncoderLayer(
        d_model=16, num_heads=2, d_ff=32, dropout=0.1, pre_norm=pre_norm
    )
    layer.build((2, 6, 16))
    ref.randomize_weights(layer, seed=5)
    x = np.random.default_rng(4).normal(size=(2, 6, 16)).astype(np.float32)
    mask = np.ones((2, 1, 1, 6), bool)
    mask[0, ..., 4:] = False
    out = layer(x, attention_mask=mask, training=False)
    np.testing.assert_allclose(out, _encoder_reference(layer, x, mask), atol=1e-4)


def test_layer_dropout_skips_whole_layers_per_sentence():
    rate = 0.25
    keras.utils.set_random_seed(3)  # the mask's draws: a fixed outcome
    layer = layers.EncoderLayer(
        d_model=16, num_heads=2, d_ff=32, dropout=0.0, layer_dropout=rate, pre_norm=True
    )
    layer.build((64, 6, 16))
    ref.randomize_weights(layer, seed=5)
    x = np.random.default_rng(4).normal(size=(64, 6, 16)).astype(np.float32)
    mask = np.ones((64, 1, 1, 6), bool)
    mask[0, ..., 4:] = False
    out = layer(x, attention_mask=mask, training=True).numpy()
    skipped = (out == x).all(axis=(1, 2))
    assert 0.1 < skipped.mean() < 0.45
    # Kept sentences: both residual branches scaled by 1 / (1 - rate).
    keep = np.where(skipped, 0.0, 1 / (1 - rate))[:, None, None]
    np.testing.assert_allclose(out, _encoder_reference(layer, x, mask, keep), atol=1e-4)
    # Inference: every layer, unscaled.
    np.testing.assert_allclose(
        layer(x, attention_mask=mask, training=False),
        _encoder_reference(layer, x, mask),
        atol=1e-4,
    )


def test_layer_dropout_needs_pre_norm():
    with pytest.raises(ValueError, match="layer_dropout needs pre_norm"):
        layers.EncoderLayer(d_model=16, num_heads=2, d_ff=32, layer_dropout=0.1)


def test_residual_dropout_is_active_only_in_training():
    layer = layers.EncoderLayer(d_model=16, num_heads=2, d_ff=32, dropout=0.5)
    x = tf.random.normal([2, 6, 16])
    np.testing.assert_array_equal(layer(x), layer(x))
    assert not np.allclose(layer(x, training=True), layer(x))


def test_layer_contract(sequence):
    check_layer_contract(
        layers.EncoderLayer(
            d_model=8, num_heads=2, d_ff=16, layer_dropout=0.2, pre_norm=True
        ),
        (sequence,),
        (2, 6, 8),
        16,
    )


def test_checkpoint_layout_is_keras_layers(tmp_path, monkeypatch, activations):
    """A checkpoint of a layer built with ours lists the same variables as
    one built with Keras' Dropout and LayerNormalization: runs trained
    before restore, and after."""

    def checkpoint_keys(name):
        layer = layers.EncoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.1)
        layer(tf.constant(activations[..., :8]), training=True)
        path = tf.train.Checkpoint(layer=layer).write(str(tmp_path / name))
        return sorted(
            (key, tuple(shape)) for key, shape in tf.train.list_variables(path)
        )

    ours = checkpoint_keys("ours")
    monkeypatch.setattr(encoder_layer, "Dropout", keras.layers.Dropout)
    monkeypatch.setattr(
        encoder_layer, "LayerNormalization", keras.layers.LayerNormalization
    )
    monkeypatch.setattr(
        layers.position_wise_feed_forward, "Dropout", keras.layers.Dropout
    )
    monkeypatch.setattr(
        layers.scaled_dot_product_attention, "Dropout", keras.layers.Dropout
    )
    assert ours == checkpoint_keys("keras")
    assert any("gamma" in key for key, _ in ours)
