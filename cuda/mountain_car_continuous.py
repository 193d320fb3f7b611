"""MountainCarContinuous kernels: gymnasium's MountainCarContinuous-v0 dynamics, one agent per env.

Physics runs in float64 on float32 state, so a step agrees with gymnasium's from the
same state to float32 rounding (gymnasium itself computes in float32 from a float32
state under NumPy 2, in float64 from a reset's float64 one). The state is
``kinematics[env, 0]``: position, velocity; the observation is a copy of it. The reset
is MountainCar's (:func:`~torchrl_warp.cuda.mountain_car.reset_mountain_car`).
"""
import math

import numba

from torchrl_warp.cuda.mountain_car import drive, reset_mountain_car

__all__ = ["reset_mountain_car", "step_mountain_car_continuous"]

_GRAVITY = 0.0025  # gymnasium hard-codes it
_MIN_ACTION, _MAX_ACTION = -1.0, 1.0
#: float32's largest value: a reward below it would be minus infinity
_FLOAT32_MAX = 3.4028234663852886e38


@numba.njit
def step_mountain_car_continuous(
    env, agent, step_count, action, kinematics, observation, reward, done, terminated, truncated,
    min_position, max_position, max_speed, goal_position, goal_velocity, power, max_steps,
):
    """One step under force ``min(max(action, -1), 1) * power`` (gymnasium's clip: an
    action out of ``[-1, 1]`` pushes as its bound does). The reward is 100 on reaching the
    goal, minus ``0.1 * action**2`` of the action as given (gymnasium squares the
    unclipped action). A NaN action (possible only with ``check_actions=False``) is read
    as 0, so the state stays finite."""
    a = numba.float64(action[env, agent, 0])
    if not (a == a):
        a = 0.0
    f = min(max(a, _MIN_ACTION), _MAX_ACTION)
    position = numba.float64(kinematics[env, agent, 0])
    velocity = numba.float64(kinematics[env, agent, 1])
    velocity += f * power - _GRAVITY * math.cos(3 * position)
    position, velocity = drive(env, agent, position, velocity, kinematics, observation, min_position, max_position,
                               max_speed)
    term = position >= goal_position and velocity >= goal_velocity
    r = 100.0 if term else 0.0
    r -= a * a * 0.1
    trunc = step_count[env] >= max_steps
    reward[env, agent] = max(r, -_FLOAT32_MAX)
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc
