"""Transition parity against VMAS 1.5.2 for the MPE scenarios whose agents talk
(simple_speaker_listener, simple_reference, simple_crypto): the harness their tests share.

Each step loads one random world into VMAS's env and into ours (positions, velocities,
messages, and the scenario's own state through a callback), steps both with the same
random actions in one of VMAS's five action encodings, and compares positions,
velocities, messages, every group's observations and rewards, and the done flags.
"""
import torch
import torch.nn.functional as F

from mpe_parity import entities, load_vmas
from mpe_parity import vmas_state as vmas_positions

#: our constructor arguments per action encoding, and VMAS's make_env arguments
ENCODINGS = {
    "continuous": (dict(continuous_actions=True), dict(continuous_actions=True)),
    "categorical": (dict(continuous_actions=False), dict(continuous_actions=False)),
    "multi_categorical": (dict(continuous_actions=False, multidiscrete_actions=True),
                          dict(continuous_actions=False, multidiscrete_actions=True)),
    # VMAS has no one-hot actions (VmasEnv converts them): it gets the argmax indices
    "one_hot": (dict(continuous_actions=False, categorical_actions=False), dict(continuous_actions=False)),
    "multi_one_hot": (dict(continuous_actions=False, categorical_actions=False, multidiscrete_actions=True),
                      dict(continuous_actions=False, multidiscrete_actions=True)),
}


def vmas_state(venv):
    """VMAS's positions, velocities (our order) and messages (zero for silent agents)."""
    pos, vel = vmas_positions(venv)
    dim_c = venv.world.dim_c
    comm = torch.stack([a.state.c if a.state.c is not None else torch.zeros(venv.num_envs, dim_c)
                        for a in venv.world.agents], 1)
    return pos, vel, comm


def random_world(gen, venv):
    """Positions in [-1.5, 1.5]^2, agents' velocities in [-1, 1]^2 (landmarks at rest), the
    talkers' messages in [0, 1]."""
    num_envs, n_agents = venv.num_envs, venv.n_agents
    n = len(entities(venv))
    pos = torch.rand(num_envs, n, 2, generator=gen) * 3 - 1.5
    vel = torch.rand(num_envs, n, 2, generator=gen) * 2 - 1
    vel[:, n_agents:] = 0
    comm = torch.rand(num_envs, n_agents, venv.world.dim_c, generator=gen)
    for i, a in enumerate(venv.world.agents):
        if a.silent:
            comm[:, i] = 0
    return pos, vel, comm


def load(venv, env, pos, vel, comm):
    load_vmas(venv, pos, vel)
    for i, a in enumerate(venv.world.agents):
        if not a.silent:
            a.state.c = comm[:, i].clone()
    env.state["pos"].copy_(pos)
    env.state["vel"].copy_(vel)
    env.state["comm"].copy_(comm)


def random_actions(gen, venv, encoding, step):
    """(ours per agent, VMAS's per agent). Continuous: forces in [-1, 1], messages in [0, 1],
    a fifth of each talker's messages all zero and some components exactly 0 or 1.
    Discrete: axis choices and message indices drawn uniformly, then encoded."""
    num_envs, dim_c = venv.num_envs, venv.world.dim_c
    ours, theirs = [], []
    for i, agent in enumerate(venv.world.agents):
        talks = not agent.silent and dim_c > 0
        if encoding == "continuous":
            u = torch.rand(num_envs, 2, generator=gen) * 2 - 1
            row = u
            if talks:
                c = torch.rand(num_envs, dim_c, generator=gen)
                c[(torch.arange(num_envs) + i + step) % 5 == 0] = 0.0
                edge = torch.rand(num_envs, dim_c, generator=gen)
                c[edge < 0.05] = 0.0
                c[edge > 0.95] = 1.0
                row = torch.cat([u, c], -1)
            ours.append(row)
            theirs.append(row.clone())
            continue
        x = torch.randint(0, 3, (num_envs,), generator=gen)
        y = torch.randint(0, 3, (num_envs,), generator=gen)
        parts = [x, y]
        if talks:
            parts.append(torch.randint(0, dim_c, (num_envs,), generator=gen))
        per_message = dim_c if talks else 1
        flat = (x * 3 + y) * per_message + (parts[2] if talks else 0)
        multi = torch.stack(parts, -1)
        if encoding == "categorical":
            ours.append(flat)
            theirs.append(flat.clone())
        elif encoding == "multi_categorical":
            ours.append(multi)
            theirs.append(multi.clone())
        elif encoding == "one_hot":
            ours.append(F.one_hot(flat, 9 * per_message))
            theirs.append(flat.clone())
        else:  # multi_one_hot
            sizes = [3, 3] + ([dim_c] if talks else [])
            ours.append(torch.cat([F.one_hot(p, n) for p, n in zip(parts, sizes)], -1))
            theirs.append(multi.clone())
    return ours, theirs


def out_of_range(gen, ours, theirs):
    """Continuous actions three times too large (forces in [-3, 3], messages in [-1, 2]) and a
    NaN for ours; VMAS (clamp_actions=True) gets them clamped, the NaN as 0."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        a[:, :2] = (torch.rand(a.shape[0], 2, generator=gen) * 6 - 3)
        a[:, 2:] = a[:, 2:] * 3 - 1
        b.copy_(torch.cat([a[:, :2].clamp(-1, 1), a[:, 2:].clamp(0, 1)], -1))
        a[i, -1] = float("nan")
        b[i, -1] = 0.0


def run_parity(vmas_module, cls, encoding, num_envs, steps, errors, load_scenario=None, gen_seed=0,
               vmas_kwargs=None, wild=False, **ours_kwargs):
    """Step VMAS's ``cls.scenario`` and ``cls`` side by side from the same random worlds;
    ``load_scenario(gen, venv, env, step)`` copies the scenario's own state into both.
    ``wild``: continuous actions out of range (:func:`out_of_range`), which ours clamps with
    ``check_actions=False`` and VMAS with ``clamp_actions=True``.
    Returns the number of transitions compared."""
    if wild:
        assert encoding == "continuous"
        vmas_kwargs = {**(vmas_kwargs or {}), "clamp_actions": True}
        ours_kwargs = {**ours_kwargs, "check_actions": False}
    ours_enc, vmas_enc = ENCODINGS[encoding]
    venv = vmas_module.make_env(cls.scenario, num_envs=num_envs, device="cpu", seed=0, max_steps=steps,
                                **vmas_enc, **(vmas_kwargs or {}))
    venv.reset()
    env = cls(num_envs=num_envs, seed=0, max_steps=steps, **ours_enc, **ours_kwargs)
    td = env.reset()
    assert env.agent_names == [a.name for a in venv.world.agents]
    gen = torch.Generator().manual_seed(gen_seed)
    transitions = 0
    for step in range(steps):
        pos, vel, comm = random_world(gen, venv)
        if step % 2 == 1:  # run a trajectory on from the previous step's state, half the time
            pos, vel, comm = vmas_state(venv)
        load(venv, env, pos, vel, comm)
        if load_scenario is not None:
            load_scenario(gen, venv, env, step)
        ours_a, theirs_a = random_actions(gen, venv, encoding, step)
        if wild:
            out_of_range(gen, ours_a, theirs_a)
        obs, rews, dones, _ = venv.step(theirs_a)
        start = 0
        for group, names in env.group_map.items():
            td[group, "action"] = torch.stack(ours_a[start:start + len(names)], 1)
            start += len(names)
        out = env.step(td)["next"]
        vpos, vvel, vcomm = vmas_state(venv)
        errors.close(env.state["pos"], vpos, f"pos, step {step}")
        errors.close(env.state["vel"], vvel, f"vel, step {step}")
        errors.close(env.state["comm"], vcomm, f"comm, step {step}")
        start = 0
        for group, names in env.group_map.items():
            members = range(start, start + len(names))
            errors.close(out[group, "observation"], torch.stack([obs[i] for i in members], 1),
                         f"observation {group}, step {step}")
            errors.close(out[group, "reward"].squeeze(-1), torch.stack([rews[i] for i in members], 1),
                         f"reward {group}, step {step}")
            start += len(names)
        assert torch.equal(out["done"].squeeze(-1), dones), f"done, step {step}"
        assert torch.equal(out["terminated"].squeeze(-1), dones), f"terminated, step {step}"
        transitions += num_envs
    assert dones.all()  # the time limit (max_steps = steps) was compared too
    return transitions
