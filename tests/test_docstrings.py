"""The `>>>` examples in the package's docstrings run, and say what the
code does."""

import doctest
import importlib
import pkgutil

import pytest

import t2t_repro


def _library_modules():
    """Every module but the command-line tools (each defines flags at
    import, and they are tested as processes)."""
    for module in pkgutil.walk_packages(t2t_repro.__path__, "t2t_repro."):
        if not module.name.startswith("t2t_repro.cli"):
            yield module.name


@pytest.mark.parametrize("name", sorted(_library_modules()))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS |
                             doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed"
