"""Shared fixtures. Tests mirror the package's layout; what they share
lives in the `helpers` package (tests/ is on the path: pyproject's
pytest `pythonpath`, and PYTHONPATH for the helper scripts that tests run
as processes)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One xdist worker per core (`-n 2`): TensorFlow's per-op thread pool,
    # sized to every core by default, would have each worker's ops contend
    # with the other's. Inherited by the tools the tests run as processes.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import pytest


def pytest_configure(config):
    """One line, not a hundred FileNotFoundErrors, where the Multi30k
    files the tests read are missing."""
    from helpers.multi30k_data import MULTI30K

    if not os.path.isdir(os.path.join(MULTI30K, "tok")):
        raise pytest.UsageError(
            f"{MULTI30K}/tok: missing; the tests read Multi30k there: run "
            "`t2t-fetch multi30k --tokenized_references` in the checkout first"
        )


# Session fixtures too costly to build on each xdist worker: the model
# trained to copy (800 steps, a minute or two) that two modules share.
_BUILT_ONCE = ("copy_model",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Under `-n 2` (`--dist loadgroup`, pyproject's addopts), the tests of
    a module that has a module-scoped fixture run on one xdist worker:
    split over two, each worker would build the fixture (an export, a
    trained run, a matrix of tool processes) again. So do the tests that
    use a fixture of `_BUILT_ONCE`."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        definitions = fixtures.name2fixturedefs if fixtures else {}
        shared = [name for name in _BUILT_ONCE if name in definitions]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
        elif any(d.scope == "module" for defs in definitions.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def toy_run_dir(tmp_path_factory):
    """A model_dir trained by the real Trainer to translate four phrases."""
    from helpers.toy_run import train_learnable_run

    model_dir = tmp_path_factory.mktemp("toy_run")
    train_learnable_run(model_dir)
    return str(model_dir)
