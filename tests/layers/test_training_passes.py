"""Dropout and LayerNormalization: Keras' layers with cheaper training
passes, against NumPy and Keras' own, and with Keras' checkpoint."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from t2t_repro import layers
from t2t_repro.layers import encoder_layer

_RNG = np.random.default_rng(21)
_X = _RNG.normal(size=(3, 5, 16)).astype(np.float32) * 3 + 1


def _norms(policy):
    """(ours, Keras') with equal, non-trivial weights."""
    norms = []
    for cls in (layers.LayerNormalization, keras.layers.LayerNormalization):
        norm = cls(epsilon=1e-6, dtype=policy)
        norm.build(_X.shape)
        norm.gamma.assign(np.linspace(0.5, 1.5, 16, dtype=np.float32))
        norm.beta.assign(np.linspace(-0.3, 0.3, 16, dtype=np.float32))
        norms.append(norm)
    return norms


@pytest.mark.parametrize(
    "policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 3e-2)]
)
def test_layer_norm_matches_reference_and_keras_gradients(policy, tolerance):
    ours, theirs = _norms(policy)
    upstream = tf.constant(_RNG.normal(size=_X.shape).astype(np.float32))
    results = []
    for norm in (ours, theirs):
        x = tf.constant(_X)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = norm(x)
            assert y.dtype == norm.compute_dtype
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        results.append(
            [
                tf.cast(t, tf.float32).numpy()
                for t in [y, *tape.gradient(loss, [x, norm.gamma, norm.beta])]
            ]
        )
    np.testing.assert_allclose(
        results[0][0],
        ref.layer_norm(_X, ours.gamma.numpy(), ours.beta.numpy()),
        atol=tolerance,
    )
    for got, want in zip(results[0], results[1], strict=True):
        np.testing.assert_allclose(got, want, atol=tolerance * 10, rtol=tolerance)


def test_dropout_keeps_its_rate_scales_the_rest_and_follows_its_seed():
    ones = tf.ones([63, 33, 31])  # an odd number of elements
    dropout = layers.Dropout(0.1, seed=3)
    first = dropout(ones, training=True).numpy()
    kept = first != 0
    scale = 65536 / (65536 - 6554)
    np.testing.assert_allclose(first[kept], scale, rtol=1e-6)
    assert abs(kept.mean() - (1 - 6554 / 65536)) < 0.005
    assert not np.array_equal(first, dropout(ones, training=True))
    np.testing.assert_array_equal(
        first, layers.Dropout(0.1, seed=3)(ones, training=True)
    )
    np.testing.assert_array_equal(dropout(ones), ones)
    x = tf.constant(_X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layers.Dropout(0.5, seed=4)(x, training=True)
    gradient = tape.gradient(y, x).numpy()
    np.testing.assert_array_equal(gradient, np.where(y.numpy() != 0, 2.0, 0.0))


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_dropout_in_compute_dtype(dtype):
    """Also: rates that round to 0 or 1 in 16 bits run Keras' dropout."""
    ones = tf.ones([8, 8])
    np.testing.assert_array_equal(
        layers.Dropout(1.0)(ones, training=True), tf.zeros_like(ones)
    )
    np.testing.assert_allclose(  # Keras' scale; 16 bits would keep 1.0
        layers.Dropout(1e-6)(ones, training=True), 1 / (1 - 1e-6), rtol=1e-7
    )
    dropped = layers.Dropout(0.5, seed=5, dtype=dtype.name)(
        tf.ones([8, 8], dtype), training=True
    )
    assert dropped.dtype == dtype
    assert set(np.unique(tf.cast(dropped, tf.float32))) <= {0.0, 2.0}


def test_checkpoint_layout_is_keras_layers(tmp_path, monkeypatch):
    """A checkpoint of a layer built with ours lists the same variables as
    one built with Keras' Dropout and LayerNormalization: runs trained
    before restore, and after."""

    def checkpoint_keys(name):
        layer = layers.EncoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.1)
        layer(tf.constant(_X[..., :8]), training=True)
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
