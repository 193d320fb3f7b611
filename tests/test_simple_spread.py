"""SimpleSpreadEnv against VMAS 1.5.2's own simple_spread: transitions, rewards, resets."""
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from mpe_parity import Errors, load_vmas, vmas_state
from torchrl_warp.envs.simple_spread import SimpleSpreadEnv

vmas = pytest.importorskip("vmas", reason="vmas is not installed: pip install -e '.[test]' brings it")

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5
MAX_ERR = Errors()  # largest error seen per quantity (for inspection)
close = MAX_ERR.close
N = 3


def random_world(gen, num_envs):
    """Positions in [-1.5, 1.5]^2, velocities in [-1, 1]^2; in every other env agent 1
    overlaps agent 0 (and in every fourth, agent 2 overlaps both) so contacts are exercised."""
    pos = torch.rand(num_envs, 2 * N, 2, generator=gen) * 3 - 1.5
    vel = torch.rand(num_envs, 2 * N, 2, generator=gen) * 2 - 1
    vel[:, N:] = 0  # landmarks never move
    for a, every in ((1, 2), (2, 4)):
        idx = torch.arange(0, num_envs, every)
        r = 0.01 + 0.28 * torch.rand(len(idx), generator=gen)
        phi = torch.rand(len(idx), generator=gen) * 6.283
        pos[idx, a] = pos[idx, 0] + torch.stack([r * phi.cos(), r * phi.sin()], -1)
    return pos, vel


def run_parity(continuous, check_actions=True, actions_fn=None, vmas_kwargs=None, scenario="simple_spread",
               **ours_kwargs):
    venv = vmas.make_env(scenario, num_envs=E, device="cpu", continuous_actions=continuous, seed=0,
                         **(vmas_kwargs or {}))
    venv.reset()
    env = SimpleSpreadEnv(num_envs=E, n_agents=N, continuous_actions=continuous, check_actions=check_actions,
                          seed=0, **ours_kwargs)
    td = env.reset()
    gen = torch.Generator().manual_seed(1 if continuous else 2)
    transitions = overlaps = 0
    for step in range(STEPS):
        pos, vel = random_world(gen, E)
        if step % 2 == 1:  # run a trajectory on from the previous step's state, half the time
            pos, vel = vmas_state(venv)
        load_vmas(venv, pos, vel)
        env.state["pos"].copy_(pos)
        env.state["vel"].copy_(vel)
        if actions_fn is not None:
            ours_a, theirs_a = actions_fn(gen)
        elif continuous:
            ours_a = torch.rand(E, N, 2, generator=gen) * 2 - 1
            theirs_a = ours_a
        else:
            ours_a = torch.randint(0, 9, (E, N), generator=gen)
            theirs_a = ours_a
        obs, rews, dones, _ = venv.step([theirs_a[:, i].clone() for i in range(N)])
        td["agents", "action"] = ours_a
        out = env.step(td)["next"]
        vpos, vvel = vmas_state(venv)
        close(env.state["pos"], vpos, f"pos, step {step}")
        close(env.state["vel"], vvel, f"vel, step {step}")
        close(out["agents", "observation"], torch.stack(obs, 1), f"observation, step {step}")
        close(out["agents", "reward"].squeeze(-1), torch.stack(rews, 1), f"reward, step {step}")
        assert not out["terminated"].any()
        transitions += E
        d = (vpos[:, None, :N] - vpos[:, :N, None]).norm(dim=-1) + 10 * torch.eye(N)
        overlaps += int((d < 0.3).any(-1).any(-1).sum())  # envs scored with an overlap penalty
    if not SIM:  # the reward's collision penalty was scored too, not only the contact forces
        assert overlaps > 0
    return transitions


@pytest.mark.sim
def test_continuous_matches_vmas():
    assert run_parity(True) >= (1000 if not SIM else 1)


@pytest.mark.sim
def test_discrete_matches_vmas():
    assert run_parity(False) >= (1000 if not SIM else 1)


def substep_scenario(substeps):
    """VMAS's simple_spread with its World stepped in `substeps` substeps."""
    from vmas.scenarios.mpe.simple_spread import Scenario

    class Substepped(Scenario):
        def make_world(self, batch_dim, device, **kwargs):
            world = super().make_world(batch_dim, device, **kwargs)
            world._substeps = substeps
            world._sub_dt = world._dt / substeps
            return world

    return Substepped()


def test_substeps_match_vmas():
    run_parity(True, scenario=substep_scenario(3), substeps=3)


def test_out_of_range_actions_clamped_like_vmas_clamp_actions():
    """check_actions=False: ours clamps (NaN as 0); VMAS with clamp_actions=True clamps too."""
    def actions(gen):
        a = (torch.rand(E, N, 2, generator=gen) * 6 - 3)
        theirs = a.clamp(-1, 1)
        a[0, 0, 0] = float("nan")
        theirs[0, 0, 0] = 0.0
        return a, theirs

    run_parity(True, check_actions=False, actions_fn=actions, vmas_kwargs={"clamp_actions": True})


def test_check_actions_refuses_out_of_range():
    env = SimpleSpreadEnv(num_envs=2)
    td = env.reset()
    td["agents", "action"] = torch.full((2, N, 2), 1.5)
    with pytest.raises(Exception):
        env.step(td)


def test_contact_force_by_hand():
    """Two agents 0.1 apart at rest (radii sum 0.3), no action: each gets
    100 * softplus(0.2 / 1e-3) * 1e-3 = 20 along the line, so |v| = 20 * 0.1 = 2 and each
    moves 0.2 away."""
    env = SimpleSpreadEnv(num_envs=1, n_agents=2)
    td = env.reset()
    env.state["pos"][0, :2] = torch.tensor([[0.0, 0.0], [0.1, 0.0]])
    env.state["vel"].zero_()
    td["agents", "action"] = torch.zeros(1, 2, 2)
    env.step(td)
    close(env.state["vel"][0, :2], torch.tensor([[-2.0, 0.0], [2.0, 0.0]]), "vel")
    close(env.state["pos"][0, :2], torch.tensor([[-0.2, 0.0], [0.3, 0.0]]), "pos")


@pytest.mark.sim
def test_specs_and_truncation():
    env = SimpleSpreadEnv(num_envs=2, max_steps=3, seed=0, terminated_truncated=True)
    check_env_specs(env)
    assert env.observation_spec["agents", "observation"].shape == (2, N, 4 + 2 * N + 2 * (N - 1))
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "truncated"][:, 2].all() and not td["next", "truncated"][:, :2].any()
    assert not td["next", "terminated"].any()
    r = td["next", "agents", "reward"]
    assert (r == r[:, :, :1]).all()  # shared


def test_time_limit_is_vmas_single_done_by_default():
    """VMAS's convention (VmasEnv): no truncated key; the time limit sets done and terminated."""
    env = SimpleSpreadEnv(num_envs=2, max_steps=3, seed=0)
    assert env.done_keys == ["done", "terminated"]
    td = env.rollout(4, break_when_any_done=False)
    assert "truncated" not in td["next"].keys()
    assert td["next", "terminated"][:, 2].all() and not td["next", "terminated"][:, :2].any()
    assert (td["next", "done"] == td["next", "terminated"]).all()
    env = SimpleSpreadEnv(num_envs=2, max_steps=0, seed=0)  # VmasEnv's max_steps=None: no limit
    assert not env.rollout(30, break_when_any_done=False)["next", "done"].any()


def test_reset_distribution():
    env = SimpleSpreadEnv(num_envs=20000, seed=3)
    env.reset()
    pos = env.state["pos"]
    assert (pos >= -1).all() and (pos < 1).all()
    assert (env.state["vel"] == 0).all()
    for group in (pos[:, :N], pos[:, N:]):  # agents, landmarks
        flat = group.reshape(-1, 2)
        assert flat.mean(0).abs().max() < 0.01
        assert (flat.std(0) - (1 / 3) ** 0.5).abs().max() < 0.01
    # the initial observation is VMAS's function of the state
    obs = env.reset()["agents", "observation"]
    p = env.state["pos"]
    assert torch.allclose(obs[:, 1, 4:6], p[:, N] - p[:, 1], atol=1e-6)
    assert torch.allclose(obs[:, 1, 10:12], p[:, 0] - p[:, 1], atol=1e-6)
