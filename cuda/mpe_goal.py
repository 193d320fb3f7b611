"""Kernel helpers shared by the MPE scenarios around a goal landmark (``simple``,
``simple_adversary``, ``simple_push``): placing entities on reset, drawing the goal,
distances and relative positions.

Entities are numbered as everywhere in :mod:`torchrl_warp.cuda.mpe`: the agents
``0..num_agents-1``, then the landmarks. ``goal`` (``[E]``, int32) is a landmark's index
among the landmarks (entity ``num_agents + goal``).

Examples:
    >>> import numpy as np
    >>> pos = np.array([[[0.0, 0.0], [3.0, 4.0]]], dtype=np.float32)
    >>> goal_distance(pos, 0, 0, 1)
    5.0
"""
import math

import numba

from torchrl_warp.cuda.rng import randint, uniform

__all__ = ["scatter_place", "draw_goal", "goal_distance", "write_relative", "write_velocity",
           "PLACE_STREAM", "GOAL_STREAM"]

#: the random-number streams of a reset: positions, and the goal
PLACE_STREAM, GOAL_STREAM = 0, 1


@numba.njit
def scatter_place(env, agent, seed, ep, num_agents, pos):
    """Agent ``agent`` places entities ``agent``, ``agent + num_agents``, ... (every agent and
    landmark, split over the lanes) uniform in ``[-1, 1)^2``, VMAS's ``uniform_(-1, 1)``."""
    for j in range(agent, pos.shape[1], num_agents):
        for d in range(2):
            pos[env, j, d] = uniform(seed, env, ep, PLACE_STREAM, j, d) * 2.0 - 1.0


@numba.njit
def draw_goal(env, agent, seed, ep, goal, n_landmarks):
    """Agent 0 draws the env's goal landmark, uniform over the ``n_landmarks``."""
    if agent == 0:
        goal[env] = randint(seed, env, ep, GOAL_STREAM, 0, 0, n_landmarks)


@numba.njit
def goal_distance(pos, env, i, j):
    """``|pos_i - pos_j|`` (float64) of entities ``i`` and ``j``."""
    dx = numba.float64(pos[env, i, 0]) - pos[env, j, 0]
    dy = numba.float64(pos[env, i, 1]) - pos[env, j, 1]
    return math.sqrt(dx * dx + dy * dy)


@numba.njit
def write_relative(observation, env, agent, k, pos, j):
    """``pos_j - pos_agent`` into ``observation[env, agent, k:k + 2]``; returns ``k + 2``."""
    observation[env, agent, k] = pos[env, j, 0] - pos[env, agent, 0]
    observation[env, agent, k + 1] = pos[env, j, 1] - pos[env, agent, 1]
    return k + 2


@numba.njit
def write_velocity(observation, env, agent, k, vel):
    """The agent's velocity into ``observation[env, agent, k:k + 2]``; returns ``k + 2``."""
    observation[env, agent, k] = vel[env, agent, 0]
    observation[env, agent, k + 1] = vel[env, agent, 1]
    return k + 2
