"""Test setup: GPU tests skip without a GPU; the simulator runs only tests marked ``sim``.

The suite runs twice (see README): once normally (CPU backend, plus GPU tests where a
GPU exists), once with ``NUMBA_ENABLE_CUDASIM=1 -m sim``, where ``device="cpu"``
environments run the CUDA kernels in Numba's simulator at tiny sizes.
"""
import os

import pytest
import torch

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available() and not SIM:
        return
    reason = "needs a CUDA GPU" if not SIM else "the CUDA simulator replaces the GPU driver"
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def expected_backend():
    return "cudasim" if SIM else "cpu"
