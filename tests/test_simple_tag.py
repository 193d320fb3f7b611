"""SimpleTagEnv against VMAS 1.5.2's own simple_tag: transitions, rewards, respawns, resets."""
import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_parity import Errors, load_vmas, vmas_state
from test_atomics import compile_ptx, needs_nvvm
from torchrl_warp.cuda.rng import uniform
from torchrl_warp.cuda.simple_tag import tag_respawned
from torchrl_warp.envs.mpe import MPEEnv
from torchrl_warp.envs.simple_tag import SimpleTagEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5
MAX_ERR = Errors()  # largest error seen per quantity (for inspection)
close = MAX_ERR.close
ADV_R, GOOD_R, OBSTACLE_R = 0.075, 0.05, 0.2


def near(gen, centre, lo, hi):
    """Points at a distance in [lo, hi) from ``centre`` ([n, 2]), in random directions."""
    r = lo + (hi - lo) * torch.rand(len(centre), generator=gen)
    phi = torch.rand(len(centre), generator=gen) * 6.283
    return centre + torch.stack([r * phi.cos(), r * phi.sin()], -1)


def random_world(gen, num_envs, a, g, landmarks, bound):
    """Agents in [-1.3 bound, 1.3 bound]^2 clamped to the bounds (about 40% of them pressed
    against a side, some in a corner), landmarks inside, agent velocities in [-1.5, 1.5]^2.
    In every other env a good agent overlaps an adversary (another one in every fourth),
    adversary 0 overlaps another adversary, and in every third an agent overlaps an obstacle;
    one env holds an agent exactly on a corner, moving out."""
    n = a + g
    pos = (torch.rand(num_envs, n + landmarks, 2, generator=gen) * 2.6 - 1.3) * bound
    pos[:, n:] = (torch.rand(num_envs, landmarks, 2, generator=gen) * 2 - 1) * (bound - 0.1)
    vel = torch.rand(num_envs, n + landmarks, 2, generator=gen) * 3 - 1.5
    vel[:, n:] = 0  # landmarks never move
    idx = torch.arange(0, num_envs, 2)
    pos[idx, a] = near(gen, pos[idx, 0], 0.0, 0.14)  # catches (radii sum 0.125)
    if a > 1:
        pos[idx, 1] = near(gen, pos[idx, 0], 0.02, 0.17)  # adversaries pushing each other
    if g > 1:
        idx4 = torch.arange(0, num_envs, 4)
        pos[idx4, a + 1] = near(gen, pos[idx4, a - 1], 0.0, 0.13)
    if landmarks:
        idx3 = torch.arange(0, num_envs, 3)
        who = torch.randint(0, n, (len(idx3),), generator=gen)
        pos[idx3, who] = near(gen, pos[idx3, n], 0.05, 0.29)  # into an obstacle
    pos[:, :n] = pos[:, :n].clamp(-bound, bound)
    pos[1, n - 1] = torch.tensor([bound, -bound])
    vel[1, n - 1] = torch.tensor([1.0, -0.5])
    return pos, vel


def caught(pos, a, g):
    """[E, G]: good agent touches some adversary (VMAS's is_collision, strict)."""
    d = (pos[:, a:a + g, None] - pos[:, None, :a]).norm(dim=-1)
    return (d < ADV_R + GOOD_R).any(-1)


def random_actions(gen, continuous, num_envs, n):
    if continuous:
        a = torch.rand(num_envs, n, 2, generator=gen) * 2 - 1
        full = torch.rand(num_envs, n, generator=gen) < 0.3  # full force along one axis, 30% of the time
        a[full] = (a[full] / a[full].abs().amax(-1, keepdim=True)).clamp(-1, 1)
        return a
    return torch.randint(0, 9, (num_envs, n), generator=gen)


def contacts(pos, a, g):
    """Envs where some agent overlaps another agent or an obstacle."""
    n = a + g
    radii = torch.tensor([ADV_R] * a + [GOOD_R] * g + [OBSTACLE_R] * (pos.shape[1] - n))
    d = (pos[:, :n, None] - pos[:, None]).norm(dim=-1) - radii[:n, None] - radii[None]
    d[:, torch.arange(n), torch.arange(n)] = 1.0
    return int((d < 0).any(-1).any(-1).sum())


def run_parity(continuous, num_envs=E, steps=STEPS, check_respawn=False, **kwargs):
    """Step VMAS and ours from the same random states with the same actions and compare
    everything; returns (transitions, catches scored, envs stepped from a contact)."""
    a, g = kwargs.get("num_adversaries", 3), kwargs.get("num_good_agents", 1)
    landmarks, bound = kwargs.get("num_landmarks", 2), kwargs.get("bound", 1.0)
    n = a + g
    venv = vmas.make_env("simple_tag", num_envs=num_envs, device="cpu", continuous_actions=continuous, seed=0,
                         max_steps=steps, **kwargs)
    venv.reset()
    plain = None
    if check_respawn:  # the same world without respawns: where the caught agents were
        plain = vmas.make_env("simple_tag", num_envs=num_envs, device="cpu", continuous_actions=continuous,
                              seed=0, **{**kwargs, "respawn_at_catch": False})
        plain.reset()
    env = SimpleTagEnv(num_envs=num_envs, continuous_actions=continuous, seed=0, max_steps=steps, **kwargs)
    td = env.reset()
    gen = torch.Generator().manual_seed(1 if continuous else 2)
    transitions = catches = respawns = touching = 0
    for step in range(steps):
        pos, vel = random_world(gen, num_envs, a, g, landmarks, bound)
        if step % 2 == 1:  # run a trajectory on from the previous step's state, half the time
            pos, vel = vmas_state(venv)
        actions = random_actions(gen, continuous, num_envs, n)
        touching += contacts(pos, a, g)
        for world in (venv, plain) if plain else (venv,):
            load_vmas(world, pos, vel)
        env.state["pos"].copy_(pos)
        env.state["vel"].copy_(vel)
        obs, rews, dones, _ = venv.step([actions[:, i].clone() for i in range(n)])
        td["adversary", "action"] = actions[:, :a]
        td["agent", "action"] = actions[:, a:]
        out = env.step(td)["next"]
        vpos, vvel = vmas_state(venv)
        ours_pos, ours_vel = env.state["pos"], env.state["vel"]
        close(out["adversary", "reward"].squeeze(-1), torch.stack(rews[:a], 1), f"reward, step {step}")
        close(out["agent", "reward"].squeeze(-1), torch.stack(rews[a:], 1), f"reward, step {step}")
        assert (out["done"].squeeze(-1) == dones).all() and (out["terminated"].squeeze(-1) == dones).all()
        assert bool(dones.all()) == (step == steps - 1)
        catches += int((torch.stack(rews[:a], 1) != 0).any(-1).sum())
        transitions += num_envs
        if plain is None:
            close(ours_pos, vpos, f"pos, step {step}")
            close(ours_vel, vvel, f"vel, step {step}")
            close(out["adversary", "observation"], torch.stack(obs[:a], 1), f"observation, step {step}")
            close(out["agent", "observation"], torch.stack(obs[a:], 1), f"observation, step {step}")
            continue
        # respawn_at_catch: the rule, not VMAS's random draws
        plain.step([actions[:, i].clone() for i in range(n)])
        ppos, pvel = vmas_state(plain)
        moved = caught(ppos, a, g)  # [E, G]: caught where the physics left them
        respawns += int(moved.sum())
        keep = torch.ones(num_envs, ours_pos.shape[1], dtype=torch.bool)
        keep[:, a:n] = ~moved
        close(ours_pos[keep], vpos[keep], f"pos, step {step}")
        close(ours_vel[keep], vvel[keep], f"vel, step {step}")
        close(ours_pos[keep], ppos[keep], f"pos, step {step}")
        good_vel = ours_vel[:, a:n]
        assert (good_vel[moved] == 0).all() and (vvel[:, a:n][moved] == 0).all()
        good_pos = ours_pos[:, a:n][moved]
        assert (good_pos.abs() <= bound).all()
        assert not torch.isclose(good_pos, ppos[:, a:n][moved]).all(-1).any()  # they did move
        # observations are VMAS's function of our state after the respawns
        load_vmas(venv, ours_pos, ours_vel)
        theirs = [venv.scenario.observation(agent) for agent in venv.world.agents]
        close(out["adversary", "observation"], torch.stack(theirs[:a], 1), f"observation, step {step}")
        close(out["agent", "observation"], torch.stack(theirs[a:], 1), f"observation, step {step}")
        load_vmas(venv, vpos, vvel)
    if check_respawn and not SIM:
        assert respawns > 0
    return transitions, catches, touching


@pytest.mark.sim
def test_continuous_matches_vmas():
    transitions, catches, touching = run_parity(True)
    assert transitions >= (1000 if not SIM else 1)
    assert SIM or (catches > 0 and touching > transitions / 4)


@pytest.mark.sim
def test_discrete_matches_vmas():
    transitions, catches, touching = run_parity(False)
    assert transitions >= (1000 if not SIM else 1)
    assert SIM or (catches > 0 and touching > transitions / 4)


def test_scenario_kwargs_match_vmas():
    """Shaped rewards, shared good-agent rewards, own adversary rewards, no team
    observations, no own position, a wider world with more agents and obstacles."""
    run_parity(True, num_envs=E // 2, num_adversaries=2, num_good_agents=3, num_landmarks=3, bound=1.6,
               shape_agent_rew=True, shape_adversary_rew=True, agents_share_rew=True, adversaries_share_rew=False,
               observe_same_team=False, observe_pos=False)
    run_parity(False, num_envs=E // 4, steps=2, num_landmarks=0, observe_vel=False, shape_adversary_rew=True)


def test_many_agents_match_vmas():
    """The benchmark's 10 adversaries + 100 good agents (crowded: contacts everywhere). One
    step: VMAS's own step takes seconds at this size."""
    transitions, catches, touching = run_parity(True, num_envs=3, steps=1, num_adversaries=10, num_good_agents=100)
    assert catches == touching == 3


def test_respawn_at_catch():
    """Rewards as VMAS's (scored before the respawn); caught good agents move, at rest,
    within the bounds; everything else as VMAS's; observations read the new positions."""
    run_parity(True, num_envs=E // 2, steps=4, check_respawn=True, respawn_at_catch=True, num_good_agents=3)


def test_respawn_checks_adversaries_in_order():
    """VMAS's loop: a good agent caught by adversary 0 respawns, and is then checked against
    adversary 1 where it landed: landing on adversary 1 respawns it again."""
    seed, env, ep, stream, a, agent, bound = np.uint64(5), 0, 1, 3, 2, 2, 1.0
    size = np.array([ADV_R, ADV_R, GOOD_R])
    draw = [[np.float32(uniform(seed, env, ep, stream, agent, k) * 2.0 - 1.0) for k in (2 * adv, 2 * adv + 1)]
            for adv in range(2)]
    pos = np.zeros((1, 3, 2), np.float32)
    pos[0, 0] = [0.5, 0.5]
    pos[0, 2] = [0.52, 0.5]  # on adversary 0
    pos[0, 1] = [5.0, 5.0]  # adversary 1 far away: one respawn
    assert tag_respawned(env, agent, seed, ep, stream, a, pos, size, bound) == (*draw[0], True)
    pos[0, 1] = draw[0]  # adversary 1 where the first draw lands: a second respawn
    assert tag_respawned(env, agent, seed, ep, stream, a, pos, size, bound) == (*draw[1], True)
    pos[0, 2] = [-0.5, -0.5]  # not caught: stays
    assert tag_respawned(env, agent, seed, ep, stream, a, pos, size, bound) == (-0.5, -0.5, False)
    # a respawn draw depends on the step: another step, another place
    pos[0, 2] = [0.52, 0.5]
    x, y, moved = tag_respawned(env, agent, seed, ep, stream + 1, a, pos, size, bound)
    assert moved and [x, y] != draw[0] and [x, y] != draw[1]


def test_contact_with_obstacle_by_hand():
    """A good agent 0.2 from an obstacle's centre at rest (radii sum 0.25), no action: the
    obstacle pushes it with 500 * softplus(0.05 / 1e-3) * 1e-3 = 25 until it is clear; the
    obstacle stays."""
    env = SimpleTagEnv(num_envs=2, num_landmarks=1, seed=0)  # 2: num_envs=1 compiles other kernels
    td = env.reset()
    env.state["pos"][0] = torch.tensor([[-0.9, -0.9], [0.9, -0.9], [-0.9, 0.9], [0.2, 0.0], [0.0, 0.0]])
    env.state["vel"].zero_()
    td["adversary", "action"] = torch.zeros(2, 3, 2)
    td["agent", "action"] = torch.zeros(2, 1, 2)
    env.step(td)
    # first substep: v = 25 * 0.01 = 0.25, then x = 0.2025, still inside: pushed again
    assert env.state["pos"][0, 3, 0] > 0.25 and env.state["vel"][0, 3, 0] > 0.25
    assert env.state["pos"][0, 3, 1] == 0 and (env.state["pos"][0, 4] == 0).all()


def test_pressed_against_the_bounds():
    """An agent pushed out of the world stays on its side, keeping its velocity (VMAS clamps
    positions only)."""
    env = SimpleTagEnv(num_envs=2, num_landmarks=0, bound=0.5, seed=0)
    td = env.reset()
    env.state["pos"][0] = torch.tensor([[0.5, 0.0], [-0.3, -0.5], [0.0, 0.3], [-0.5, 0.5]])
    env.state["vel"][0] = torch.tensor([[1.0, 0.0], [0.0, -1.0], [0.0, 0.0], [-1.0, 1.0]])
    td["adversary", "action"] = torch.tensor([[[1.0, 0.0], [0.0, -1.0], [0.0, 0.0]]]).expand(2, 3, 2)
    td["agent", "action"] = torch.tensor([[[-1.0, 1.0]]]).expand(2, 1, 2)
    env.step(td)
    pos, vel = env.state["pos"][0], env.state["vel"][0]
    assert pos[0, 0] == 0.5 and pos[1, 1] == -0.5 and (pos[3] == torch.tensor([-0.5, 0.5])).all()
    assert vel[0, 0] == pytest.approx(1.0) and vel[3].norm() == pytest.approx(1.3)


@pytest.mark.sim
def test_specs_and_groups_are_vmasenv_s():
    env = SimpleTagEnv(num_envs=2, max_steps=3, seed=0)
    check_env_specs(env)
    assert env.group_map == {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]}
    assert env.observation_spec["adversary", "observation"].shape == (2, 3, 16)
    assert env.observation_spec["agent", "observation"].shape == (2, 1, 14)
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    r = td["next", "adversary", "reward"]
    assert (r == r[:, :, :1]).all()  # shared by default
    if SIM:
        return
    from torchrl.envs.libs.vmas import VmasEnv

    for kwargs in ({}, dict(num_adversaries=2, num_good_agents=4, num_landmarks=1, observe_same_team=False)):
        theirs = VmasEnv("simple_tag", num_envs=2, continuous_actions=False, **kwargs)
        ours = MPEEnv("simple_tag", num_envs=2, continuous_actions=False, **kwargs)
        assert ours.group_map == theirs.group_map
        for group in theirs.group_map:
            for spec in ("observation_spec", "full_action_spec"):
                assert getattr(ours, spec)[group].shape == getattr(theirs, spec)[group].shape
            assert type(ours.full_action_spec[group, "action"]) is type(theirs.full_action_spec[group, "action"])


def test_reset_distribution():
    """Agents uniform in [-bound, bound]^2, obstacles in [-(bound - 0.1), bound - 0.1]^2, at
    rest: our resets against VMAS's own (means, stds, ranges)."""
    n_envs, a, g, landmarks = 10000, 3, 1, 2
    env = SimpleTagEnv(num_envs=n_envs, seed=3)
    env.reset()
    venv = vmas.make_env("simple_tag", num_envs=n_envs, device="cpu", seed=0)
    venv.reset()
    vpos, vvel = vmas_state(venv)
    pos = env.state["pos"]
    assert (env.state["vel"] == 0).all() and (vvel == 0).all()
    for part, half in ((slice(0, a + g), 1.0), (slice(a + g, a + g + landmarks), 0.9)):
        ours, theirs = pos[:, part].reshape(-1, 2), vpos[:, part].reshape(-1, 2)
        assert (ours >= -half).all() and (ours < half).all()
        assert ((ours.amin(0) - theirs.amin(0)).abs() < 0.01).all()
        assert ((ours.amax(0) - theirs.amax(0)).abs() < 0.01).all()
        assert ((ours.mean(0) - theirs.mean(0)).abs() < 0.02 * half).all()
        assert ((ours.std(0) - theirs.std(0)).abs() < 0.02 * half).all()
        assert ((ours.std(0) - half / 3 ** 0.5).abs() < 0.01).all()
    # the first observation is VMAS's function of the state
    obs = env.reset()
    load_vmas(venv, env.state["pos"].clone(), env.state["vel"].clone())
    theirs = [venv.scenario.observation(agent) for agent in venv.world.agents]
    close(obs["adversary", "observation"], torch.stack(theirs[:a], 1), "observation, reset")
    close(obs["agent", "observation"], torch.stack(theirs[a:], 1), "observation, reset")
    # a wider world: its bounds
    env = SimpleTagEnv(num_envs=2000, seed=4, bound=2.0)
    env.reset()
    assert (env.state["pos"][:, :4].abs() < 2.0).all() and env.state["pos"][:, :4].abs().max() > 1.9
    assert (env.state["pos"][:, 4:].abs() < 1.9).all() and env.state["pos"][:, 4:].abs().max() > 1.8


@needs_nvvm
@pytest.mark.parametrize("kwargs", [{}, dict(continuous_actions=False, respawn_at_catch=True)],
                         ids=["continuous", "discrete-respawn"])
def test_kernels_compile_to_ptx(kwargs, monkeypatch):
    """Numba's CUDA typing and lowering of the kernels (CI has no GPU: PTX for sm_90)."""
    env = SimpleTagEnv(num_envs=2, **kwargs)
    for kind, spec in env._kernels.items():
        assert f"warp_{kind}_cuda" in compile_ptx(spec, env._args[kind], monkeypatch)
