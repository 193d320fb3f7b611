"""MountainCarContinuousEnv against gymnasium's MountainCarContinuous-v0, transition by transition."""
import math

import numpy as np
import pytest
import torch
from torchrl.data import Bounded
from torchrl.envs.utils import check_env_specs

from classic_control import (assert_close, assert_mountain_car_start, assert_truncates_after_max_steps,
                             reference_steps, step_from)
from conftest import SIM
from torchrl_warp.envs.mountain_car_continuous import MountainCarContinuousEnv

gym = pytest.importorskip("gymnasium")

N = 64 if SIM else 4096
MAX_ERR = {}  # the largest error seen per quantity (for inspection)


@pytest.fixture(scope="module")
def env():
    """One env of N for every transition test (the kernels compile once); ``check_actions``
    on: out-of-range actions are clipped, not refused."""
    return MountainCarContinuousEnv(num_envs=N, seed=0)


def gym_steps(states, actions):
    ref = gym.make("MountainCarContinuous-v0").unwrapped
    ref.reset(seed=0)
    return reference_steps(ref, states, actions.astype(np.float32))


def assert_matches(ours, expected):
    obs, rew, term, trunc, state = ours
    expected_obs, expected_rew, expected_term, expected_state = expected
    assert_close(MAX_ERR, "observation", obs, expected_obs)
    assert_close(MAX_ERR, "state", state, expected_state)
    assert_close(MAX_ERR, "reward", rew, expected_rew)
    np.testing.assert_array_equal(term, expected_term)
    assert not trunc.any()


@pytest.mark.sim
def test_specs(expected_backend):
    env = MountainCarContinuousEnv(num_envs=4)
    assert env.backend == expected_backend
    check_env_specs(env)
    spec = env.action_spec
    assert env.observation_spec["observation"].shape == (4, 2)
    assert isinstance(spec, Bounded) and spec.shape == (4, 1) and spec.dtype == torch.float32
    assert spec.space.low.min() == -1 and spec.space.high.max() == 1


@pytest.mark.sim
def test_transitions_match_gymnasium(env):
    """Thousands of random states and actions, half of them out of [-1, 1]: gymnasium clips
    the force and squares the action as given in the reward."""
    rng = np.random.default_rng(0)
    states = np.stack([rng.uniform(-1.2, 0.6, N), rng.uniform(-0.07, 0.07, N)], -1).astype(np.float32)
    actions = rng.uniform(-2, 2, (N, 1)).astype(np.float32)
    expected = gym_steps(states, actions)
    assert_matches(step_from(env, states, actions), expected)
    assert 0 < expected[2].sum() < N  # some reached the goal
    clipped = np.abs(actions[:, 0]) > 1
    assert N // 3 < clipped.sum() < 2 * N // 3
    # the reward's cost is the action's as given: above 0.1 where the force was clipped
    assert (-expected[1][clipped & ~expected[2]] > 0.1).all()


@pytest.mark.sim
def test_edges_match_gymnasium(env):
    """The left wall (the car stops), the speed limit, the right end, the goal (0.45 here)."""
    rng = np.random.default_rng(1)
    q = N // 4
    wall = np.stack([rng.uniform(-1.2, -1.15, q), rng.uniform(-0.07, 0.0, q)], -1)
    fast = np.stack([rng.uniform(-1.1, 0.4, q), rng.choice([-1, 1], q) * rng.uniform(0.068, 0.07, q)], -1)
    right = np.stack([rng.uniform(0.55, 0.6, q), rng.uniform(0.0, 0.07, q)], -1)
    goal = np.stack([rng.uniform(0.45, 0.47, N - 3 * q), rng.uniform(-0.0015, 0.0005, N - 3 * q)], -1)
    states = np.concatenate([wall, fast, right, goal]).astype(np.float32)
    actions = rng.uniform(-1.5, 1.5, (N, 1)).astype(np.float32)
    ours, expected = step_from(env, states, actions), gym_steps(states, actions)
    assert_matches(ours, expected)
    new = expected[3]
    stopped = (new[:, 0] == np.float32(-1.2)) & (new[:, 1] == 0)
    assert stopped[:q].sum() > q // 2, "few cars hit the wall"
    assert (np.abs(new[q:2 * q, 1]) == np.float32(0.07)).sum() > q // 4, "few cars hit the speed limit"
    assert (new[2 * q:3 * q, 0] == np.float32(0.6)).sum() > q // 4, "few cars hit the right end"
    assert 0 < expected[2][3 * q:].sum() < N - 3 * q
    reached = expected[2]
    np.testing.assert_allclose(ours[1][reached], 100 - 0.1 * actions[reached, 0].astype(np.float64) ** 2, atol=1e-5)


@pytest.mark.sim
def test_out_of_range_actions_are_clipped_and_nan_refused():
    """gymnasium's rule: an action out of [-1, 1] pushes as its bound does (and costs its square),
    so ``check_actions=True`` does not refuse it; NaN and infinities it refuses. With checks
    off a NaN action is read as 0: the state stays finite."""
    states = np.float32([[-0.5, 0.01], [0.1, -0.02]])
    env = MountainCarContinuousEnv(num_envs=2, seed=0)
    wild = step_from(env, states, torch.tensor([[5.0], [-1e30]]))
    tame = step_from(env, states, torch.tensor([[1.0], [-1.0]]))
    np.testing.assert_array_equal(wild[0], tame[0])
    np.testing.assert_array_equal(wild[4], tame[4])
    assert wild[1][0] == pytest.approx(tame[1][0] - 0.1 * 24) and np.isfinite(wild[1]).all()
    for bad in (math.nan, math.inf, -math.inf):
        env.reset()
        before = env.state["kinematics"].clone()
        with pytest.raises(ValueError, match="NaN or infinite"):
            env.step(env.full_action_spec.zero().set("action", torch.tensor([[0.0], [bad]])))
        assert torch.equal(env.state["kinematics"], before)
    unchecked = MountainCarContinuousEnv(num_envs=2, seed=0, check_actions=False)
    nan = step_from(unchecked, states, torch.tensor([[math.nan], [0.0]]))
    zero = step_from(unchecked, states, torch.zeros(2, 1))
    for a, b in zip(nan, zero):
        np.testing.assert_array_equal(a, b)


@pytest.mark.sim
def test_truncation_after_max_steps():
    assert_truncates_after_max_steps(MountainCarContinuousEnv)  # no car gets up the hill in 5 steps


def test_start_distribution_matches_gymnasium():
    """Position uniform in [-0.6, -0.4), velocity 0, as gymnasium's reset draws them."""
    assert_mountain_car_start(MountainCarContinuousEnv)


def test_constants_match_gymnasium():
    ref = gym.make("MountainCarContinuous-v0").unwrapped
    p = MountainCarContinuousEnv(num_envs=1).params
    for name in ("min_position", "max_position", "max_speed", "goal_position", "goal_velocity", "power"):
        assert getattr(p, name) == pytest.approx(getattr(ref, name)), name
    assert (ref.min_action, ref.max_action) == (-1.0, 1.0)
    assert p.max_steps == gym.spec("MountainCarContinuous-v0").max_episode_steps
