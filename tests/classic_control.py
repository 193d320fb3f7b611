"""What the classic-control tests share: stepping an env from states written into its
``kinematics`` field, gymnasium's unwrapped envs stepped from the same states, the
largest errors seen, and the checks several of them make alike."""
import numpy as np
import pytest
import torch


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


def assert_truncates_after_max_steps(env_cls, reward=None):
    """Two envs of ``env_cls`` with ``max_steps=5``, rolled out 5 steps from a reset none of
    them can end early from: truncated at step 5 alone, never terminated (and every reward
    ``reward``, if given)."""
    td = env_cls(num_envs=2, max_steps=5, seed=0).rollout(5, break_when_any_done=False)
    assert td["next", "truncated"][:, :, 0].tolist() == [[False] * 4 + [True]] * 2
    assert not td["next", "terminated"].any()
    assert td["next", "done"][:, -1].all()
    if reward is not None:
        assert (td["next", "reward"] == reward).all()


def assert_indices_refused_or_clamped(env_cls, states):
    """``check_actions=True`` refuses indices outside ``[0, 2]``; with it off the kernel clamps
    them (from ``states``, two rows, indices 7 and -4 step as 2 and 0 do)."""
    env = env_cls(num_envs=2, seed=0)
    env.reset()
    for bad in ([3, 0], [0, -1]):
        with pytest.raises(ValueError, match="outside its spec"):
            env.step(env.full_action_spec.zero().set("action", torch.tensor(bad)))
    unchecked = env_cls(num_envs=2, seed=0, check_actions=False)
    wild = step_from(unchecked, states, torch.tensor([7, -4]))
    tame = step_from(unchecked, states, torch.tensor([2, 0]))
    for a, b in zip(wild, tame):
        np.testing.assert_array_equal(a, b)


def assert_mountain_car_start(env_cls):
    """Position uniform in [-0.6, -0.4), velocity 0, as gymnasium's reset draws them."""
    obs = env_cls(num_envs=20000, seed=1).reset()["observation"]
    position = obs[:, 0]
    assert position.min() >= -0.6 and position.max() < -0.4
    assert abs(position.mean().item() + 0.5) < 1e-3
    assert abs(position.std().item() - 0.2 / 12**0.5) < 1e-3
    assert (obs[:, 1] == 0).all()
