"""What the classic-control tests share: stepping an env from states written into its
``kinematics`` field, gymnasium's unwrapped envs stepped from the same states, the
largest errors seen, and a plain-Python copy of the kernels' counter-based RNG."""
import numpy as np
import torch


_MASK = (1 << 64) - 1


def _mix64(x):
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def reference_uniform(seed, env, episode, step, agent, draw):
    """``torchrl_warp.cuda.rng.uniform`` in plain Python (no compilation): a float in [0, 1)."""
    h = _mix64(seed ^ _mix64(env))
    for part in (episode, step, agent):
        h = _mix64(h ^ part)
    return float(np.float32(_mix64(h ^ draw) >> 40) * np.float32(1.0 / (1 << 24)))


def step_from(env, states, actions):
    """One step of ``env`` (just reset) from ``states`` ``[N, D]`` written into its state field:
    ``(observation, reward, terminated, truncated, new state)``, numpy arrays of N rows."""
    env.reset()
    env.state["kinematics"][:, 0].copy_(torch.as_tensor(states))
    out = env.step(env.full_action_spec.zero().set("action", torch.as_tensor(actions)))["next"]
    return (out["observation"].numpy(), out["reward"][:, 0].numpy(), out["terminated"][:, 0].numpy(),
            out["truncated"][:, 0].numpy(), env.state["kinematics"][:, 0].numpy().copy())


def reference_steps(ref, states, actions, prepare=None):
    """gymnasium's ``ref`` (an unwrapped env) stepped once from each of ``states``:
    ``(observation, reward, terminated, new state)``. ``prepare(ref, i)`` runs before step ``i``."""
    n = len(states)
    obs, rew, term, new = [], np.empty(n), np.empty(n, bool), []
    for i in range(n):
        ref.state = states[i].copy()
        if prepare is not None:
            prepare(ref, i)
        o, rew[i], term[i], trunc, _ = ref.step(actions[i])
        assert not trunc  # the unwrapped envs never truncate: time limits are TimeLimit's
        obs.append(np.asarray(o, np.float32))
        new.append(np.asarray(ref.state, np.float64))
    return np.stack(obs), rew, term, np.stack(new)


def assert_close(max_err, name, ours, expected, atol=1e-5):
    """``ours`` within ``atol`` of ``expected``; the largest error goes into ``max_err[name]``."""
    ours, expected = np.asarray(ours, np.float64), np.asarray(expected, np.float64)
    err = float(np.max(np.abs(ours - expected))) if ours.size else 0.0
    max_err[name] = max(max_err.get(name, 0.0), err)
    np.testing.assert_allclose(ours, expected, atol=atol, rtol=0, err_msg=name)
