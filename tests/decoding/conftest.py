"""The decoding tests' models, built once for all of them."""

import pytest

from helpers import decoding_models


@pytest.fixture(scope="session")
def random_model():
    return decoding_models.untrained_model()


@pytest.fixture(scope="session")
def copy_model():
    return decoding_models.trained_copy_model()
