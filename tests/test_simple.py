"""SimpleEnv against VMAS 1.5.2's own simple: transitions, rewards, resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_goal_parity import E, reset_statistics, run_parity
from mpe_parity import Errors
from torchrl_warp.envs import MPEEnv
from torchrl_warp.envs.simple import SimpleEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

MAX_ERR = Errors()  # largest error seen per quantity (for inspection)


def parity(continuous):
    venv = vmas.make_env("simple", num_envs=E, device="cpu", continuous_actions=continuous, seed=0)
    env = SimpleEnv(num_envs=E, continuous_actions=continuous, seed=0)
    transitions, _ = run_parity(venv, env, continuous, MAX_ERR)
    return transitions


@pytest.mark.sim
def test_continuous_matches_vmas():
    assert parity(True) >= (1000 if not SIM else 1)


@pytest.mark.sim
def test_discrete_matches_vmas():
    assert parity(False) >= (1000 if not SIM else 1)


def test_reward_is_minus_squared_distance():
    env = SimpleEnv(num_envs=1)
    td = env.reset()
    env.state["pos"][0] = torch.tensor([[0.0, 0.0], [0.3, 0.4]])
    env.state["vel"].zero_()
    td["agents", "action"] = torch.zeros(1, 1, 2)
    out = env.step(td)["next"]
    assert out["agents", "reward"].item() == pytest.approx(-0.25, abs=1e-6)
    assert out["agents", "observation"][0, 0].tolist() == pytest.approx([0.0, 0.0, 0.3, 0.4], abs=1e-6)


@pytest.mark.sim
def test_specs_and_mpeenv():
    env = SimpleEnv(num_envs=2, max_steps=3, seed=0)
    check_env_specs(env)
    assert env.group_map == {"agents": ["agent_0"]}
    assert env.observation_spec["agents", "observation"].shape == (2, 1, 4)
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    assert isinstance(MPEEnv("simple", num_envs=2), SimpleEnv)


def test_reset_distribution_is_vmas():
    n = 20000
    env = SimpleEnv(num_envs=n, seed=3)
    obs = env.reset()["agents", "observation"]
    venv = vmas.make_env("simple", num_envs=n, device="cpu", seed=3)
    venv.reset()
    theirs = torch.stack([e.state.pos for e in venv.world.agents + venv.world.landmarks], 1)
    reset_statistics(env.state["pos"], theirs, 1)
    assert (env.state["vel"] == 0).all()
    p = env.state["pos"]
    assert torch.equal(obs[:, 0, :2], torch.zeros(n, 2))  # at rest
    assert torch.allclose(obs[:, 0, 2:], p[:, 1] - p[:, 0], atol=1e-6)
