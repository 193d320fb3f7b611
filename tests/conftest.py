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


def pytest_collection_finish(session):
    """Before a GPU suite runs (20 GPU tests or more, one process, the kernel cache on): compile
    the kernels of the envs its tests build, in parallel processes (tests/kernel_warmup.py), so
    the suite's process loads them instead of compiling them one after another."""
    import time

    from kernel_warmup import WARMUP_ENV, warm
    from torchrl_warp.kernel_cache import cache_dir, switched_off

    if (SIM or not torch.cuda.is_available() or "PYTEST_XDIST_WORKER" in os.environ or cache_dir() is None
            or switched_off(WARMUP_ENV) or sum("gpu" in item.keywords for item in session.items) < 20):
        return
    import all_envs
    import test_gpu

    tasks = [("test_gpu", name, device) for name in test_gpu.ENVS for device in ("cuda", "cpu")]
    tasks += [("all_envs", name, "cuda") for name in all_envs.ENVS]
    start = time.perf_counter()
    failed = [f"{what}: {error}" for what, _, error in warm(tasks) if error]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"kernel warm-up: {len(tasks)} env builds compiled in {time.perf_counter() - start:.0f} s "
                            f"({len(failed)} failed: left to their tests)" + "".join(f"\n  {f}" for f in failed))
