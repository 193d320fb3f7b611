"""Compile the GPU suite's kernels in parallel processes before its tests run.

A GPU run of the suite on a machine whose kernel cache is empty spends most of its time
compiling (one env after another, one core busy: about 200 s on an H100 machine); the tests
then run in one process. Here each env of the suite's lists is built in a process of its
own (``spawn``, a CUDA context each), reset and stepped, so its kernels compile there and
land in the kernel cache (:mod:`torchrl_warp.kernel_cache`), from which the test process
loads them. A warm-up that fails says so and leaves the failure to the test that compiles
the same kernel in the suite's process.

Off: ``TORCHRL_WARP_WARMUP=0``; it also does nothing when the kernel cache is off.

Example:
    >>> tasks = [("all_envs", "cartpole", "cpu")]
    >>> [(what, error) for what, seconds, error in warm(tasks, processes=1)]  # doctest: +SKIP
    [('all_envs:cartpole on cpu', None)]
"""
from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

WARMUP_ENV = "TORCHRL_WARP_WARMUP"


def _build(module: str, name: str, device: str):
    """The env ``name`` of the list in ``module`` (``test_gpu.ENVS``'s factories, or
    ``all_envs.make``), on ``device``."""
    import importlib

    if module == "all_envs":
        return importlib.import_module(module).make(name, seed=0, device=device)
    return importlib.import_module(module).ENVS[name](device=device, seed=0)


def _compile_one(task: tuple[str, str, str]) -> tuple[str, float, str | None]:
    """Build, reset and step (twice, through ``step_and_maybe_reset``) one env: its step and
    reset kernels compile into the cache. Returns (what, seconds, error or None)."""
    start = time.perf_counter()
    module, name, device = task
    what = f"{module}:{name} on {device}"
    try:
        import torch

        env = _build(module, name, device)
        td = env.reset()
        for _ in range(2):
            td.update(env.full_action_spec.rand())
            _, td = env.step_and_maybe_reset(td)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as error:  # the suite's own test of this env says what is wrong
        return what, time.perf_counter() - start, f"{type(error).__name__}: {error}"
    return what, time.perf_counter() - start, None


def warm(tasks: list[tuple[str, str, str]], processes: int | None = None) -> list[tuple[str, float, str | None]]:
    """Compile the kernels of ``tasks`` ((module, env name, device) each) in ``processes``
    spawned processes (default: half the cores, at most one per task)."""
    processes = processes or max(1, min(len(tasks), (os.cpu_count() or 2) // 2))
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_compile_one, tasks))
