"""SinusoidalPositionEncoding against the paper's formula, at any length
and from any start position."""

import numpy as np
import tensorflow as tf

from helpers import numpy_reference as ref
from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


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


def test_layer_contract(sequence):
    check_layer_contract(layers.SinusoidalPositionEncoding(), (sequence,), (2, 6, 8), 0)
