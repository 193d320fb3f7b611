"""PendulumEnv against gymnasium's Pendulum-v1, transition by transition."""
import math

import numpy as np
import pytest
import torch
from torchrl.data import Bounded
from torchrl.envs.utils import check_env_specs

from classic_control import assert_close, assert_truncates_after_max_steps, reference_steps, step_from
from conftest import SIM
from torchrl_warp.envs.pendulum import PendulumEnv

gym = pytest.importorskip("gymnasium")

N = 64 if SIM else 4096
MAX_ERR = {}  # the largest error seen per quantity (for inspection)


@pytest.fixture(scope="module")
def env():
    """One env of N for every transition test (the kernels compile once); ``check_actions``
    on: out-of-range torques are clipped, not refused."""
    return PendulumEnv(num_envs=N, seed=0)


def gym_steps(states, actions, g=10.0):
    ref = gym.make("Pendulum-v1", g=g).unwrapped
    ref.reset(seed=0)
    # gymnasium's state is float64 (its reset's uniform): the float32 states as float64
    return reference_steps(ref, states.astype(np.float64), actions.astype(np.float32))


def angle_error(a, b):
    return np.abs((a - b + np.pi) % (2 * np.pi) - np.pi)


def assert_matches(ours, expected, name=""):
    obs, rew, term, trunc, state = ours
    expected_obs, expected_rew, expected_term, expected_state = expected
    assert_close(MAX_ERR, f"{name}observation", obs, expected_obs)
    assert_close(MAX_ERR, f"{name}reward", rew, expected_rew)
    # our theta stays in [-pi, pi] (gymnasium's grows with every turn): equal up to whole turns
    assert_close(MAX_ERR, f"{name}theta", angle_error(state[:, 0], expected_state[:, 0]), 0)
    assert_close(MAX_ERR, f"{name}thdot", state[:, 1], expected_state[:, 1])
    assert (np.abs(state[:, 0]) <= np.float32(math.pi)).all()
    assert not term.any() and not expected_term.any() and not trunc.any()


@pytest.mark.sim
def test_specs(expected_backend):
    env = PendulumEnv(num_envs=4)
    assert env.backend == expected_backend
    check_env_specs(env)
    spec = env.action_spec
    assert env.observation_spec["observation"].shape == (4, 3)
    assert isinstance(spec, Bounded) and spec.shape == (4, 1) and spec.dtype == torch.float32
    assert spec.space.low.min() == -2 and spec.space.high.max() == 2


@pytest.mark.sim
def test_transitions_match_gymnasium(env):
    """Thousands of random states (angles of several turns: ``angle_normalize`` in the cost)
    and torques, a third of them out of [-2, 2] (clipped)."""
    rng = np.random.default_rng(0)
    states = np.stack([rng.uniform(-3 * math.pi, 3 * math.pi, N), rng.uniform(-8, 8, N)], -1).astype(np.float32)
    actions = rng.uniform(-3, 3, (N, 1)).astype(np.float32)
    assert_matches(step_from(env, states, actions), gym_steps(states, actions))
    assert N // 5 < (np.abs(actions) > 2).sum() < N // 2


@pytest.mark.sim
def test_speed_clip_matches_gymnasium(env):
    """Speeds near the limit, torques pushing past it: both clip ``thdot`` to [-8, 8]."""
    rng = np.random.default_rng(1)
    sign = rng.choice([-1.0, 1.0], N)
    states = np.stack([rng.uniform(-math.pi, math.pi, N), sign * rng.uniform(7.5, 8, N)], -1).astype(np.float32)
    actions = (sign * rng.uniform(0, 2, N))[:, None].astype(np.float32)
    ours, expected = step_from(env, states, actions), gym_steps(states, actions)
    assert_matches(ours, expected)
    at_limit = np.abs(expected[3][:, 1]) == 8
    assert at_limit.sum() > N // 4, "few states reached the speed limit"
    assert (np.abs(ours[4][at_limit, 1]) == 8).all()


def test_gravity_parameter_matches_gymnasium():
    """``g`` as gymnasium's constructor takes it."""
    rng = np.random.default_rng(2)
    n = 256
    states = np.stack([rng.uniform(-math.pi, math.pi, n), rng.uniform(-8, 8, n)], -1).astype(np.float32)
    actions = rng.uniform(-2, 2, (n, 1)).astype(np.float32)
    ours = step_from(PendulumEnv(num_envs=n, g=9.81), states, actions)
    assert_matches(ours, gym_steps(states, actions, g=9.81), "g=9.81/")


@pytest.mark.sim
def test_out_of_range_actions_are_clipped_and_nan_refused():
    """gymnasium's rule: a torque out of [-2, 2] acts as its bound (cost included), so
    ``check_actions=True`` does not refuse it; NaN and infinities it refuses. With checks
    off a NaN torque is read as 0: the state stays finite."""
    states = np.float32([[0.5, 1.0], [-2.0, -3.0]])
    env = PendulumEnv(num_envs=2, seed=0)
    wild = step_from(env, states, torch.tensor([[7.0], [-1e30]]))
    tame = step_from(env, states, torch.tensor([[2.0], [-2.0]]))
    for a, b in zip(wild, tame):
        np.testing.assert_array_equal(a, b)
    for bad in (math.nan, math.inf, -math.inf):
        env.reset()
        before = env.state["kinematics"].clone()
        with pytest.raises(ValueError, match="NaN or infinite"):
            env.step(env.full_action_spec.zero().set("action", torch.tensor([[bad], [0.0]])))
        assert torch.equal(env.state["kinematics"], before)
    unchecked = PendulumEnv(num_envs=2, seed=0, check_actions=False)
    nan = step_from(unchecked, states, torch.tensor([[math.nan], [0.0]]))
    zero = step_from(unchecked, states, torch.zeros(2, 1))
    for a, b in zip(nan, zero):
        np.testing.assert_array_equal(a, b)


@pytest.mark.sim
def test_truncation_after_max_steps_and_never_terminated():
    assert_truncates_after_max_steps(PendulumEnv)


def test_start_distribution_matches_gymnasium():
    """theta uniform in [-pi, pi), thdot in [-1, 1), as gymnasium's reset draws them."""
    env = PendulumEnv(num_envs=20000, seed=1)
    obs = env.reset()["observation"]
    theta, thdot = env.state["kinematics"][:, 0].unbind(-1)
    assert theta.abs().max() <= math.pi and thdot.abs().max() <= 1
    assert abs(theta.mean().item()) < 0.03 and abs(theta.std().item() - 2 * math.pi / 12**0.5) < 0.02
    assert abs(thdot.mean().item()) < 0.01 and abs(thdot.std().item() - 2 / 12**0.5) < 0.01
    torch.testing.assert_close(obs, torch.stack([theta.cos(), theta.sin(), thdot], -1), atol=1e-6, rtol=0)


@pytest.mark.sim
def test_theta_of_many_turns_is_brought_back_into_range():
    """Angles of thousands of turns (gymnasium's theta after long spinning; at 1e7 rad a
    float32 step of 0.4 rad would round away): one step computes what gymnasium does from
    them and stores theta back in [-pi, pi], where float32 keeps its precision."""
    states = np.float32([[1e4, 8.0], [-1e4, -8.0], [1e7, 3.0], [-5e6, 0.0]])
    actions = np.float32([[2.0], [-2.0], [0.5], [0.0]])
    ours = step_from(PendulumEnv(num_envs=4), states, actions)
    assert_matches(ours, gym_steps(states, actions), "many turns/")


def test_constants_match_gymnasium():
    ref = gym.make("Pendulum-v1").unwrapped
    p = PendulumEnv(num_envs=1).params
    for name in ("max_speed", "max_torque", "dt", "g", "m", "l"):
        assert getattr(p, name) == pytest.approx(getattr(ref, name)), name
    assert p.max_steps == gym.spec("Pendulum-v1").max_episode_steps
    space = PendulumEnv(num_envs=1, max_torque=0.5).action_spec.space  # the spec follows max_torque
    assert (space.low.item(), space.high.item()) == (-0.5, 0.5)
