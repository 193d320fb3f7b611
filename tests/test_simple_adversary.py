"""SimpleAdversaryEnv against VMAS 1.5.2's own simple_adversary: transitions, rewards, resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_goal_parity import E, reset_statistics, run_parity
from mpe_parity import Errors
from torchrl_warp.envs import MPEEnv
from torchrl_warp.envs.simple_adversary import SimpleAdversaryEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

MAX_ERR = Errors()  # largest error seen per quantity (for inspection)


def parity(continuous, **kwargs):
    venv = vmas.make_env("simple_adversary", num_envs=E, device="cpu", continuous_actions=continuous, seed=0,
                         **kwargs)
    env = SimpleAdversaryEnv(num_envs=E, continuous_actions=continuous, seed=0, **kwargs)
    transitions, _ = run_parity(venv, env, continuous, MAX_ERR, goals=True)
    return transitions


@pytest.mark.sim
def test_continuous_matches_vmas():
    """VMAS's default: 1 adversary, 2 good agents, 2 landmarks."""
    assert parity(True) >= (1000 if not SIM else 1)


@pytest.mark.sim
def test_discrete_matches_vmas():
    """2 adversaries (their distances sum in the good agents' reward), 2 good agents, 3 landmarks."""
    assert parity(False, n_agents=4, n_adversaries=2) >= (1000 if not SIM else 1)


def test_rewards_by_hand():
    """Adversary at (0, 0), good agents at (0, 1) and (3, 4), the goal (landmark 1) at (0, 0.5):
    adversary -0.5; good agents 0.5 - 0.5 = 0."""
    env = SimpleAdversaryEnv(num_envs=2)
    td = env.reset()
    env.state["pos"][:] = torch.tensor([[0.0, 0.0], [0.0, 1.0], [3.0, 4.0], [2.0, 2.0], [0.0, 0.5]])
    env.state["vel"].zero_()
    env.state["goal"].fill_(1)
    td["adversary", "action"] = torch.zeros(2, 1, 2)
    td["agent", "action"] = torch.zeros(2, 2, 2)
    out = env.step(td)["next"]
    assert out["adversary", "reward"][0].flatten().tolist() == pytest.approx([-0.5], abs=1e-6)
    assert out["agent", "reward"][0].flatten().tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    # good agent 0: goal - own, landmarks - own, adversary - own, agent 1 - own
    assert out["agent", "observation"][0, 0].tolist() == pytest.approx(
        [0.0, -0.5, 2.0, 1.0, 0.0, -0.5, 0.0, -1.0, 3.0, 3.0], abs=1e-6)
    assert out["adversary", "observation"][0, 0].tolist() == pytest.approx(
        [2.0, 2.0, 0.0, 0.5, 0.0, 1.0, 3.0, 4.0], abs=1e-6)


def test_n_adversaries_must_leave_a_good_agent():
    with pytest.raises(ValueError, match="n_adversaries"):
        SimpleAdversaryEnv(num_envs=2, n_agents=2, n_adversaries=2)


@pytest.mark.sim
def test_specs_and_mpeenv():
    env = SimpleAdversaryEnv(num_envs=2, max_steps=3, seed=0, terminated_truncated=True)
    check_env_specs(env)
    assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "truncated"][:, 2].all() and not td["next", "truncated"][:, :2].any()
    r = td["next", "agent", "reward"]
    assert (r == r[:, :, :1]).all()  # the good agents' reward is shared
    env = MPEEnv("simple_adversary", num_envs=2, n_agents=4, n_adversaries=2)
    assert isinstance(env, SimpleAdversaryEnv) and env.group_map["adversary"] == ["adversary_0", "adversary_1"]
    frame = env.render()
    assert frame.shape == (400, 400, 3)


def test_reset_distribution_is_vmas():
    n = 20000
    env = SimpleAdversaryEnv(num_envs=n, seed=3)
    obs = env.reset()["agent", "observation"]
    venv = vmas.make_env("simple_adversary", num_envs=n, device="cpu", seed=3)
    venv.reset()
    theirs = torch.stack([e.state.pos for e in venv.world.agents + venv.world.landmarks], 1)
    reset_statistics(env.state["pos"], theirs, 3)
    assert (env.state["vel"] == 0).all()
    # the goal: uniform over the 2 landmarks, per env here; once per full reset for the batch in VMAS
    ours = torch.bincount(env.state["goal"].long(), minlength=2) / n
    small = vmas.make_env("simple_adversary", num_envs=1, device="cpu", seed=3)
    counts = torch.zeros(2)
    for _ in range(400):
        small.reset()
        counts[small.world.landmarks.index(small.world.agents[0].goal)] += 1
    assert (ours - 0.5).abs().max() < 0.02 and (counts / 400 - 0.5).abs().max() < 0.1
    goals = env.state["goal"].long()
    assert not torch.equal(goals, goals.roll(1))  # each env draws its own
    # the good agents' first observation starts with the goal's position minus their own
    p = env.state["pos"]
    goal_pos = p[torch.arange(n), 3 + goals]
    assert torch.allclose(obs[:, 0, :2], goal_pos - p[:, 1], atol=1e-6)
    # a new episode draws a new goal
    before = env.state["goal"].clone()
    env.reset()
    assert (env.state["goal"] != before).float().mean() > 0.4


def test_render_colours_the_goal_green():
    env = SimpleAdversaryEnv(num_envs=2, seed=0)
    env.reset()
    env.state["pos"][0] = torch.tensor([[-0.8, -0.8], [-0.8, 0.8], [0.8, -0.8], [0.5, 0.5], [0.0, 0.0]])
    env.state["goal"][0] = 1
    frame = env.render(resolution=200).astype(int)
    at = lambda x, y: tuple(frame[int((1 - y) / 2 * 200), int((x + 1) / 2 * 200)])  # noqa: E731
    assert at(0.0, 0.0) == (64, 191, 64) and at(0.5, 0.5) == (38, 38, 38)  # goal green, the other black
    assert env.landmarks[1].color != (0.25, 0.75, 0.25)  # restored

