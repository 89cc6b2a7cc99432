"""LayerNormalization, Keras' layer with a hand-written gradient, against
NumPy and against Keras' own outputs and gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from t2t_repro import layers

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
