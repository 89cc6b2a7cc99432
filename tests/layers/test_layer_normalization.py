"""LayerNormalization, Keras' layer with a hand-written gradient, against
NumPy and against Keras' own outputs and gradients."""

from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from t2t_repro import kernels, layers

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


def _numpy_layer_norm_gradients(x, gamma, upstream, epsilon=1e-6):
    """d(sum(upstream * layer_norm(x))) / d(x, gamma, beta), float64."""
    x = x.astype(np.float64)
    x_hat = (x - x.mean(-1, keepdims=True)) / np.sqrt(
        x.var(-1, keepdims=True) + epsilon
    )
    g = upstream * gamma
    width = x.shape[-1]
    # Jacobian of x_hat wrt x, applied row by row: (I - 1/n - x_hat x_hat^T / n) / std.
    dx = (
        g
        - g.mean(-1, keepdims=True)
        - x_hat * (g * x_hat).sum(-1, keepdims=True) / width
    ) / np.sqrt(x.var(-1, keepdims=True) + epsilon)
    rows = tuple(range(x.ndim - 1))
    return dx, (upstream * x_hat).sum(rows), upstream.sum(rows)


@pytest.mark.parametrize(
    "policy, shape, tolerance",
    [
        ("float32", (3, 5, 16), 1e-5),
        ("float32", (7, 333), 1e-5),  # rows not a multiple of the threads' tasks
        ("mixed_bfloat16", (4, 9, 64), 3e-2),
    ],
)
def test_cpp_kernel_builds_here_and_matches_numpy(policy, shape, tolerance):
    rng = np.random.default_rng(5)
    x = (rng.normal(size=shape) * 3 + 1).astype(np.float32)
    upstream = rng.normal(size=shape).astype(np.float32)
    norm = layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    norm.build(shape)
    norm.gamma.assign(rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32))
    norm.beta.assign(rng.normal(size=shape[-1]).astype(np.float32))
    calls = []
    with kernels.enabled(True):
        # The kernel is built on a machine with a C++ compiler (CI's too):
        # a broken build fails here instead of falling back unseen.
        assert kernels.active()
        with tf.GradientTape() as tape:
            inputs = tf.constant(x)
            tape.watch(inputs)
            y = norm(inputs)
            calls.append(y)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        grads = tape.gradient(loss, [inputs, norm.gamma, norm.beta])
    assert y.dtype == norm.compute_dtype
    gamma, beta = norm.gamma.numpy(), norm.beta.numpy()
    np.testing.assert_allclose(
        tf.cast(y, tf.float32).numpy(), ref.layer_norm(x, gamma, beta), atol=tolerance
    )
    # The gradient arrives in bf16 in bf16: compare with the rounded upstream's.
    for got, want in zip(
        grads, _numpy_layer_norm_gradients(x, gamma, upstream), strict=True
    ):
        np.testing.assert_allclose(
            tf.cast(got, tf.float32).numpy(), want, atol=tolerance * 10, rtol=tolerance
        )


def test_layer_norm_runs_tensorflow_ops_where_the_kernel_cannot_be_built(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler")
    kernels.library.cache_clear()
    try:
        with mock.patch.object(kernels.logging, "warning") as warning:
            with kernels.enabled(True):
                assert not kernels.active()
                y = layers.LayerNormalization(epsilon=1e-6)(tf.constant(_X))
        (message, *arguments), _ = warning.call_args
        assert "could not be built" in message % tuple(arguments)
        assert "no-such-compiler" in message % tuple(arguments)
        assert not list(tmp_path.rglob("*.so"))
        np.testing.assert_allclose(
            y.numpy(), ref.layer_norm(_X, np.ones(16), np.zeros(16)), atol=1e-5
        )
    finally:
        kernels.library.cache_clear()
