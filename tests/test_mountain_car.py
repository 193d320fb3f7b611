"""MountainCarEnv against gymnasium's MountainCar-v0, transition by transition."""
import numpy as np
import pytest
from torchrl.envs.utils import check_env_specs

from classic_control import (assert_close, assert_indices_refused_or_clamped, assert_mountain_car_start,
                             assert_truncates_after_max_steps, reference_steps, step_from)
from conftest import SIM
from torchrl_warp.envs.mountain_car import MountainCarEnv

gym = pytest.importorskip("gymnasium")

N = 64 if SIM else 4096
MAX_ERR = {}  # the largest error seen per quantity (for inspection)


@pytest.fixture(scope="module")
def env():
    """One env of N for every transition test (the kernels compile once)."""
    return MountainCarEnv(num_envs=N, seed=0)


def gym_steps(states, actions):
    ref = gym.make("MountainCar-v0").unwrapped
    ref.reset(seed=0)
    # gymnasium's state is float64 (its reset's np.array([x, 0])): the float32 states as float64
    return reference_steps(ref, states.astype(np.float64), actions)


def assert_matches(ours, expected):
    obs, rew, term, trunc, state = ours
    expected_obs, expected_rew, expected_term, expected_state = expected
    assert_close(MAX_ERR, "observation", obs, expected_obs)
    assert_close(MAX_ERR, "state", state, expected_state)
    np.testing.assert_array_equal(rew, expected_rew)
    np.testing.assert_array_equal(term, expected_term)
    assert not trunc.any()


@pytest.mark.sim
def test_specs(expected_backend):
    env = MountainCarEnv(num_envs=4)
    assert env.backend == expected_backend
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (4, 2)
    assert env.action_spec.shape == (4,) and env.action_spec.space.n == 3


@pytest.mark.sim
def test_transitions_match_gymnasium(env):
    """Thousands of random states and actions over the whole track: both outcomes of the goal test."""
    rng = np.random.default_rng(0)
    states = np.stack([rng.uniform(-1.2, 0.6, N), rng.uniform(-0.07, 0.07, N)], -1).astype(np.float32)
    actions = rng.integers(0, 3, N)
    expected = gym_steps(states, actions)
    assert_matches(step_from(env, states, actions), expected)
    assert 0 < expected[2].sum() < N  # some reached the goal
    assert (expected[1] == -1).all()


@pytest.mark.sim
def test_edges_match_gymnasium(env):
    """The edges: the left wall (the car stops), the speed limit, the right end, and the goal
    reached with too little velocity (``goal_velocity`` 0: a car rolling back is not there)."""
    rng = np.random.default_rng(1)
    q = N // 4
    wall = np.stack([rng.uniform(-1.2, -1.15, q), rng.uniform(-0.07, 0.0, q)], -1)
    fast = np.stack([rng.uniform(-1.1, 0.4, q), rng.choice([-1, 1], q) * rng.uniform(0.068, 0.07, q)], -1)
    right = np.stack([rng.uniform(0.55, 0.6, q), rng.uniform(0.0, 0.07, q)], -1)
    goal = np.stack([rng.uniform(0.5, 0.52, N - 3 * q), rng.uniform(-0.0015, 0.0005, N - 3 * q)], -1)
    states = np.concatenate([wall, fast, right, goal]).astype(np.float32)
    actions = rng.integers(0, 3, N)
    ours, expected = step_from(env, states, actions), gym_steps(states, actions)
    assert_matches(ours, expected)
    new = expected[3]
    stopped = (new[:, 0] == -1.2) & (new[:, 1] == 0)
    assert stopped[:q].sum() > q // 2, "few cars hit the wall"
    assert (ours[4][stopped] == np.float32([-1.2, 0.0])).all()
    assert (np.abs(new[q:2 * q, 1]) == 0.07).sum() > q // 4, "few cars hit the speed limit"
    assert (new[2 * q:3 * q, 0] == 0.6).sum() > q // 4, "few cars hit the right end"
    assert 0 < expected[2][3 * q:].sum() < N - 3 * q  # some rolled back out of the goal, some stayed


@pytest.mark.sim
def test_truncation_after_max_steps():
    assert_truncates_after_max_steps(MountainCarEnv, reward=-1)  # no car gets up the hill in 5 steps


@pytest.mark.sim
def test_out_of_range_actions_are_refused_or_clamped():
    """``check_actions=True`` refuses indices outside ``[0, 2]``; with it off the kernel clamps them."""
    assert_indices_refused_or_clamped(MountainCarEnv, np.float32([[-0.5, 0.01], [0.1, -0.02]]))


def test_start_distribution_matches_gymnasium():
    """Position uniform in [-0.6, -0.4), velocity 0, as gymnasium's reset draws them."""
    assert_mountain_car_start(MountainCarEnv)


def test_constants_match_gymnasium():
    ref = gym.make("MountainCar-v0").unwrapped
    p = MountainCarEnv(num_envs=1).params
    for name in ("min_position", "max_position", "max_speed", "goal_position", "goal_velocity", "force",
                 "gravity"):
        assert getattr(p, name) == pytest.approx(getattr(ref, name)), name
    assert p.max_steps == gym.spec("MountainCar-v0").max_episode_steps
    with pytest.raises(ValueError, match="min_position must be less than max_position"):
        MountainCarEnv(min_position=0.7)
