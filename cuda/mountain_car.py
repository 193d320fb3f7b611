"""MountainCar kernels: gymnasium's MountainCar-v0 dynamics, one agent per env.

Physics runs in float64 (as gymnasium does) on float32 state, so a step agrees with
gymnasium's from the same state to float32 rounding. The state is
``kinematics[env, 0]``: position, velocity; the observation is a copy of it.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["reset_mountain_car", "step_mountain_car", "drive"]


@numba.njit
def reset_mountain_car(env, agent, seed, episode, kinematics):
    """Position uniform in ``[-0.6, -0.4)`` (gymnasium's default bounds), at rest."""
    kinematics[env, agent, 0] = uniform(seed, env, episode[env], 0, agent, 0) * 0.2 - 0.6
    kinematics[env, agent, 1] = 0.0


@numba.njit
def drive(env, agent, position, velocity, kinematics, observation, min_position, max_position, max_speed):
    """The rest of a step of either MountainCar, from the new ``velocity``: clip it, move,
    clip the position; at the left wall a car moving left stops. Writes the state and its
    copy, the observation; returns ``(position, velocity)``."""
    velocity = min(max(velocity, -max_speed), max_speed)  # np.clip
    position += velocity
    position = min(max(position, min_position), max_position)
    if position == min_position and velocity < 0:
        velocity = 0.0
    kinematics[env, agent, 0] = position
    kinematics[env, agent, 1] = velocity
    observation[env, agent, 0] = position
    observation[env, agent, 1] = velocity
    return position, velocity


@numba.njit
def step_mountain_car(
    env, agent, step_count, action, kinematics, observation, reward, done, terminated, truncated,
    min_position, max_position, max_speed, goal_position, goal_velocity, force, gravity, max_steps,
):
    """One step: push ``(action - 1) * force`` (index clamped to ``[0, 2]``), gravity along
    the hill ``sin(3 x)``, speed and position clipped, the left wall stops the car."""
    a = action[env, agent]
    a = 0 if a < 0 else (2 if a > 2 else a)
    position = numba.float64(kinematics[env, agent, 0])
    velocity = numba.float64(kinematics[env, agent, 1])
    velocity += (a - 1) * force + math.cos(3 * position) * (-gravity)
    position, velocity = drive(env, agent, position, velocity, kinematics, observation, min_position, max_position,
                               max_speed)
    term = position >= goal_position and velocity >= goal_velocity
    trunc = step_count[env] >= max_steps
    reward[env, agent] = -1.0
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc
