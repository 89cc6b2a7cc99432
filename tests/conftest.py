"""Shared fixtures. Tests mirror the package's layout; what they share
lives in tests/helpers/ (importable by name, also by the helper scripts
that tests run as processes)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "helpers"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import pytest


@pytest.fixture(scope="session")
def toy_run_dir(tmp_path_factory):
    """A model_dir trained by the real Trainer to translate four phrases."""
    from toy_run import train_learnable_run

    model_dir = tmp_path_factory.mktemp("toy_run")
    train_learnable_run(model_dir)
    return str(model_dir)
