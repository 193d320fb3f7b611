"""SimplePushEnv against VMAS 1.5.2's own simple_push: transitions (with contacts), rewards, resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_goal_parity import E, STEPS, reset_statistics, run_parity
from mpe_parity import Errors
from torchrl_warp.envs import MPEEnv
from torchrl_warp.envs.simple_push import SimplePushEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

MAX_ERR = Errors()  # largest error seen per quantity (for inspection)


def touching(gen, pos):
    """In every other env the good agent overlaps the adversary (radii sum 0.1)."""
    idx = torch.arange(0, len(pos), 2)
    r = 0.005 + 0.09 * torch.rand(len(idx), generator=gen)
    phi = torch.rand(len(idx), generator=gen) * 6.283
    pos[idx, 1] = pos[idx, 0] + torch.stack([r * phi.cos(), r * phi.sin()], -1)


def contacts(pos):
    return int(((pos[:, 0] - pos[:, 1]).norm(dim=-1) < 0.1).sum())


def parity(continuous):
    venv = vmas.make_env("simple_push", num_envs=E, device="cpu", continuous_actions=continuous, seed=0)
    env = SimplePushEnv(num_envs=E, continuous_actions=continuous, seed=0)
    transitions, touched = run_parity(venv, env, continuous, MAX_ERR, goals=True, perturb=touching, count=contacts)
    assert touched >= (E // 2) * ((STEPS + 1) // 2)  # in every fresh state (and some steps on from them)
    return transitions


@pytest.mark.sim
def test_continuous_matches_vmas():
    assert parity(True) >= (1000 if not SIM else 1)


@pytest.mark.sim
def test_discrete_matches_vmas():
    assert parity(False) >= (1000 if not SIM else 1)


def test_push_and_rewards_by_hand():
    """Agents 0.05 apart at rest (radii sum 0.1), no action: each gets
    100 * softplus(0.05 / 1e-3) * 1e-3 = 5 along the line, |v| = 0.5, moves 0.05 away.
    Goal landmark 1 at (0, 1): the good agent (then at (0.1, 0)) gets -|(0.1, -1)|, the
    adversary (then at (-0.05, 0)) that distance minus its own."""
    env = SimplePushEnv(num_envs=2)
    td = env.reset()
    env.state["pos"][:] = torch.tensor([[0.0, 0.0], [0.05, 0.0], [1.0, 0.0], [0.0, 1.0]])
    env.state["vel"].zero_()
    env.state["goal"].fill_(1)
    td["adversary", "action"] = torch.zeros(2, 1, 2)
    td["agent", "action"] = torch.zeros(2, 1, 2)
    out = env.step(td)["next"]
    assert env.state["vel"][0, :2].flatten().tolist() == pytest.approx([-0.5, 0, 0.5, 0], abs=1e-5)
    assert env.state["pos"][0, :2].flatten().tolist() == pytest.approx([-0.05, 0, 0.1, 0], abs=1e-5)
    good, adv = (0.1 ** 2 + 1) ** 0.5, (0.05 ** 2 + 1) ** 0.5
    assert out["agent", "reward"][0].item() == pytest.approx(-good, abs=1e-5)
    assert out["adversary", "reward"][0].item() == pytest.approx(good - adv, abs=1e-5)
    o = out["agent", "observation"][0, 0].tolist()
    assert o[2:7] == pytest.approx([-0.1, 1.0, 0.25, 0.25, 0.75], abs=1e-5)  # goal - own, own colour
    assert o[11:17] == pytest.approx([0.1, 0.9, 0.1, 0.1, 0.1, 0.9], abs=1e-6)  # the landmarks' colours
    assert o[17:] == pytest.approx([-0.15, 0.0], abs=1e-5)  # the adversary - own


@pytest.mark.sim
def test_specs_and_mpeenv():
    env = SimplePushEnv(num_envs=2, max_steps=3, seed=0, continuous_actions=False)
    check_env_specs(env)
    assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0"]}
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    assert (td["next", "adversary", "observation"].shape, td["next", "agent", "observation"].shape) == \
        ((2, 4, 1, 8), (2, 4, 1, 19))
    assert isinstance(MPEEnv("simple_push", num_envs=2), SimplePushEnv)


def test_reset_distribution_is_vmas():
    n = 20000
    env = SimplePushEnv(num_envs=n, seed=3)
    obs = env.reset()["agent", "observation"]
    venv = vmas.make_env("simple_push", num_envs=n, device="cpu", seed=3)
    venv.reset()
    theirs = torch.stack([e.state.pos for e in venv.world.agents + venv.world.landmarks], 1)
    reset_statistics(env.state["pos"], theirs, 2)
    assert (env.state["vel"] == 0).all()
    goals = env.state["goal"].long()
    assert ((torch.bincount(goals, minlength=2) / n - 0.5).abs() < 0.02).all()
    small = vmas.make_env("simple_push", num_envs=1, device="cpu", seed=3)
    counts = torch.zeros(2)
    for _ in range(400):
        small.reset()
        counts[small.world.landmarks.index(small.world.agents[0].goal)] += 1
    assert ((counts / 400 - 0.5).abs() < 0.1).all()
    # the good agent's own colour tells its goal, as VMAS's does
    assert torch.equal(obs[:, 0, 5:7].argmax(-1), goals)
    p = env.state["pos"]
    assert torch.allclose(obs[:, 0, 2:4], p[torch.arange(n), 2 + goals] - p[:, 1], atol=1e-6)


def test_render_colours_the_good_agent_by_its_goal():
    env = SimplePushEnv(num_envs=2, seed=0)
    env.reset()
    env.state["pos"][1] = torch.tensor([[-0.5, -0.5], [0.5, 0.5], [-0.5, 0.5], [0.5, -0.5]])
    for goal, colour in ((0, (64, 191, 64)), (1, (64, 64, 191))):
        env.state["goal"][1] = goal
        frame = env.render(env_index=1, resolution=200)
        assert tuple(frame[50, 150]) == colour  # the good agent at (0.5, 0.5)
    assert tuple(frame[150, 50]) == (191, 64, 64)  # the adversary, red
    assert tuple(frame[50, 50]) == (26, 230, 26)  # landmark 0
