"""PositionWiseFeedForward against the NumPy reference."""

import numpy as np

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


def test_feed_forward_matches_reference():
    ffn = layers.PositionWiseFeedForward(d_model=8, d_ff=32)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype(np.float32)
    out = ffn(x)
    expected = ref.feed_forward(
        x, *ref.dense_weights(ffn.inner), *ref.dense_weights(ffn.outer)
    )
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_layer_contract(sequence):
    check_layer_contract(
        layers.PositionWiseFeedForward(d_model=8, d_ff=16, dropout=0.1),
        (sequence,),
        (2, 6, 8),
        4,
    )
