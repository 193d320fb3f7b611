"""A step split into one kernel per phase (``split_step``) steps as the whole step's kernel does.

In the simulator both run the CUDA drivers; on the CPU a step is one loop whatever is asked
(nothing to split), and the parts are checked as specs and as PTX.
"""
import pytest
import torch

from test_atomics import compile_ptx, needs_nvvm
from torchrl_warp.backends import KernelSequence
from torchrl_warp.codegen import KernelSpec
from torchrl_warp.envs import MPEEnv, TagEnv

CASES = {
    "simple_tag": lambda **kw: MPEEnv("simple_tag", num_envs=3, max_steps=4, respawn_at_catch=True, **kw),
    "simple_spread_discrete": lambda **kw: MPEEnv("simple_spread", num_envs=3, max_steps=4,
                                                  continuous_actions=False, **kw),
    "tag": lambda **kw: TagEnv(num_envs=3, num_taggers=2, num_runners=5, num_other_agents_observed=2,
                               episode_length=5, **kw),
}


def rollout(env, steps=7):
    """``steps`` of ``step_and_maybe_reset`` with random actions (seeded alike for every env):
    the stacked steps, and the env's state after them."""
    torch.manual_seed(3)
    td = env.reset()
    out = []
    for _ in range(steps):
        data, td = env.step_and_maybe_reset(env.rand_action(td))
        out.append(data.clone())
    return torch.stack(out, 1), env.state.clone()


@pytest.mark.sim
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("how", [True, (2,), (1, 3)], ids=["per-phase", "at-2", "at-1-3"])
def test_a_split_step_steps_as_the_whole_kernel(name, how):
    fused, split = CASES[name](seed=11, split_step=False), CASES[name](seed=11, split_step=how)
    splits = fused._backend.splits
    assert split.split_step == (how if splits else False) and not fused.split_step
    assert isinstance(split._compiled["step"], KernelSequence) == splits
    if splits:
        parts = len(fused._kernels["step"].phases) if how is True else len(how) + 1
        assert len(split._compiled["step"].kernels) == parts
    (a, state_a), (b, state_b) = rollout(fused), rollout(split)
    assert a["next", "done"].any()  # episodes ended (and envs reset) inside the rollout
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key
    for key in state_a.keys(True, True):
        assert torch.equal(state_a[key], state_b[key]), key


def test_the_parts_are_one_kernel_per_phase_and_only_the_first_keeps_the_counters():
    env = CASES["simple_tag"]()
    spec = env._kernels["step"]
    parts = spec.parts()
    assert len(parts) == len(spec.phases)
    assert [p.counters for p in parts] == [True] + [False] * (len(parts) - 1)
    assert "step_count[env] += 1" in parts[0].cuda_source()
    assert all("step_count[env] += 1" not in p.cuda_source() for p in parts[1:])
    assert all(set(p.arguments) <= set(spec.arguments) for p in parts)
    assert "observation" not in parts[1].arguments  # the contact phase asks for what it uses
    with pytest.raises(ValueError, match="only a step kernel"):
        env._kernels["reset"].parts()
    with pytest.raises(TypeError, match="split_step"):
        CASES["tag"](split_step="yes")
    n = len(spec.phases)
    assert [len(p.phases) for p in spec.parts((1, n - 1))] == [1, n - 2, 1]
    for bad in ((0,), (n,), (3, 2), (2, 2), (True,), (2.0,)):
        with pytest.raises(ValueError, match=f"a step of {n} phases splits where a phase begins"):
            spec.parts(bad)
        with pytest.raises(ValueError, match="splits where a phase begins"):  # refused on every backend
            CASES["simple_tag"](split_step=bad)


def test_mpe_steps_with_substeps_split_after_the_physics(monkeypatch):
    """With SPLIT_SUBSTEPS, more than one substep: the physics' phases one kernel, the
    scenario's the next (their registers apart); one substep: one kernel."""
    from torchrl_warp.cuda.mpe import integrate
    from torchrl_warp.envs import mpe

    monkeypatch.setattr(mpe, "SPLIT_SUBSTEPS", False)
    assert CASES["simple_tag"]().layout.split_step is False
    monkeypatch.setattr(mpe, "SPLIT_SUBSTEPS", True)
    tag = CASES["simple_tag"]()
    (start,) = tag.layout.split_step
    assert tag.layout.step[start - 1] is integrate and integrate not in tag.layout.step[start:]
    assert start == 2 * 10  # two phases per substep
    assert CASES["simple_tag"](substeps=1).layout.split_step is False
    assert CASES["simple_spread_discrete"]().layout.split_step is False
    assert tag.split_step == ((start,) if tag._backend.splits else False)


@needs_nvvm
def test_each_part_compiles_to_ptx(monkeypatch):
    env = CASES["simple_tag"]()
    spec, args = env._kernels["step"], dict(zip(env._kernels["step"].arguments, env._args["step"]))
    for part in spec.parts():
        ptx = compile_ptx(part, tuple(args[n] for n in part.arguments), monkeypatch)
        assert "warp_step_cuda" in ptx
    assert isinstance(spec.parts()[0], KernelSpec)


@pytest.mark.sim
def test_the_bench_asks_for_a_split_by_name_or_by_phases():
    import argparse

    from torchrl_warp.bench import _split_choice, main

    assert [_split_choice(v) for v in ("default", "fused", "split", "20", "1,5")] == \
        ["default", "fused", "split", (20,), (1, 5)]
    with pytest.raises(argparse.ArgumentTypeError, match="phase indices such as 20,22; got '2x'"):
        _split_choice("2x")
    rows = main(["--env", "simple_tag", "--num-envs", "2", "--mode", "step", "--steps", "1", "--repeats", "1",
                 "--split-step", "fused", "1,5"])
    splits = rows[0]["split_step"], rows[1]["split_step"]
    assert splits == ((False, (1, 5)) if MPEEnv("simple_tag")._backend.splits else (False, False))
    with pytest.raises(ValueError, match="splits where a phase begins"):
        main(["--env", "simple_tag", "--num-envs", "2", "--mode", "step", "--steps", "1", "--split-step", "99"])
