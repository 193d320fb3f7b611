"""Every docstring example in the package runs and shows what it says."""
import doctest
import importlib
import pkgutil

import pytest

from conftest import SIM


def _modules():
    names = set()
    for package in ("torchrl_warp", "torchrl_warp.envs", "torchrl_warp.cuda", "torchrl_warp.recipes"):
        root = importlib.import_module(package)
        names.add(package)
        names.update(m.name for m in pkgutil.walk_packages(root.__path__, package + "."))
    return sorted(names)


@pytest.mark.skipif(SIM, reason="the examples run on the CPU backend")
@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
