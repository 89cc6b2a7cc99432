"""LayerNormalization, Keras' layer with a hand-written gradient, against
NumPy and against Keras' own outputs and gradients."""

from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.processes import run_python
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


def _bf16(values):
    return tf.cast(tf.constant(values), tf.bfloat16).numpy().astype(np.float32)


@pytest.mark.parametrize(
    "policy, shape",
    [
        ("float32", (3, 5, 16)),
        ("float32", (7, 333)),  # fewer rows than a block, odd width
        ("float32", (1000, 64)),  # many blocks, the last one partial
        ("mixed_bfloat16", (4, 9, 64)),
        ("mixed_bfloat16", (1000, 64)),
    ],
)
def test_cpp_kernel_builds_here_and_matches_numpy(policy, shape):
    rng = np.random.default_rng(5)
    x = (rng.normal(size=shape) * 3 + 1).astype(np.float32)
    upstream = rng.normal(size=shape).astype(np.float32)
    norm = layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    norm.build(shape)
    norm.gamma.assign(rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32))
    norm.beta.assign(rng.normal(size=shape[-1]).astype(np.float32))
    bf16 = policy == "mixed_bfloat16"
    if bf16:  # what the kernel sees, and the reference too
        x, upstream = _bf16(x), _bf16(upstream)
    with kernels.enabled(True):
        # The kernel is built on a machine with a C++ compiler (CI's too):
        # a broken build fails here instead of falling back unseen.
        assert kernels.active()
        with tf.GradientTape() as tape:
            inputs = tf.constant(x, norm.compute_dtype)
            tape.watch(inputs)
            y = norm(inputs)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        grads = tape.gradient(loss, [inputs, norm.gamma, norm.beta])
    assert y.dtype == grads[0].dtype == norm.compute_dtype
    gamma, beta = norm.gamma.numpy(), norm.beta.numpy()
    # bf16 outputs are float32 results rounded to nearest: within half a
    # unit in the last place (2^-8 relative; truncating would reach 2^-7).
    rtol = 2**-8 * 1.01 if bf16 else 1e-5
    want_dx, want_dgamma, want_dbeta = _numpy_layer_norm_gradients(x, gamma, upstream)
    for got, want, atol in (
        (y, ref.layer_norm(x.astype(np.float64), gamma, beta), 1e-5),
        (grads[0], want_dx, 1e-4),
        (grads[1], want_dgamma, 1e-3),
        (grads[2], want_dbeta, 1e-3),
    ):
        np.testing.assert_allclose(
            tf.cast(got, tf.float32).numpy(), want, rtol=rtol, atol=atol
        )


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_cpp_kernel_keeps_nan_and_inf_to_their_rows(dtype):
    x = np.tile(np.linspace(-1, 1, 8, dtype=np.float32), (3, 1))
    x[0, 2], x[2, 5] = np.nan, np.inf
    with kernels.enabled(True):
        y = layers.LayerNormalization(epsilon=1e-6)(tf.constant(x, dtype))
    y = tf.cast(y, tf.float32).numpy()
    assert np.isnan(y[0]).all() and np.isnan(y[2]).all()
    np.testing.assert_allclose(y[1], ref.layer_norm(x[1], 1.0, 0.0), atol=1e-2)


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


@pytest.mark.slow
def test_a_cached_kernel_that_does_not_load_is_rebuilt(tmp_path):
    # In a process of its own: a process that loaded the kernels from the
    # usual cache cannot register the same ops from a second file.
    script = f"""
from unittest import mock
from t2t_repro import kernels
broken = kernels.cache_path()
assert str(broken).startswith({str(tmp_path)!r})
broken.parent.mkdir(parents=True)
broken.write_bytes(b"not a shared library")
with mock.patch.object(kernels.logging, "warning") as warning:
    assert kernels.library() is not None
assert "did not load" in warning.call_args[0][0]
assert broken.read_bytes()[:4] == b"\\x7fELF"
print("rebuilt")
"""
    result = run_python(["-c", script], env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.stdout.strip() == "rebuilt", result.stderr[-3000:]
