"""Parity with VMAS 1.5.2, shared by tests/test_simple.py, test_simple_adversary.py and
test_simple_push.py: the same random states copied into VMAS's scenario and ours, stepped with
the same random actions, every output compared.

``run_parity`` steps both ``STEPS`` times over ``E`` envs: even steps from a fresh random
state (positions in ``[-1.5, 1.5]^2``, velocities in ``[-1, 1]^2``, plus whatever the test's
``perturb`` does: contacts; a random goal per env where there are goals), odd steps on from
where the previous step left VMAS."""
import torch

from conftest import SIM
from mpe_parity import load_vmas, vmas_state

E = 4 if SIM else 200  # the simulator runs every thread as a Python thread: tiny there
STEPS = 2 if SIM else 5


def vmas_goal(venv):
    """The index, among the landmarks, of VMAS's goal (one for the whole batch)."""
    return venv.world.landmarks.index(venv.world.agents[0].goal)


def choose_goal(venv, goal):
    """Reset VMAS until its goal is landmark ``goal``: its own reset draws the goal and sets
    the colours that depend on it."""
    for _ in range(200):
        venv.reset()
        if vmas_goal(venv) == goal:
            return
    raise AssertionError(f"VMAS never drew goal {goal}")


def random_world(gen, n_agents, n_entities):
    pos = torch.rand(E, n_entities, 2, generator=gen) * 3 - 1.5
    vel = torch.rand(E, n_entities, 2, generator=gen) * 2 - 1
    vel[:, n_agents:] = 0  # landmarks never move
    return pos, vel


def random_actions(gen, continuous, n_agents):
    if continuous:
        return torch.rand(E, n_agents, 2, generator=gen) * 2 - 1
    return torch.randint(0, 9, (E, n_agents), generator=gen)


def run_parity(venv, env, continuous, max_err, goals=False, perturb=None, count=None):
    """Step VMAS's ``venv`` and our ``env`` (both over ``E`` envs) side by side; returns the
    number of transitions compared and the sum of ``count(positions)`` over the steps (the
    positions each step starts from).

    With ``goals``, each fresh state gives every one of our envs its own random goal; VMAS
    (one goal for the whole batch) then steps the same state once per landmark as the goal,
    and each env's outputs are compared with VMAS's for its goal."""
    venv.reset()
    td = env.reset()
    n_agents, n_ent = env.n_agents, env.state["pos"].shape[1]
    n_landmarks = n_ent - n_agents
    gen = torch.Generator().manual_seed(1 if continuous else 2)
    transitions = counted = 0
    goal = None
    for step in range(STEPS):
        if step % 2 == 1:  # run a trajectory on from the previous step's state (and goals)
            pos, vel = vmas_state(venv)
        else:
            pos, vel = random_world(gen, n_agents, n_ent)
            if perturb is not None:
                perturb(gen, pos)
            if goals:
                goal = torch.randint(0, n_landmarks, (E,), generator=gen)
                goal[:n_landmarks] = torch.arange(n_landmarks)  # every goal, even in the simulator's few envs
        env.state["pos"].copy_(pos)
        env.state["vel"].copy_(vel)
        if goals:
            env.state["goal"].copy_(goal)
        actions = random_actions(gen, continuous, n_agents)
        start = 0
        for group, names in env.group_map.items():
            td[group, "action"] = actions[:, start:start + len(names)]
            start += len(names)
        out = env.step(td)["next"]
        for k in range(n_landmarks) if goals else [None]:
            if k is not None:
                choose_goal(venv, k)
            load_vmas(venv, pos, vel)
            obs, rews, dones, _ = venv.step([actions[:, i].clone() for i in range(n_agents)])
            at = torch.ones(E, dtype=torch.bool) if k is None else goal == k
            vpos, vvel = vmas_state(venv)
            max_err.close(env.state["pos"], vpos, f"pos, step {step}")
            max_err.close(env.state["vel"], vvel, f"vel, step {step}")
            assert all(a.state.c is None for a in venv.world.agents)  # dim_c = 0: nobody talks
            assert (env.state["comm"] == 0).all()
            start = 0
            for group, names in env.group_map.items():
                members = range(start, start + len(names))
                max_err.close(out[group, "observation"][at], torch.stack([obs[i] for i in members], 1)[at],
                              f"observation, {group}, step {step}, goal {k}")
                max_err.close(out[group, "reward"].squeeze(-1)[at], torch.stack([rews[i] for i in members], 1)[at],
                              f"reward, {group}, step {step}, goal {k}")
                start += len(names)
            assert (out["done"].squeeze(-1) == dones).all() and (out["terminated"].squeeze(-1) == dones).all()
        transitions += E
        if count is not None:
            counted += count(pos)
    return transitions, counted


def reset_statistics(ours_pos, theirs_pos, n_agents):
    """Agents' and landmarks' reset positions: the same range ([-1, 1)), means and stds."""
    for part in (slice(0, n_agents), slice(n_agents, None)):
        a = ours_pos[:, part].reshape(-1, 2).double()
        b = theirs_pos[:, part].reshape(-1, 2).double()
        assert (a >= -1).all() and (a < 1).all() and (b >= -1).all() and (b <= 1).all()
        assert (a.mean(0) - b.mean(0)).abs().max() < 0.02
        assert (a.std(0) - b.std(0)).abs().max() < 0.02
        assert (a.min(0).values - b.min(0).values).abs().max() < 0.01
        assert (a.max(0).values - b.max(0).values).abs().max() < 0.01
