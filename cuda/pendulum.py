"""Pendulum kernels: gymnasium's Pendulum-v1 dynamics, one agent per env.

Physics runs in float64 (as gymnasium does) on float32 state, so a step agrees with
gymnasium's from the same state to float32 rounding. The state is
``kinematics[env, 0]``: ``theta`` (0 is upright), ``thdot``. The observation is
``[cos theta, sin theta, thdot]``, computed from the float64 state before it is stored.

Unlike gymnasium, the stored ``theta`` is kept in ``[-pi, pi]`` (:func:`angle_normalize`
after each step, then float32 rounding): gymnasium lets it grow with every turn, which float32 would round
ever more coarsely (at 1e7 rad a step of 0.4 rad rounds away). The dynamics, the
observation and the cost read ``theta`` only through ``sin``, ``cos`` and
``angle_normalize``, so the turns left out change nothing else.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["reset_pendulum", "observe_pendulum", "step_pendulum", "angle_normalize"]


@numba.njit
def angle_normalize(x):
    """gymnasium's ``((x + pi) % (2 pi)) - pi``: ``x`` shifted by whole turns into ``[-pi, pi)``."""
    turn = 2 * math.pi
    y = x + math.pi
    r = y - turn * math.floor(y / turn)  # Python's % to rounding (numba's CPU target has no math.fmod)
    if r < 0.0:
        r += turn
    if r >= turn:
        r = 0.0
    return r - math.pi


@numba.njit
def reset_pendulum(env, agent, seed, episode, kinematics):
    """``theta`` uniform in ``[-pi, pi)``, ``thdot`` in ``[-1, 1)`` (gymnasium's default bounds)."""
    theta = numba.float64(uniform(seed, env, episode[env], 0, agent, 0)) * (2 * math.pi) - math.pi
    kinematics[env, agent, 0] = theta
    kinematics[env, agent, 1] = uniform(seed, env, episode[env], 0, agent, 1) * 2.0 - 1.0


@numba.njit
def observe_pendulum(env, agent, kinematics, observation):
    """Observe phase: ``cos`` and ``sin`` of the angle, and the angular velocity."""
    theta = numba.float64(kinematics[env, agent, 0])
    observation[env, agent, 0] = math.cos(theta)
    observation[env, agent, 1] = math.sin(theta)
    observation[env, agent, 2] = kinematics[env, agent, 1]


@numba.njit
def step_pendulum(
    env, agent, step_count, action, kinematics, observation, reward, done, terminated, truncated,
    max_speed, max_torque, dt, g, m, l, max_steps,
):
    """One semi-implicit Euler step under torque ``clip(action, -max_torque, max_torque)``
    (gymnasium's clip: an action out of range pushes as its bound does; a NaN one, possible
    only with ``check_actions=False``, is read as 0). Never terminates."""
    u = numba.float64(action[env, agent, 0])
    if not (u == u):
        u = 0.0
    u = min(max(u, -max_torque), max_torque)
    th = numba.float64(kinematics[env, agent, 0])
    thdot = numba.float64(kinematics[env, agent, 1])
    costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
    newthdot = thdot + (3 * g / (2 * l) * math.sin(th) + 3.0 / (m * l**2) * u) * dt
    newthdot = min(max(newthdot, -max_speed), max_speed)  # np.clip
    newth = th + newthdot * dt
    kinematics[env, agent, 0] = angle_normalize(newth)
    kinematics[env, agent, 1] = newthdot
    observation[env, agent, 0] = math.cos(newth)
    observation[env, agent, 1] = math.sin(newth)
    observation[env, agent, 2] = newthdot
    reward[env, agent] = -costs
    terminated[env] = False
    trunc = step_count[env] >= max_steps
    truncated[env] = trunc
    done[env] = trunc
