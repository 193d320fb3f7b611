"""AcrobotEnv against gymnasium's Acrobot-v1, transition by transition (both ``book_or_nips``)."""
import math

import numpy as np
import pytest
import torch
from torchrl.envs.utils import check_env_specs

from classic_control import (assert_close, assert_indices_refused_or_clamped, assert_truncates_after_max_steps,
                             reference_steps, step_from)
from conftest import SIM
from torchrl_warp.cuda.rng import uniform
from torchrl_warp.envs.acrobot import AcrobotEnv

gym = pytest.importorskip("gymnasium")

N = 64 if SIM else 4096
MAX_ERR = {}  # the largest error seen per quantity (for inspection)
VEL = np.array([4 * math.pi, 9 * math.pi])


@pytest.fixture(scope="module", params=["book", "nips"])
def env(request):
    """One env of N per equation set, for every transition test (the kernels compile once)."""
    return AcrobotEnv(num_envs=N, seed=0, book_or_nips=request.param)


def random_states(rng, n):
    high = np.concatenate([[math.pi, math.pi], VEL])
    return rng.uniform(-high, high, (n, 4)).astype(np.float32)


def gym_steps(states, actions, book_or_nips, torques=None):
    """gymnasium's unwrapped Acrobot-v1 from each state (``torques``: each state's AVAIL_TORQUE)."""
    ref = gym.make("Acrobot-v1").unwrapped
    ref.reset(seed=0)
    ref.book_or_nips = book_or_nips

    def prepare(ref, i):
        if torques is not None:
            ref.AVAIL_TORQUE = torques[i]

    return reference_steps(ref, states, actions, prepare)


def angle_error(a, b):
    return np.abs((a - b + np.pi) % (2 * np.pi) - np.pi)


def assert_matches(mode, ours, expected):
    obs, rew, term, trunc, state = ours
    expected_obs, expected_rew, expected_term, expected_state = expected
    assert_close(MAX_ERR, f"{mode}/observation", obs, expected_obs)
    assert_close(MAX_ERR, f"{mode}/reward", rew, expected_rew)
    np.testing.assert_array_equal(term, expected_term)
    assert not trunc.any()
    assert_close(MAX_ERR, f"{mode}/angles", angle_error(state[:, :2], expected_state[:, :2]), 0)
    assert_close(MAX_ERR, f"{mode}/velocities", state[:, 2:], expected_state[:, 2:])


@pytest.mark.sim
def test_specs(expected_backend):
    env = AcrobotEnv(num_envs=4)
    assert env.backend == expected_backend
    check_env_specs(env)
    assert env.observation_spec["observation"].shape == (4, 6)
    assert env.action_spec.shape == (4,) and env.action_spec.space.n == 3


@pytest.mark.sim
def test_transitions_match_gymnasium(env):
    """Thousands of random states and actions: our kernel vs gymnasium's step (RK4, angles
    wrapped, reward -1 or 0 at the height, which terminates)."""
    mode = env.params.book_or_nips
    rng = np.random.default_rng(0 if mode == "book" else 1)
    states, actions = random_states(rng, N), rng.integers(0, 3, N)
    ours, expected = step_from(env, states, actions), gym_steps(states, actions, mode)
    assert_matches(mode, ours, expected)
    assert 0 < expected[2].sum() < N  # both outcomes were exercised
    assert set(np.unique(expected[1])) == {-1.0, 0.0}
    assert (np.abs(ours[4][:, :2]) <= np.float32(math.pi)).all()
    wrapped = np.abs(states[:, :2].astype(np.float64) + 0.2 * states[:, 2:]) > math.pi
    assert wrapped.sum() > N // 10  # many angles crossed +-pi


@pytest.mark.sim
def test_velocity_bounds_match_gymnasium(env):
    """Velocities near their bounds, torques pushing past them: both clip alike."""
    mode = env.params.book_or_nips
    rng = np.random.default_rng(2)
    states = random_states(rng, N)
    states[:, 2:] = (rng.choice([-1.0, 1.0], (N, 2)) * VEL * rng.uniform(0.97, 1.0, (N, 2))).astype(np.float32)
    actions = rng.integers(0, 3, N)
    ours, expected = step_from(env, states, actions), gym_steps(states, actions, mode)
    assert_matches(mode, ours, expected)
    for i in (2, 3):
        at_bound = np.abs(expected[3][:, i]) == VEL[i - 2]
        assert at_bound.sum() > N // 10, "the bound was rarely reached"
        np.testing.assert_array_equal(np.abs(ours[4][at_bound, i]), np.float32(VEL[i - 2]))


def test_book_and_nips_differ(env):
    """The two equation sets are different dynamics (the book's has one more term)."""
    states = random_states(np.random.default_rng(3), N)
    actions = np.ones(N, np.int64)
    other = "nips" if env.params.book_or_nips == "book" else "book"
    assert np.abs(step_from(env, states, actions)[4][:8, 2:] - gym_steps(states[:8], actions[:8], other)[3][:, 2:]
                  ).max() > 1e-3


def test_torque_noise_is_the_rng_draw_and_matches_gymnasium_with_that_torque():
    """``torque_noise_max > 0``: each step's torque is ``action - 1`` plus a uniform draw in
    ``[-max, max)`` keyed by (seed, env, episode, step); gymnasium given that torque agrees."""
    n, noise, seed = 16, 0.3, 5
    env = AcrobotEnv(num_envs=n, seed=seed, torque_noise_max=noise)
    rng = np.random.default_rng(4)
    states, actions = random_states(rng, n), rng.integers(0, 3, n)
    ours = step_from(env, states, actions)
    episode, step = env.state["episode"].tolist(), env.state["step_count"].tolist()
    draws = [float(uniform(seed, i, episode[i], step[i], 0, 0)) * (2 * noise) - noise for i in range(n)]
    assert_matches("noise", ours, gym_steps(states, actions, "book", [[-1.0 + d, 0.0 + d, 1.0 + d] for d in draws]))
    assert all(-noise <= d < noise for d in draws) and len(set(draws)) == n  # a draw per env
    assert np.abs(ours[0] - gym_steps(states, actions, "book")[0]).max() > 1e-4  # the noise moved them


@pytest.mark.sim
def test_truncation_after_max_steps():
    assert_truncates_after_max_steps(AcrobotEnv, reward=-1)  # 5 steps from rest never reach the height


@pytest.mark.sim
def test_out_of_range_actions_are_refused_or_clamped():
    """``check_actions=True`` refuses indices outside ``[0, 2]``; with it off the kernel clamps them."""
    assert_indices_refused_or_clamped(AcrobotEnv, random_states(np.random.default_rng(5), 2))


def test_start_distribution_matches_gymnasium():
    """Every state variable uniform in [-0.1, 0.1), as gymnasium's reset draws them."""
    env = AcrobotEnv(num_envs=20000, seed=1)
    obs = env.reset()["observation"]
    state = env.state["kinematics"][:, 0]
    assert state.abs().max() <= 0.1
    assert (state.std(0) - 0.2 / 12**0.5).abs().max() < 1.5e-3
    assert state.mean(0).abs().max() < 2e-3
    expected = torch.stack([state[:, 0].cos(), state[:, 0].sin(), state[:, 1].cos(), state[:, 1].sin(),
                            state[:, 2], state[:, 3]], -1)
    torch.testing.assert_close(obs, expected, atol=1e-6, rtol=0)


def test_constants_match_gymnasium():
    ref = gym.make("Acrobot-v1").unwrapped
    p = AcrobotEnv(num_envs=1).params
    for name in ("dt", "LINK_LENGTH_1", "LINK_MASS_1", "LINK_MASS_2", "LINK_COM_POS_1", "LINK_COM_POS_2",
                 "LINK_MOI", "MAX_VEL_1", "MAX_VEL_2", "torque_noise_max", "book_or_nips"):
        assert getattr(p, name) == pytest.approx(getattr(ref, name)), name
    assert ref.AVAIL_TORQUE == [-1.0, 0.0, 1.0]
    assert p.max_steps == gym.spec("Acrobot-v1").max_episode_steps
