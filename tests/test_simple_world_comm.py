"""SimpleWorldCommEnv against VMAS 1.5.2's own simple_world_comm: transitions, rewards, resets."""
import math

import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_parity import Errors, load_vmas, vmas_state
from torchrl_warp.envs.simple_world_comm import SimpleWorldCommEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5
MAX_ERR = Errors()  # largest error seen per quantity (for inspection)
close = MAX_ERR.close
SEEN = {}  # events counted over the parity runs (for inspection)
DEFAULTS = dict(num_good_agents=2, num_adversaries=4, num_landmarks=1, num_food=2, num_forests=2)


class Sizes:
    """Entity indices of a configuration: agents (leader, adversaries, good), then obstacles,
    food, forests."""

    def __init__(self, num_good_agents, num_adversaries, num_landmarks, num_food, num_forests):
        self.a, self.g = num_adversaries, num_good_agents
        self.n = self.a + self.g
        self.obstacles = list(range(self.n, self.n + num_landmarks))
        self.food = list(range(self.n + num_landmarks, self.n + num_landmarks + num_food))
        self.forests = list(range(self.food[-1] + 1, self.food[-1] + 1 + num_forests))
        self.entities = self.forests[-1] + 1


def near(gen, pos, envs, i, j, r_max):
    """Entity ``i`` within ``[0.005, r_max)`` of entity ``j`` in the given envs."""
    r = 0.005 + (r_max - 0.005) * torch.rand(len(envs), generator=gen)
    phi = torch.rand(len(envs), generator=gen) * 2 * math.pi
    pos[envs, i] = pos[envs, j] + torch.stack([r * phi.cos(), r * phi.sin()], -1)


def random_world(gen, s: Sizes, num_envs):
    """Agents in [-1, 1]^2 at speeds up to ~2 (above the top speeds), landmarks in [-0.9, 0.9]^2;
    envs where an adversary touches a good agent, an agent presses on an obstacle, a good agent
    sits on food, agents hide in forests, and agents lie on the world's bounds moving out."""
    pos = torch.rand(num_envs, s.entities, 2, generator=gen) * 2 - 1
    pos[:, s.n:] *= 0.9
    vel = torch.rand(num_envs, s.entities, 2, generator=gen) * 3 - 1.5
    vel[:, s.n:] = 0  # landmarks never move
    envs = torch.arange(num_envs)
    good, last_adv = s.a, max(s.a - 1, 0)  # the first good agent; the last adversary
    near(gen, pos, envs[0::2], last_adv, good, 0.13)  # adversary radius 0.075 + good 0.045
    if s.a > 1:
        near(gen, pos, envs[0::4], 1, good, 0.13)
    if s.obstacles:
        near(gen, pos, envs[1::3], 0, s.obstacles[0], 0.28)  # leader against an obstacle (0.075 + 0.2)
        near(gen, pos, envs[2::3], s.n - 1, s.obstacles[-1], 0.25)
    near(gen, pos, envs[1::2], s.n - 1, s.food[0], 0.08)  # good agent on food (0.045 + 0.03)
    near(gen, pos, envs[0::3], 0, s.forests[0], 0.3)  # in forests (radius 0.3)
    near(gen, pos, envs[0::3], s.n - 1, s.forests[-1], 0.3)
    for k, agent in enumerate(range(s.n)):  # pressed on a bound, moving out
        idx, d, side = envs[k % 5::5], k % 2, 1.0 if k % 3 else -1.0
        pos[idx, agent, d] = side
        vel[idx, agent, d] = side * (0.2 + torch.rand(len(idx), generator=gen))
    return pos, vel


def random_actions(gen, s: Sizes, continuous, num_envs, spread=1.0):
    """Per agent: a force in [-spread, spread]^2 (the leader adds a message in [0, 1]), or VMAS's
    flat index (36 for the leader: 9 moves x 4 messages, 9 for the others)."""
    acts = []
    for i in range(s.n):
        if continuous:
            a = (torch.rand(num_envs, 2, generator=gen) * 2 - 1) * spread
            if i == 0:
                a = torch.cat([a, torch.rand(num_envs, 4, generator=gen)], -1)
        else:
            a = torch.randint(0, 36 if i == 0 else 9, (num_envs,), generator=gen)
        acts.append(a)
    return acts


def group_actions(env, acts):
    """Our action TensorDict entries from per-agent actions."""
    out, start = {}, 0
    for group, names in env.group_map.items():
        out[group] = torch.stack(acts[start:start + len(names)], 1)
        start += len(names)
    return out


def run_parity(continuous, num_envs=E, steps=STEPS, check_actions=True, actions_fn=None, vmas_kwargs=None,
               **sizes):
    sizes = {**DEFAULTS, **sizes}
    s = Sizes(**sizes)
    venv = vmas.make_env("simple_world_comm", num_envs=num_envs, device="cpu", continuous_actions=continuous,
                         seed=0, max_steps=steps, **(vmas_kwargs or {}), **sizes)
    venv.reset()
    env = SimpleWorldCommEnv(num_envs=num_envs, continuous_actions=continuous, check_actions=check_actions,
                             seed=0, max_steps=steps, **sizes)
    assert env.agent_names == [a.name for a in venv.world.agents]
    td = env.reset()
    gen = torch.Generator().manual_seed(11 if continuous else 12)
    seen = dict(transitions=0, caught=0, fed=0, obstacle=0, bound=0, forest=0, fast=0)
    for step in range(steps):
        pos, vel = random_world(gen, s, num_envs)
        if step % 2 == 1:  # run a trajectory on from the previous step's state, half the time
            pos, vel = vmas_state(venv)
        load_vmas(venv, pos, vel)
        env.state["pos"].copy_(pos)
        env.state["vel"].copy_(vel)
        seen["fast"] += int((vel[:, :s.n].norm(dim=-1) > 1.3).sum())
        if actions_fn is not None:
            ours_a, theirs_a = actions_fn(gen, s, num_envs)
        else:
            ours_a = theirs_a = random_actions(gen, s, continuous, num_envs)
        obs, rews, dones, _ = venv.step([a.clone() for a in theirs_a])
        for group, a in group_actions(env, ours_a).items():
            td[group, "action"] = a
        out = env.step(td)["next"]
        vpos, vvel = vmas_state(venv)
        close(env.state["pos"], vpos, f"pos, step {step}")
        close(env.state["vel"], vvel, f"vel, step {step}")
        close(env.state["comm"][:, 0], venv.world.agents[0].state.c, f"comm, step {step}")
        assert (env.state["comm"][:, 1:] == 0).all()  # the silent agents' rows
        start = 0
        for group, names in env.group_map.items():
            members = slice(start, start + len(names))
            close(out[group, "observation"], torch.stack(obs[members], 1), f"observation, step {step}, {group}")
            close(out[group, "reward"].squeeze(-1), torch.stack(rews[members], 1), f"reward, step {step}, {group}")
            start += len(names)
        assert (out["done"].squeeze(-1) == dones).all() and (out["terminated"].squeeze(-1) == dones).all()
        assert dones.all() == (step == steps - 1)
        seen["transitions"] += num_envs
        d = (vpos[:, :, None] - vpos[:, None]).norm(dim=-1)
        radius = torch.tensor([0.075] * s.a + [0.045] * s.g)
        seen["caught"] += int((d[:, :s.a, s.a:s.n] < radius[:s.a, None] + radius[None, s.a:]).sum())
        seen["fed"] += int((d[:, s.a:s.n][:, :, s.food] < 0.075).sum())
        if s.obstacles:
            seen["obstacle"] += int((d[:, :s.n][:, :, s.obstacles] < radius[:, None] + 0.2).sum())
        seen["forest"] += int((d[:, :s.n][:, :, s.forests] < radius[:, None] + 0.3).sum())
        seen["bound"] += int((vpos[:, :s.n].abs() == 1.0).sum())
    for k, v in seen.items():
        SEEN[k] = SEEN.get(k, 0) + v
    if not SIM:  # every rule was exercised, not only the physics
        for what in ("fed", "bound", "forest", "fast") + (("obstacle",) if s.obstacles else ()) + (
                ("caught",) if s.a else ()):
            assert seen[what] > 0, what
    return seen["transitions"]


@pytest.mark.sim
def test_continuous_matches_vmas():
    assert run_parity(True) >= (1000 if not SIM else 1)


@pytest.mark.sim
def test_discrete_matches_vmas():
    assert run_parity(False) >= (1000 if not SIM else 1)


@pytest.mark.parametrize("sizes", [
    dict(num_good_agents=3, num_adversaries=2, num_landmarks=2, num_food=3, num_forests=1),
    dict(num_good_agents=1, num_adversaries=1, num_landmarks=0, num_food=1, num_forests=3),
    dict(num_good_agents=2, num_adversaries=0),  # VMAS: agent 0 is a good agent, still the talking leader
])
def test_other_sizes_match_vmas(sizes):
    run_parity(True, num_envs=60, steps=3, **sizes)


def test_out_of_range_actions_clamped_like_vmas_clamp_actions():
    """check_actions=False: ours clamps forces to [-1, 1] and messages to [0, 1];
    VMAS with clamp_actions=True does too."""
    def actions(gen, s, num_envs):
        ours = [a * 3 - (1.0 if i == 0 else 0.0) for i, a in enumerate(random_actions(gen, s, True, num_envs))]
        theirs = [a.clone() for a in ours]
        theirs[0][:, :2] = theirs[0][:, :2].clamp(-1, 1)
        theirs[0][:, 2:] = theirs[0][:, 2:].clamp(0, 1)
        for a in theirs[1:]:
            a.clamp_(-1, 1)
        return ours, theirs

    run_parity(True, num_envs=60, steps=3, check_actions=False, actions_fn=actions,
               vmas_kwargs={"clamp_actions": True})


def test_check_actions_refuses_out_of_range_message():
    env = SimpleWorldCommEnv(num_envs=2)
    td = env.rollout(1)[..., 0]
    td["lead_adversary", "action"] = torch.tensor([0.0, 0.0, 0.5, 1.5, 0.0, 0.0]).expand(2, 1, 6).clone()
    with pytest.raises(Exception):
        env.step(td)


def test_bound_and_top_speed_by_hand():
    """A good agent at x = 0.99 pushed outward at full force stops on the bound x = 1; its speed
    is capped at 1.3 (an adversary's at 1.0)."""
    env = SimpleWorldCommEnv(num_envs=2, num_adversaries=1, num_good_agents=1, num_landmarks=0)  # 1 env: recompiles
    td = env.reset()
    env.state["pos"][0, :2] = torch.tensor([[-0.5, 0.0], [0.99, 0.0]])
    env.state["vel"][0, :2] = torch.tensor([[0.0, -5.0], [5.0, 0.0]])
    td["lead_adversary", "action"] = torch.zeros(2, 1, 6)
    td["agent", "action"] = torch.tensor([[1.0, 0.0]]).expand(2, 1, 2).clone()
    env.step(td)
    close(env.state["pos"][0, 1], torch.tensor([1.0, 0.0]), "pos")
    close(env.state["vel"][0, :2], torch.tensor([[0.0, -1.0], [1.3, 0.0]]), "vel")


@pytest.mark.sim
def test_specs_groups_and_truncation():
    env = SimpleWorldCommEnv(num_envs=2, max_steps=3, seed=0, terminated_truncated=True)
    check_env_specs(env)
    assert env.group_map == {"lead_adversary": ["lead_adversary_0"],
                             "adversary": ["adversary_1", "adversary_2", "adversary_3"],
                             "agent": ["agent_0", "agent_1"]}
    shapes = {g: env.observation_spec[g, "observation"].shape for g in env.group_map}
    assert shapes == {"lead_adversary": (2, 1, 60), "adversary": (2, 3, 60), "agent": (2, 2, 56)}
    assert env.full_action_spec["lead_adversary", "action"].shape == (2, 1, 6)
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "truncated"][:, 2].all() and not td["next", "truncated"][:, :2].any()
    assert not td["next", "terminated"].any()
    r = td["next", "adversary", "reward"]
    assert (r == td["next", "lead_adversary", "reward"]).all()  # the adversaries' reward is shared
    discrete = SimpleWorldCommEnv(num_envs=2, continuous_actions=False)
    assert discrete.full_action_spec["lead_adversary", "action"].space.n == 36
    assert discrete.full_action_spec["agent", "action"].space.n == 9


def test_reset_distribution_matches_vmas():
    """Ours and VMAS's resets on many envs: agents uniform in [-1, 1]^2, landmarks in
    [-0.9, 0.9]^2, at rest, silent; our first observation is VMAS's of our state."""
    n_envs = 10000
    env = SimpleWorldCommEnv(num_envs=n_envs, seed=3)
    td = env.reset()
    venv = vmas.make_env("simple_world_comm", num_envs=n_envs, device="cpu", seed=3)
    venv.reset()
    theirs, _ = vmas_state(venv)
    ours = env.state["pos"]
    assert (env.state["vel"] == 0).all() and (env.state["comm"] == 0).all()
    for sl, half in ((slice(0, 6), 1.0), (slice(6, None), 0.9)):  # agents, landmarks
        a, b = ours[:, sl].reshape(-1, 2), theirs[:, sl].reshape(-1, 2)
        assert (a >= -half).all() and (a < half).all()
        assert (a.min(0).values + half).abs().max() < 1e-3 and (a.max(0).values - half).abs().max() < 1e-3
        assert (a.mean(0) - b.mean(0)).abs().max() < 0.015
        assert (a.std(0) - b.std(0)).abs().max() < 0.01
        assert (a.std(0) - half / 3 ** 0.5).abs().max() < 0.01
    # every entity placed independently: no correlation between any two coordinates
    flat = ours.reshape(n_envs, -1).T
    corr = torch.corrcoef(flat) - torch.eye(flat.shape[0])
    assert corr.abs().max() < 0.05
    # the reset's observation is VMAS's observation of the same state
    some = 50
    small = vmas.make_env("simple_world_comm", num_envs=some, device="cpu", seed=0)
    small.reset()
    load_vmas(small, ours[:some], env.state["vel"][:some])
    theirs_obs = [small.scenario.observation(a) for a in small.world.agents]
    start = 0
    for group, names in env.group_map.items():
        close(td[group, "observation"][:some], torch.stack(theirs_obs[start:start + len(names)], 1),
              f"reset observation, {group}")
        start += len(names)
