"""CartPoleEnv against gymnasium's CartPole-v1, transition by transition."""
import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from conftest import SIM
from torchrl_warp.envs import CartPoleEnv

gym = pytest.importorskip("gymnasium")

N = 64 if SIM else 4096


def random_states(rng, n):
    high = np.array([2.4, 3.0, 0.2095, 3.5])
    return rng.uniform(-high, high, (n, 4)).astype(np.float32)


@pytest.mark.sim
def test_specs(expected_backend):
    env = CartPoleEnv(num_envs=4)
    assert env.backend == expected_backend
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (4, 4)
    assert env.action_spec.shape == (4,) and env.action_spec.space.n == 2


@pytest.mark.sim
def test_transitions_match_gymnasium():
    """Thousands of random states and actions: our kernel vs gymnasium's step."""
    rng = np.random.default_rng(0)
    env = CartPoleEnv(num_envs=N, seed=0)
    env.reset()
    states = random_states(rng, N)
    actions = rng.integers(0, 2, N)
    env.state["kinematics"][:, 0].copy_(torch.from_numpy(states))  # the state field, not the output
    out = env.step(env.full_action_spec.zero().set("action", torch.from_numpy(actions)))["next"]

    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    expected_obs, expected_term = np.empty((N, 4), np.float32), np.empty(N, bool)
    for i in range(N):
        ref.state = states[i].astype(np.float64)
        ref.steps_beyond_terminated = None
        obs, reward, term, trunc, _ = ref.step(int(actions[i]))
        expected_obs[i], expected_term[i] = obs, term
        assert reward == 1.0
    np.testing.assert_allclose(out["observation"].numpy(), expected_obs, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out["terminated"].squeeze(-1).numpy(), expected_term)
    assert 0 < expected_term.sum() < N  # both outcomes were exercised
    assert (out["reward"] == 1).all()
    assert not out["truncated"].any()


@pytest.mark.sim
def test_truncation_after_max_steps():
    env = CartPoleEnv(num_envs=2, max_steps=5, seed=0)
    # alternate pushes keep the pole up for 5 steps
    def policy(tensordict):
        return tensordict.set("action", (env.state["step_count"] % 2).long())

    td = env.rollout(5, policy=policy, break_when_any_done=False)
    assert td["next", "truncated"][:, :, 0].tolist() == [[False] * 4 + [True]] * 2
    assert not td["next", "terminated"].any()
    assert td["next", "done"][:, -1].all()


def test_start_distribution_matches_gymnasium():
    env = CartPoleEnv(num_envs=20000, seed=1)
    obs = env.reset()["observation"]
    assert obs.abs().max() < 0.05
    assert abs(obs.std().item() - 0.1 / 12**0.5) < 1e-3
    assert abs(obs.mean().item()) < 1e-3


def test_thresholds_and_constants_match_gymnasium():
    ref = gym.make("CartPole-v1").unwrapped
    p = CartPoleEnv(num_envs=1).params
    for name in ("gravity", "masscart", "masspole", "length", "force_mag", "tau",
                 "x_threshold", "theta_threshold_radians"):
        assert getattr(p, name) == pytest.approx(getattr(ref, name)), name
    assert p.max_steps == gym.spec("CartPole-v1").max_episode_steps
