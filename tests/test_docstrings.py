"""The `>>>` examples in the package's docstrings run, and say what the
code does."""

import doctest
import importlib
import pkgutil

import pytest

import t2t_repro


def _modules_with_examples():
    """Every module whose source holds a `>>>` example, but the
    command-line tools (each defines flags at import, and they are tested as
    processes). A module without one would only add a case that cannot
    fail."""
    for module in pkgutil.walk_packages(t2t_repro.__path__, "t2t_repro."):
        if module.name.startswith("t2t_repro.cli"):
            continue
        path = module.module_finder.find_spec(module.name).origin
        if not path:  # a namespace package: no source
            continue
        with open(path, encoding="utf-8") as handle:
            if ">>>" in handle.read():
                yield module.name


MODULES = sorted(_modules_with_examples())


def test_the_examples_are_found():
    # A change to the search above that finds nothing must not pass as
    # "no example failed".
    assert len(MODULES) >= 10, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder().find(module)
    examples = sum(len(test.examples) for test in tests)
    # A `>>>` that doctest does not see (outside a docstring, or in one
    # doctest skips) would otherwise pass without running.
    assert examples > 0, f"{name}: '>>>' in the source, but no example found"
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted == examples
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed"
