"""Dropout, Keras' layer with a cheaper mask: its rate, scale, seed,
gradient and compute dtype."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_repro import kernels, layers


def test_dropout_keeps_its_rate_scales_the_rest_and_follows_its_seed(activations):
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
    x = tf.constant(activations)
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


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_noise_shape_drops_whole_slices_at_the_16_bit_rate(dtype):
    """As Keras' `noise_shape` (None: the input's size), with this layer's
    16-bit rate, and the scale applied in float32 in a bf16 model."""
    x = tf.cast(tf.random.stateless_normal([200, 50, 8], [1, 2]), dtype)
    dropout = layers.Dropout(0.1, noise_shape=(None, None, 1), seed=6, dtype=dtype.name)
    y = tf.function(
        lambda x: dropout(x, training=True),
        input_signature=[tf.TensorSpec([None, None, 8], dtype)],
    )(x)
    assert y.dtype == dtype
    x, y = (tf.cast(t, tf.float32).numpy() for t in (x, y))
    dropped = (y == 0).all(-1)
    assert ((y != 0).all(-1) | dropped).all()  # whole slices only
    assert abs(dropped.mean() - 6554 / 65536) < 0.01
    scale = 65536 / (65536 - 6554)
    expected = tf.cast(tf.cast(x[~dropped] * scale, dtype), tf.float32)
    np.testing.assert_array_equal(y[~dropped], expected)


def _bits(tensor):
    """The tensor's bit patterns: equal values, equal NaNs, signed zeros."""
    array = tf.convert_to_tensor(tensor).numpy()
    return array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize("shape", [(13,), (4, 7, 33), (300, 257)])
def test_cpp_kernel_drops_exactly_what_the_tensorflow_ops_drop(dtype, shape):
    rng = np.random.default_rng(len(shape))
    x = rng.normal(size=shape).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # kept or dropped, as the ops
    upstream = tf.constant(rng.normal(size=shape), dtype)
    results = []
    for use_kernels in (False, True):
        # The same seed each time; a policy whose compute dtype is dtype.
        policy = "float32" if dtype == tf.float32 else "mixed_bfloat16"
        dropout = layers.Dropout(0.3, seed=11, dtype=policy)
        with kernels.enabled(use_kernels):
            # Built on any machine with a C++ compiler (CI's too).
            assert kernels.active() == use_kernels
            inputs = tf.constant(x, dtype)
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                y = dropout(inputs, training=True)
            results.append((y, tape.gradient(y, inputs, upstream)))
    (ops_y, ops_dx), (kernel_y, kernel_dx) = results
    assert kernel_y.dtype == kernel_dx.dtype == dtype
    np.testing.assert_array_equal(_bits(kernel_y), _bits(ops_y))
    np.testing.assert_array_equal(_bits(kernel_dx), _bits(ops_dx))
    dropped = tf.cast(ops_dx, tf.float32).numpy() == 0
    assert 0.2 < dropped.mean() < 0.4
