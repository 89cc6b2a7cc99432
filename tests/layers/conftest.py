"""Inputs that tests of several layers share."""

import numpy as np
import pytest


@pytest.fixture
def sequence():
    """`[2, 6, 8]`: the sequence the layer contract feeds each layer."""
    return np.random.default_rng(5).normal(size=(2, 6, 8)).astype(np.float32)


@pytest.fixture
def memory():
    """`[2, 7, 8]`: the encoder output the contract's attending layers read."""
    return np.random.default_rng(6).normal(size=(2, 7, 8)).astype(np.float32)


@pytest.fixture
def activations():
    """`[3, 5, 16]`, away from zero mean and unit variance, for the layers
    with cheaper training passes."""
    return np.random.default_rng(21).normal(size=(3, 5, 16)).astype(np.float32) * 3 + 1
