"""The environments' CUDA kernels compile for the GPU without one (PTX for sm_90).

CI has no GPU: the CPU backend and the simulator run the phases, but not Numba's CUDA
typing and lowering, where some errors only show (say, a device function returning an
array it was not given). Compiling each kernel to PTX catches those here. Needs
numba-cuda's compiler libraries (``pip install numba-cuda[cu13]``), else skipped.
"""
import re

import pytest

from test_atomics import compile_ptx, needs_nvvm
from torchrl_warp.envs import AcrobotEnv, CartPoleEnv, MountainCarContinuousEnv, MountainCarEnv, MPEEnv, \
    PendulumEnv, SimpleSpreadEnv, TagEnv, TagGridWorldEnv

TAG = dict(num_taggers=2, num_runners=6)


@needs_nvvm
@pytest.mark.parametrize("make", [
    lambda: CartPoleEnv(num_envs=2),
    lambda: TagEnv(num_envs=2, num_other_agents_observed=2, neighbor_search="scan", **TAG),
    lambda: TagEnv(num_envs=2, num_other_agents_observed=3, neighbor_search="grid", egocentric_observation=True,
                   **TAG),
    lambda: TagEnv(num_envs=2, use_full_observation=True, **TAG),
    lambda: SimpleSpreadEnv(num_envs=2, substeps=2),
    lambda: SimpleSpreadEnv(num_envs=2, continuous_actions=False),
    lambda: MPEEnv("simple_tag", num_envs=2, max_steps=5, respawn_at_catch=True),
    lambda: MPEEnv("simple_world_comm", num_envs=2, max_steps=5, continuous_actions=False),
    lambda: MPEEnv("simple_speaker_listener", num_envs=2, max_steps=5, continuous_actions=False,
                   categorical_actions=False),
    lambda: MPEEnv("simple_crypto", num_envs=2, max_steps=5, continuous_actions=False, multidiscrete_actions=True),
    lambda: MPEEnv("simple_push", num_envs=2, max_steps=5),
    lambda: AcrobotEnv(num_envs=2, book_or_nips="nips", torque_noise_max=0.1),
    lambda: MountainCarEnv(num_envs=2),
    lambda: MountainCarContinuousEnv(num_envs=2),
    lambda: PendulumEnv(num_envs=2),
    lambda: TagGridWorldEnv(num_envs=2, num_taggers=3),
    lambda: TagGridWorldEnv(num_envs=2, num_taggers=3, use_full_observation=False, starting_locations="random"),
], ids=["cartpole", "tag-scan", "tag-grid-egocentric", "tag-full", "simple-spread", "simple-spread-discrete",
        "simple-tag", "simple-world-comm-discrete", "speaker-listener-one-hot", "crypto-multidiscrete", "simple-push",
        "acrobot-nips", "mountain-car", "mountain-car-continuous", "pendulum", "tag-gridworld-full",
        "tag-gridworld-partial"])
def test_step_and_reset_kernels_compile_to_ptx(make, monkeypatch):
    env = make()
    for kind, spec in env._kernels.items():
        ptx = compile_ptx(spec, env._args[kind], monkeypatch)
        assert f"warp_{kind}_cuda" in ptx
        assert spec.rebased and "output_shift" in spec.arguments  # the outputs follow the current buffer
        if kind == "reset":  # the driver clears the done flags through the moved arrays: stores kept
            assert re.search(r"st(\.global)?\.u8", ptx)


@needs_nvvm
@pytest.mark.parametrize("search", ["scan", "grid"])
def test_tag_distances_are_float32_products_never_fused(search, monkeypatch):
    """The searches' squared distances: float32 products rounded on their own (``mul.rn``,
    which ptxas never fuses into an fma), so the GPU ranks neighbours as the CPU does."""
    env = TagEnv(num_envs=2, num_other_agents_observed=2, neighbor_search=search, **TAG)
    ptx = compile_ptx(env._kernels["step"], env._args["step"], monkeypatch)
    assert "mul.rn.f32" in ptx


@needs_nvvm
def test_driver_indices_need_no_division_per_phase(monkeypatch):
    """The CUDA driver strides over agents without ``range()``'s run-time division (a 64-bit
    division is a subroutine on the GPU): CartPole's kernels divide nowhere."""
    env = CartPoleEnv(num_envs=2)
    for kind, spec in env._kernels.items():
        ptx = compile_ptx(spec, env._args[kind], monkeypatch)
        assert not re.search(r"\b(div|rem)\.s64\b", ptx), kind
