"""The kernel cache (``torchrl_warp.kernel_cache``): a second process loads what the first compiled.

Each process runs with its own temporary cache folder (``TORCHRL_WARP_CACHE_DIR``). The
probe kernels are one tiny phase in a module written for the test, so that a test can
edit the phase, or a helper it calls, and see the edit compile anew.
"""
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numba
import pytest
import torch

from conftest import SIM
from test_atomics import needs_nvvm
from torchrl_warp import kernel_cache
from torchrl_warp.codegen import KernelSpec

pytestmark = pytest.mark.skipif(SIM, reason="the simulator runs kernels as Python: nothing to cache")

TESTS = Path(__file__).resolve().parent

_CARTPOLE = """
import json, time
import torch
from torchrl_warp.envs import CartPoleEnv
torch.manual_seed(0)  # rand_action's
t = time.perf_counter()
env = CartPoleEnv(num_envs=4, seed=0)
td = env.step(env.rand_action(env.reset()))
elapsed = time.perf_counter() - t
stats = [k.stats for k in env._compiled.values()]
print(json.dumps({"elapsed": elapsed, "hits": sum(sum(s.cache_hits.values()) for s in stats),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats),
                  "observation": td["next", "observation"].tolist()}))
"""

_PROBE = """
import json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from phases import scale
from torchrl_warp.backends import CpuBackend
from torchrl_warp.codegen import KernelSpec
kernel = CpuBackend(torch.device("cpu"), label="Probe").compile(KernelSpec("step", (scale,)))
value = np.ones((2, 3))
flags = [np.ones(2, bool), np.uint64(0), np.zeros(2, np.int32), np.zeros(2, np.int32)] + [np.zeros(2, bool)] * 3
kernel(2, 3, *flags, value)
print(json.dumps({"value": value[0, 0], "hits": sum(kernel.stats.cache_hits.values()),
                  "misses": sum(kernel.stats.cache_misses.values())}))
"""


def _run(code: str, cache: Path, *args, **env) -> tuple[dict, str]:
    environ = dict(os.environ, TORCHRL_WARP_CACHE_DIR=str(cache), **env)
    environ.pop("TORCHRL_WARP_CACHE", None)
    result = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=environ, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def _probe_module(folder: Path, factor: float, offset: float = 0.0) -> None:
    """``phases.scale`` multiplies by ``helpers.FACTOR`` (through ``helpers.times``), then adds ``offset``."""
    folder.mkdir(exist_ok=True)
    (folder / "helpers.py").write_text(textwrap.dedent(f"""
        import numba
        FACTOR = {factor!r}

        @numba.njit
        def times(x):
            return x * FACTOR
    """))
    (folder / "phases.py").write_text(textwrap.dedent(f"""
        import numba
        from helpers import times

        @numba.njit
        def scale(env, agent, value):
            value[env, agent] = times(value[env, agent]) + {offset!r}
    """))


def test_a_second_process_loads_cartpole_from_the_cache(tmp_path):
    cache = tmp_path / "kernels"
    first, log = _run(_CARTPOLE, cache)
    assert (first["hits"], first["misses"]) == (0, 2)  # reset and step compiled
    assert log.count(f"compiling CartPoleEnv's kernels for cpu (first use; cached in {cache})") == 1
    # each kernel's parallel loop and its serial twin (for one thread): the first compiled, the second never called
    assert sorted(p.name.split("_")[1] for p in cache.glob("*.py")) == ["reset", "reset", "step", "step"]
    assert len(list(cache.glob("__pycache__/*.nbi"))) == 2
    second, log = _run(_CARTPOLE, cache)
    assert (second["hits"], second["misses"]) == (2, 0), second  # both loaded, nothing compiled
    assert "compiling" not in log
    assert second["observation"] == first["observation"]
    # build, reset and first step, measured inside the process (0.4 s on a 2-core CPU; compiling: 3-8 s)
    assert second["elapsed"] < 2.0, second


def test_an_edit_of_a_phase_or_of_what_it_calls_compiles_anew(tmp_path):
    cache, code = tmp_path / "kernels", tmp_path / "probe"
    _probe_module(code, 2.0)
    assert _run(_PROBE, cache, code)[0] == {"value": 2.0, "hits": 0, "misses": 1}
    assert _run(_PROBE, cache, code)[0] == {"value": 2.0, "hits": 1, "misses": 0}
    _probe_module(code, 3.0)  # a constant of the helper's module: the phase's source is unchanged
    assert _run(_PROBE, cache, code)[0] == {"value": 3.0, "hits": 0, "misses": 1}
    _probe_module(code, 3.0, offset=1.0)  # the phase itself
    assert _run(_PROBE, cache, code)[0] == {"value": 4.0, "hits": 0, "misses": 1}
    _probe_module(code, 2.0)  # back to the first: its entry is still there
    assert _run(_PROBE, cache, code)[0] == {"value": 2.0, "hits": 1, "misses": 0}
    assert len(list(cache.glob("Probe_step_*.py"))) == 3 * 2  # three versions, each parallel and serial


def test_processes_that_write_the_same_entry_at_once_both_work(tmp_path):
    cache, code = tmp_path / "kernels", tmp_path / "probe"
    _probe_module(code, 2.0)
    environ = dict(os.environ, TORCHRL_WARP_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _PROBE, str(code)], env=environ, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["value"] == 2.0
    assert _run(_PROBE, cache, code)[0] == {"value": 2.0, "hits": 1, "misses": 0}
    assert not list(cache.glob(".*.tmp"))  # no temporary file left behind


# ----- in one process: the key, the folder, the switch ------------------------------------------

def _reading(scale, name="phase"):
    """A phase that reads the global ``SCALE`` (Numba freezes a global's value into the kernel)."""
    namespace = {"SCALE": scale}
    exec(f"def {name}(env, agent, value):\n    value[env, agent] *= SCALE\n", namespace)
    return numba.njit(namespace[name])


def _key(*phases, backend="cpu", options=None):
    spec = KernelSpec("step", phases)
    return kernel_cache.driver_key(spec.cpu_source(), spec.functions, backend, options or {"parallel": True})


def test_the_key_covers_what_the_kernel_compiles_from():
    assert _key(_reading(2.0)) == _key(_reading(2.0))  # the same code and values: one entry
    assert _key(_reading(2.0)) != _key(_reading(3.0))  # a global's value
    assert _key(_reading(2.0)) != _key(_reading(2.0, name="other"))  # the code
    assert _key(_reading(2.0)) != _key(_reading(2.0), _reading(2.0))  # the driver's source
    assert _key(_reading(2.0)) != _key(_reading(2.0), backend="cuda")
    assert _key(_reading(2.0)) != _key(_reading(2.0), options={"parallel": True, "max_registers": 64})


def test_the_key_covers_the_library_versions(monkeypatch):
    phase = _reading(2.0)
    before = _key(phase)
    monkeypatch.setattr(kernel_cache, "_version", lambda name: "0.0" if name == "numba" else "-")
    assert _key(phase) != before


def test_folder_and_switch(monkeypatch, tmp_path):
    monkeypatch.delenv(kernel_cache.CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernel_cache.cache_dir() == tmp_path / "torchrl_warp" / "kernels"
    monkeypatch.setenv(kernel_cache.CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert kernel_cache.cache_dir() == tmp_path / "mine"
    monkeypatch.setenv(kernel_cache.CACHE_ENV, "0")
    assert kernel_cache.cache_dir() is None
    fn, path = kernel_cache.load_driver("def f():\n    return 1\n", "f", {}, key="0" * 32, label="X", kind="step")
    assert fn() == 1 and path is None and not (tmp_path / "mine").exists()


def test_an_unwritable_folder_warns_once_and_compiles_in_memory(monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(kernel_cache.CACHE_DIR_ENV, str(blocker / "kernels"))  # under a file: no folder there
    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    with caplog.at_level(logging.WARNING, logger=kernel_cache.logger.name):
        for _ in range(2):
            fn, path = kernel_cache.load_driver("def f():\n    return 2\n", "f", {}, key="1" * 32, label="X",
                                                kind="step")
            assert fn() == 2 and path is None
    assert len([r for r in caplog.records if "cannot write the kernel cache" in r.message]) == 1


def test_the_compile_line_goes_to_the_log(monkeypatch, tmp_path, caplog):
    from torchrl_warp.backends import CpuBackend

    monkeypatch.setenv(kernel_cache.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger=kernel_cache.logger.name):
        CpuBackend(torch.device("cpu"), label=f"Logged{time.time_ns()}").compile(KernelSpec("step", (_reading(5.0),)))
    lines = [r.getMessage() for r in caplog.records if r.name == kernel_cache.logger.name]
    assert len(lines) == 1 and lines[0].endswith(f"'s kernels for cpu (first use; cached in {tmp_path})"), lines


@pytest.mark.skipif(SIM, reason="the simulator replaces numba.cuda")
@needs_nvvm
def test_cuda_kernels_cache_from_their_file(monkeypatch, tmp_path):
    """The CUDA backend compiles ``cuda.jit(cache=True)`` over the cache's file, and that kernel
    compiles for an H200 (PTX). Whether Numba then saves and loads it needs a GPU (its index
    key asks the driver for the device), so that part is checked on one, not here."""
    from numba import cuda
    from numba.cuda import dispatcher
    from numba.cuda.core.caching import Cache
    from numba.cuda.typing.typeof import typeof

    from torchrl_warp.backends import _CudaLayout
    from torchrl_warp.envs import CartPoleEnv

    monkeypatch.setenv(kernel_cache.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    env = CartPoleEnv(num_envs=2)
    spec = env._kernels["step"]
    kernel = _CudaLayout(torch.device("cpu"), label="CartPoleEnv")._compile(spec)
    assert isinstance(kernel._cache, Cache)  # caching on (a NullCache when off)
    assert Path(kernel.py_func.__code__.co_filename).parent == tmp_path
    if not numba.config.CACHE_DIR:  # else Numba keeps its index and data under NUMBA_CACHE_DIR
        assert Path(kernel._cache.cache_path) == tmp_path / "__pycache__"
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))
    signature = (numba.types.int64,) * 4 + tuple(typeof(a) for a in env._args["step"])
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))  # the function executed from the file
    assert "warp_step_cuda" in ptx
