"""LearnedPositionEncoding: rows of its table from the start position on,
and an error past its length."""

import numpy as np
import pytest
import tensorflow as tf

from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


def test_learned_position_encoding_slices_its_table():
    layer = layers.LearnedPositionEncoding(max_length=10)
    out = layer(tf.zeros([2, 4, 6]), start_index=3).numpy()
    np.testing.assert_array_equal(out[1], layer.position_embeddings.numpy()[3:7])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer"):
        layer(tf.zeros([1, 11, 6]))


def test_layer_contract(sequence):
    check_layer_contract(
        layers.LearnedPositionEncoding(max_length=12), (sequence,), (2, 6, 8), 1
    )
