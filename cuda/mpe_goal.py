"""Kernel helpers shared by the MPE scenarios around a goal landmark (``simple``,
``simple_adversary``, ``simple_push``): drawing the goal, writing relative positions and
velocities into observations (placement and distances: :mod:`torchrl_warp.cuda.mpe`).

Entities are numbered as everywhere in :mod:`torchrl_warp.cuda.mpe`: the agents
``0..num_agents-1``, then the landmarks. ``goal`` (``[E]``, int32) is a landmark's index
among the landmarks (entity ``num_agents + goal``).
"""
import numba

from torchrl_warp.cuda.rng import randint

__all__ = ["draw_goal", "write_relative", "write_velocity", "GOAL_STREAM"]

#: the random-number stream of the goal draw (positions draw with ``PLACE_STREAM``, 0)
GOAL_STREAM = 1


@numba.njit
def draw_goal(env, agent, seed, ep, goal, n_landmarks):
    """Agent 0 draws the env's goal landmark, uniform over the ``n_landmarks``."""
    if agent == 0:
        goal[env] = randint(seed, env, ep, GOAL_STREAM, 0, 0, n_landmarks)


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
