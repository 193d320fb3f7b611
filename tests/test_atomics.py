"""``torchrl_warp.atomics`` (``atomic_add``, ``atomic_count``) on the three backends, and the CUDA kernels' PTX.

The PTX tests compile the generated Tag kernels for an H200 (``cc=(9, 0)``) with
``numba.cuda.compile_ptx``: no GPU is needed, only libnvvm (numba-cuda's compiler
libraries); they are skipped without it.
"""
from types import SimpleNamespace

import numba
import numpy as np
import pytest
import torch
from numba import cuda

from conftest import SIM
from torchrl_warp.atomics import atomic_add, atomic_count
from torchrl_warp.codegen import KernelSpec
from torchrl_warp.rebase import rebase


@numba.njit
def count_phase(env, agent, cell, cell_count, slot):
    slot[env, agent] = atomic_add(cell_count, (env, cell[env, agent]), 1)


@numba.njit
def add_phase(env, agent, total, value):
    atomic_add(total, env, value[env, agent])


@numba.njit
def count_in_game_phase(env, agent, in_game, total):
    if in_game[env, agent]:
        atomic_count(total, env)


def check_counts(cell, cell_count, slot):
    """Every cell counted its agents, and handed each a distinct slot 0..count-1."""
    for e in range(cell.shape[0]):
        np.testing.assert_array_equal(cell_count[e], np.bincount(cell[e], minlength=cell_count.shape[1]))
        for c in range(cell_count.shape[1]):
            assert sorted(slot[e][cell[e] == c]) == list(range(cell_count[e, c]))


def test_cpu_overload_counts_and_returns_the_old_value():
    rng = np.random.default_rng(0)
    cell = rng.integers(0, 5, (3, 40))
    cell_count, slot = np.zeros((3, 5), np.int32), np.full((3, 40), -1, np.int32)
    for e in range(3):
        for a in range(40):
            count_phase(e, a, cell, cell_count, slot)
    check_counts(cell, cell_count, slot)
    assert slot[0, 0] == 0  # the first agent saw an empty cell
    total = np.zeros(2)
    value = np.array([[0.5, 0.25], [1.0, 2.0]])
    for e in range(2):
        for a in range(2):
            add_phase(e, a, total, value)
    assert total.tolist() == [0.75, 3.0]


def test_python_body_outside_a_kernel():
    a = np.array([1, 2, 3], np.int64)
    assert atomic_add(a, 1, 5) == 2 and a.tolist() == [1, 7, 3]
    atomic_count(a, 2)
    assert a.tolist() == [1, 7, 4]


def test_cpu_overload_of_atomic_count():
    in_game = np.random.default_rng(2).random((3, 50)) > 0.4
    total = np.zeros(3, np.int32)
    for e in range(3):
        for a in range(50):
            count_in_game_phase(e, a, in_game, total)
    assert total.tolist() == in_game.sum(1).tolist()


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="runs a kernel in the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
def test_simulator_atomic_from_a_phase():
    """Phases run as Python in the simulator; 16 threads of a block count into shared cells."""
    from torchrl_warp.backends import SimulatorBackend

    phase = SimulatorBackend(torch.device("cpu"))._phase(count_phase)

    @cuda.jit  # the module-level `cuda`: the simulator swaps a kernel's global `cuda`
    def kernel(cell, cell_count, slot):
        phase(cuda.blockIdx.x, cuda.threadIdx.x, cell, cell_count, slot)

    rng = np.random.default_rng(1)
    cell = rng.integers(0, 3, (2, 16))
    cell_count, slot = np.zeros((2, 3), np.int32), np.full((2, 16), -1, np.int32)
    kernel[2, 16](cell, cell_count, slot)
    check_counts(cell, cell_count, slot)


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="runs a kernel in the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
def test_simulator_atomic_count_from_a_phase():
    from torchrl_warp.backends import SimulatorBackend

    phase = SimulatorBackend(torch.device("cpu"))._phase(count_in_game_phase)

    @cuda.jit
    def kernel(in_game, total):
        phase(cuda.blockIdx.x, cuda.threadIdx.x, in_game, total)

    in_game = np.random.default_rng(3).random((2, 16)) > 0.5
    total = np.zeros(2, np.int32)
    kernel[2, 16](in_game, total)
    assert total.tolist() == in_game.sum(1).tolist()


def _nvvm_missing() -> str | None:
    """Why PTX cannot be compiled here (None if it can): tried on a trivial kernel."""
    if SIM:
        return "the CUDA simulator replaces numba.cuda's compiler"

    def trivial(a):
        a[0] = 1

    try:
        cuda.compile_ptx(trivial, (numba.int32[:],), cc=(9, 0))
        return None
    except Exception as err:  # noqa: BLE001 - any failure to load the compiler means: skip
        return (f"numba-cuda cannot compile PTX here ({type(err).__name__}): its compiler libraries "
                f"(libnvvm, NVRTC) are missing; pip install numba-cuda[cu12] or [cu13]")


_NO_PTX = _nvvm_missing()
needs_nvvm = pytest.mark.skipif(_NO_PTX is not None, reason=str(_NO_PTX))


def compile_ptx(spec: KernelSpec, args: tuple, monkeypatch, cc=(9, 0)) -> str:
    """PTX of ``spec``'s CUDA kernel for the argument values ``args``, without a GPU.

    The kernel source is exec'd as ``_CudaLayout._compile`` does; Numba compiles the
    phases it calls as device functions for the current device's compute capability,
    which is patched to ``cc`` since there is no device.
    """
    from numba.cuda import dispatcher
    from numba.cuda.typing.typeof import typeof

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=cc))
    namespace = {"cuda": cuda, "rebase": rebase}
    for i, phase in enumerate(spec.functions):
        namespace[f"phase_{i}"] = phase
    exec(compile(spec.cuda_source(), "<ptx test>", "exec"), namespace)
    layout = (numba.cuda.types.int64,) * 4  # num_envs, num_agents, threads_per_env, envs_per_block
    signature = layout + tuple(typeof(a) for a in args)
    ptx, _ = cuda.compile_ptx(namespace[f"warp_{spec.kind}_cuda"], signature, cc=cc)
    return ptx


@needs_nvvm
def test_atomic_add_compiles_to_a_cuda_atomic(monkeypatch):
    spec = KernelSpec("step", (count_phase, add_phase))
    values = dict(seed=np.uint64(0), step_count=np.zeros(2, np.int32), episode=np.zeros(2, np.int32),
                  cell=np.zeros((2, 4), np.int64), cell_count=np.zeros((2, 3), np.int32),
                  slot=np.zeros((2, 4), np.int32), total=np.zeros(2), value=np.zeros((2, 4)))
    args = tuple(values.get(name, np.zeros(2, bool)) for name in spec.arguments)  # flags and masks
    ptx = compile_ptx(spec, args, monkeypatch)
    assert "atom.global.add.u32" in ptx and "atom.global.add.f64" in ptx


@needs_nvvm
def test_atomic_count_adds_once_per_warp_in_ptx(monkeypatch):
    spec = KernelSpec("step", (count_in_game_phase,))
    values = dict(seed=np.uint64(0), step_count=np.zeros(2, np.int32), episode=np.zeros(2, np.int32),
                  in_game=np.zeros((2, 4), bool), total=np.zeros(2, np.int32))
    args = tuple(values.get(name, np.zeros(2, bool)) for name in spec.arguments)
    ptx = compile_ptx(spec, args, monkeypatch)
    assert "match.any.sync" in ptx and "popc" in ptx and "atom.global.add.u32" in ptx


@needs_nvvm
@pytest.mark.parametrize("kind", ["step", "reset"])
@pytest.mark.parametrize("params", [dict(neighbor_search="grid"), dict(neighbor_search="scan"),
                                    dict(use_full_observation=True)], ids=["grid", "scan", "full"])
def test_tag_kernels_compile_for_cuda(kind, params, monkeypatch):
    from torchrl_warp.envs import TagEnv

    env = TagEnv(num_envs=2, num_taggers=2, num_runners=5, num_other_agents_observed=2, **params)
    ptx = compile_ptx(env._kernels[kind], env._args[kind], monkeypatch)
    assert ".entry" in ptx and "bar.sync" in ptx
    # every kernel counts with atomics: the grid its agents per cell, the scan and the full
    # observation (no grid) their runners left, once per warp; a step its tags too
    assert "atom.global.add.u32" in ptx
    assert ("match.any.sync" in ptx) == ("neighbor_search" not in params or params["neighbor_search"] == "scan")
