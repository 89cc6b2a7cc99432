"""ScaledDotProductAttention against the NumPy reference, and its masking,
which holds exactly: with dropout, and for a query with no key to see."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import kernels, layers
from t2t_repro.layers.scaled_dot_product_attention import _masked_softmax

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


def _masked_softmax_and_jacobian(logits, mask, depth_sqrt):
    """float64 weights of the layer's formula and, per row, the Jacobian
    d weights / d logits (masked entries constant: zero rows and columns)."""
    mask = np.broadcast_to(mask, logits.shape)
    scaled = np.where(mask, logits.astype(np.float64) / depth_sqrt, -1e9)
    weights = ref.softmax(scaled) * mask
    # d w_i / d z_j = w_i (delta_ij - w_j) / depth_sqrt where both are allowed.
    eye = np.eye(logits.shape[-1])
    jacobian = weights[..., :, None] * (eye - weights[..., None, :]) / depth_sqrt
    jacobian = jacobian * mask[..., :, None] * mask[..., None, :]
    return weights, jacobian


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
@pytest.mark.parametrize(
    "mask_shape",
    [
        (3, 1, 1, 9),  # padding: one row per sentence
        (1, 1, 5, 9),  # causal-like: one row per query
        (3, 2, 5, 9),  # a full mask
        (3, 1, 5, 9),
    ],
)
def test_cpp_kernel_matches_numpy_weights_and_gradients(dtype, mask_shape):
    rng = np.random.default_rng(sum(mask_shape))
    logits = (rng.normal(size=(3, 2, 5, 9)) * 4).astype(np.float32)
    upstream = rng.normal(size=logits.shape).astype(np.float32)
    mask = rng.random(mask_shape) > 0.4
    mask.reshape(-1, 9)[1] = False  # a row with no key to see
    if dtype == tf.bfloat16:  # what the kernel sees, and the reference too
        logits, upstream = (
            tf.cast(tf.cast(t, dtype), tf.float32).numpy() for t in (logits, upstream)
        )
    depth_sqrt = np.float32(np.sqrt(8.0))
    with kernels.enabled(True):
        # Built on any machine with a C++ compiler (CI's too): a broken
        # build fails here instead of falling back unseen.
        assert kernels.active()
        z = tf.constant(logits, dtype)
        with tf.GradientTape() as tape:
            tape.watch(z)
            weights = kernels.masked_softmax(z, mask, depth_sqrt)
            loss = tf.reduce_sum(tf.cast(weights, tf.float32) * upstream)
        dlogits = tape.gradient(loss, z)
    assert weights.dtype == dlogits.dtype == dtype
    want_weights, jacobian = _masked_softmax_and_jacobian(logits, mask, depth_sqrt)
    want_dlogits = np.einsum("...i,...ij->...j", upstream, jacobian)
    # bf16 outputs are float32 results rounded to nearest: half an ulp.
    rtol = 2**-8 * 1.01 if dtype == tf.bfloat16 else 1e-5
    for got, want in ((weights, want_weights), (dlogits, want_dlogits)):
        np.testing.assert_allclose(
            tf.cast(got, tf.float32).numpy(), want, rtol=rtol, atol=1e-6
        )
    fully_masked = ~np.broadcast_to(mask, logits.shape).any(-1)
    assert fully_masked.any()
    assert not tf.cast(weights, tf.float32).numpy()[fully_masked].any()


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_layer_with_cpp_kernel_matches_tensorflow_ops(dtype):
    rng = np.random.default_rng(3)
    q, k, v = (tf.constant(rng.normal(size=(2, 3, 6, 8)), dtype) for _ in range(3))
    causal = np.tril(np.ones((6, 6), bool))[None, None]
    attention = layers.ScaledDotProductAttention()

    def forward_and_backward(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = attention(q, k, v, attention_mask=causal, training=True)
        return [out, *tape.gradient(out, [q, k, v])]

    results = []
    for use_kernels in (False, True):
        with kernels.enabled(use_kernels):
            step = tf.function(forward_and_backward)
            results.append(step(q, k, v))
        op_types = {
            op.type for op in step.get_concrete_function(q, k, v).graph.get_operations()
        }
        assert ("T2tMaskedSoftmaxGrad" in op_types) == use_kernels
    tolerance = 1e-2 if dtype == tf.bfloat16 else 1e-6
    for ops, kernel in zip(*results, strict=True):
        np.testing.assert_allclose(
            tf.cast(kernel, tf.float32).numpy(),
            tf.cast(ops, tf.float32).numpy(),
            rtol=tolerance,
            atol=tolerance,
        )


def test_cpp_kernel_names_a_mask_that_does_not_broadcast():
    with (
        kernels.enabled(True),
        pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"a mask of shape \[2,1,3,9\] does not broadcast to logits of "
            r"shape \[2,2,5,9\]",
        ),
    ):
        kernels.masked_softmax(
            tf.zeros([2, 2, 5, 9]), tf.ones([2, 1, 3, 9], tf.bool), 1.0
        )


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_cpp_kernel_spreads_nan_as_the_tensorflow_ops_do(dtype):
    # A NaN logit, and a NaN upstream gradient at a masked key (what an
    # overflow in a padded position gives): a row has NaNs where the ops'
    # has (oneDNN's softmax places them its own way within the row), so a
    # step's gradient norm is not finite and its update skipped.
    logits = np.zeros((1, 1, 3, 4), np.float32)
    logits[0, 0, 0, 1] = np.nan
    mask = np.array([True, True, True, False]).reshape(1, 1, 1, 4)
    upstream = np.ones_like(logits)
    upstream[0, 0, 1, 3] = np.nan
    results = []
    for weights_of in (
        lambda z: tf.cast(_masked_softmax(z, mask, 2.0), dtype),
        lambda z: kernels.masked_softmax(z, mask, 2.0),
    ):
        with kernels.enabled(True):
            z = tf.constant(logits, dtype)
            with tf.GradientTape() as tape:
                tape.watch(z)
                weights = weights_of(z)
            results.append(
                [
                    np.isnan(tf.cast(t, tf.float32).numpy()).any(-1)
                    for t in (weights, tape.gradient(weights, z, upstream))
                ]
            )
    for ops, kernel in zip(*results, strict=True):
        np.testing.assert_array_equal(kernel, ops)
    weights_rows, gradient_rows = results[1]
    assert weights_rows.tolist() == [[[True, False, False]]]
    assert gradient_rows.tolist() == [[[True, True, False]]]
