"""torchrl_warp.batch_rows: the rows a GraphedCollector saves before a reset and copies into its
batches, against a loop over envs and steps (in the simulator: the CUDA kernels themselves)."""
import pytest
import torch

from all_envs import make
from torchrl_warp.batch_rows import batch_rows, save_ended_rows


def _backend():
    """The backend this process's envs run (the CPU's torch ops, or the simulator's kernels)."""
    return make("cartpole")._backend


def _case(steps=3, envs=5, width=7, dtype=torch.int32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        slots = torch.rand(steps + 1, envs, width, generator=g) > 0.5
        terminal = torch.rand(steps, envs, width, generator=g) > 0.5
    else:
        slots = torch.randint(-2**31, 2**31 - 1, (steps + 1, envs, width), generator=g, dtype=dtype)
        terminal = torch.randint(-2**31, 2**31 - 1, (steps, envs, width), generator=g, dtype=dtype)
    ended = torch.rand(steps, envs, generator=g) > 0.6
    return slots, terminal, ended


@pytest.mark.sim
@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_batch_rows_are_the_slots_env_major_with_the_ended_rows_from_terminal(dtype):
    slots, terminal, ended = _case(dtype=dtype, width=40)  # wider than one simulated block
    steps, envs, width = terminal.shape
    root = torch.empty(envs, steps, width, dtype=dtype)
    nxt = torch.empty(envs, steps, width, dtype=dtype)
    batch_rows(slots, terminal, ended, root, nxt, _backend())
    assert ended.any() and not ended.all()
    for e in range(envs):
        for t in range(steps):
            assert torch.equal(root[e, t], slots[t, e])
            assert torch.equal(nxt[e, t], terminal[t, e] if ended[t, e] else slots[t + 1, e]), (e, t)


@pytest.mark.sim
def test_save_ended_rows_writes_only_the_ended_envs_rows():
    slots, terminal, ended = _case()
    slot, before, which = slots[1], terminal[0].clone(), ended[0]
    out = before.clone()
    save_ended_rows(slot, out, which, _backend())
    assert which.any() and not which.all()
    for e in range(slot.shape[0]):
        assert torch.equal(out[e], slot[e] if which[e] else before[e]), e
