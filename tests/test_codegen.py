"""Generated drivers: fused phases (a tuple runs without a barrier), and ``scratch_row``."""
import numba
import numpy as np
import pytest
import torch

from conftest import SIM
from test_atomics import compile_ptx, needs_nvvm
from torchrl_warp.codegen import KernelSpec, phase_functions
from torchrl_warp.scratch import LOCAL_LIMIT, scratch_row


@numba.njit
def double(env, agent, value):
    value[env, agent] *= 2


@numba.njit
def add_one(env, agent, value):
    value[env, agent] += 1


@numba.njit
def prefix_sums(env, agent, value, scratch, total):
    """Works in a scratch row, keeps only the last sum: the row is not the result."""
    buf = scratch_row(scratch, env, agent)
    acc = 0.0
    for j in range(scratch.shape[2]):
        acc += value[env, agent] * (j + 1)
        buf[j] = acc
    total[env, agent] = buf[scratch.shape[2] - 1]


def test_a_tuple_is_one_phase_without_a_barrier_between_its_functions():
    fused = KernelSpec("step", (double, (add_one, double)))
    apart = KernelSpec("step", (double, add_one, double))
    assert phase_functions(fused.phases) == fused.functions == (double, add_one, double)
    assert fused.arguments == apart.arguments
    assert fused.cuda_source().count("cuda.syncthreads()") == 2
    assert apart.cuda_source().count("cuda.syncthreads()") == 3
    # every agent runs the tuple's functions back to back, in order: (2v + 1) * 2
    assert "phase_1(env, agent, value)\n            phase_2(env, agent, value)" in fused.cuda_source()
    assert "phase_1(env, agent, value)\n                phase_2(env, agent, value)" in fused.cpu_source()
    with pytest.raises(ValueError, match="no empty tuple"):
        KernelSpec("step", (double, ()))


@pytest.mark.skipif(SIM, reason="runs the CPU driver")
def test_fused_phases_run_in_order_on_the_cpu():
    from torchrl_warp.backends import CpuBackend

    backend = CpuBackend(torch.device("cpu"))
    kernel = backend.compile(KernelSpec("step", (double, (add_one, double))))
    value = np.arange(6, dtype=np.float64).reshape(2, 3)
    flags = [np.ones(2, bool)] + [np.uint64(0), np.zeros(2, np.int32), np.zeros(2, np.int32)] + [np.zeros(2, bool)] * 3
    kernel(2, 3, *flags, value)
    np.testing.assert_array_equal(value, (2 * np.arange(6).reshape(2, 3) + 1) * 2)


def test_scratch_row_on_the_cpu_is_the_row_itself():
    value, total = np.array([[1.0, 2.0]]), np.zeros((1, 2))
    scratch = np.zeros((1, 2, 3))
    for agent in range(2):
        prefix_sums(0, agent, value, scratch, total)
    assert total.tolist() == [[6.0, 12.0]]
    assert scratch[0, 1].tolist() == [2.0, 6.0, 12.0]  # a view: the CPU works in the row


@needs_nvvm
def test_scratch_row_on_the_gpu_is_a_thread_private_array(monkeypatch):
    n = 3
    spec = KernelSpec("step", (prefix_sums,))
    values = dict(seed=np.uint64(0), step_count=np.zeros(2, np.int32), episode=np.zeros(2, np.int32),
                  value=np.zeros((2, 4)), scratch=np.zeros((2, 4, n)), total=np.zeros((2, 4)))
    args = tuple(values.get(name, np.zeros(2, bool)) for name in spec.arguments)
    ptx = compile_ptx(spec, args, monkeypatch)
    # the local array is allocated whatever n is (n is known at run time only); the
    # kernel works in it when n <= LOCAL_LIMIT, else in the global row
    assert f".local .align 16 .b8 \t__local_depot0[{8 * LOCAL_LIMIT}]" in ptx


@pytest.mark.skipif(SIM, reason="the simulator replaces numba.cuda")
def test_layout_register_cap_reaches_the_cuda_compiler(monkeypatch):
    """``Layout.max_registers`` (Tag's grid: ``GRID_MAX_REGISTERS``) goes to ``cuda.jit``;
    kernels without one compile uncapped."""
    import numba.cuda

    from torchrl_warp.backends import _CudaLayout
    from torchrl_warp.envs import TagEnv
    from torchrl_warp.envs.tag import GRID_MAX_REGISTERS

    calls = []
    monkeypatch.setattr(numba.cuda, "jit", lambda fn, **options: calls.append(options) or fn)
    backend = _CudaLayout(torch.device("cpu"))
    for search, cap in (("grid", GRID_MAX_REGISTERS), ("scan", None)):
        env = TagEnv(num_envs=2, num_taggers=2, num_runners=6, num_other_agents_observed=2, neighbor_search=search)
        backend._compile(env._kernels["step"])
        options = calls.pop()
        assert options.pop("cache") is True, search  # through the kernel cache (tests/test_kernel_cache.py)
        assert options == ({} if cap is None else {"max_registers": cap}), search
