"""Dense, Keras' layer with a float32 bias gradient, against NumPy and
against Keras' own outputs and gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.layer_contract import check_layer_contract
from t2t_repro import layers

_ROWS, _WIDTH, _UNITS = 8192, 8, 4
_RNG = np.random.default_rng(31)
_X = _RNG.normal(size=(_ROWS, _WIDTH)).astype(np.float32)
_UPSTREAM = _RNG.normal(size=(_ROWS, _UNITS)).astype(np.float32)


def _gradients(layer_class, policy, activation=None):
    """(output, d input, d kernel, d bias) of a layer with random weights
    for the loss sum(output * _UPSTREAM)."""
    dense = layer_class(_UNITS, activation=activation, dtype=policy)
    dense.build(_X.shape)
    rng = np.random.default_rng(32)
    for weight in dense.trainable_weights:
        weight.assign(rng.normal(size=weight.shape).astype(np.float32))
    x = tf.constant(_X)

    @tf.function
    def forward_backward():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = dense(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * _UPSTREAM)
        return [y, *tape.gradient(loss, [x, dense.kernel, dense.bias])]

    with tf.device("/CPU:0"):  # the kernel whose sums are off is the CPU's
        results = forward_backward()
    return [np.asarray(tf.cast(t, tf.float32)) for t in results]


def test_bf16_bias_gradient_is_the_float_sum_where_keras_is_not():
    """The bias gradient is sum(upstream) over 8,192 rows: in bf16 ours
    is that sum rounded once to bf16; Keras' BiasAddGrad kernel (on a
    CPU) accumulates in bf16 and is far off."""
    exact = _UPSTREAM.astype(np.float64).sum(0)
    # Each upstream value is rounded to bf16 as the layer receives it.
    upstream_bf16 = np.asarray(tf.cast(tf.cast(_UPSTREAM, tf.bfloat16), tf.float64))
    exact_of_bf16 = upstream_bf16.sum(0)
    ours = _gradients(layers.Dense, "mixed_bfloat16")[3]
    np.testing.assert_allclose(ours, exact_of_bf16, rtol=2**-8, atol=1e-2)
    theirs = _gradients(keras.layers.Dense, "mixed_bfloat16")[3]
    assert np.abs(theirs - exact).max() > 10 * np.abs(ours - exact).max()


@pytest.mark.parametrize("activation", [None, "relu"])
def test_float32_outputs_and_gradients_equal_keras(activation):
    for ours, theirs in zip(
        _gradients(layers.Dense, "float32", activation),
        _gradients(keras.layers.Dense, "float32", activation),
    ):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)


def test_checkpoint_layout_is_keras_dense(tmp_path):
    """A checkpoint of Keras' Dense restores into ours, variable for
    variable."""
    theirs = keras.layers.Dense(_UNITS)
    theirs.build((None, _WIDTH))
    theirs.kernel.assign(np.ones((_WIDTH, _UNITS), np.float32))
    path = tf.train.Checkpoint(layer=theirs).save(str(tmp_path / "ckpt"))
    ours = layers.Dense(_UNITS)
    ours.build((None, _WIDTH))
    tf.train.Checkpoint(layer=ours).restore(path).assert_consumed()
    np.testing.assert_array_equal(ours.kernel.numpy(), theirs.kernel.numpy())


def test_layer_contract():
    check_layer_contract(
        layers.Dense(_UNITS, activation="relu"),
        [tf.constant(_X[:6])],
        (6, _UNITS),
        trainable_weights=2,
    )
