"""VMAS MPE ``simple_adversary`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

Agents ``0..n_adversaries-1`` are the adversaries, the rest the good agents; the
``n_agents - 1`` landmarks follow. ``goal`` (``[E]``, int32) is the goal landmark's index
among the landmarks; the good agents see it, the adversaries do not.
"""
import math

import numba

from torchrl_warp.cuda.mpe import entity_distance, scatter_place
from torchrl_warp.cuda.mpe_goal import draw_goal, write_relative

__all__ = ["adversary_place", "adversary_observe", "adversary_reward"]


@numba.njit
def adversary_place(env, agent, seed, episode, num_agents, pos, goal):
    """Every agent and landmark uniform in ``[-1, 1)^2``; agent 0 draws the goal landmark."""
    ep = episode[env]
    scatter_place(env, agent, seed, ep, num_agents, pos)
    draw_goal(env, agent, seed, ep, goal, pos.shape[1] - num_agents)


@numba.njit
def adversary_observe(env, agent, num_agents, pos, goal, observation, n_adversaries):
    """Good agents: the goal's position minus the own, then every landmark's, then every
    other agent's (``2 + 4 (n - 1)``). Adversaries: the same without the goal (``4 (n - 1)``)."""
    k = 0
    if agent >= n_adversaries:
        k = write_relative(observation, env, agent, k, pos, num_agents + goal[env])
    for lm in range(num_agents, pos.shape[1]):
        k = write_relative(observation, env, agent, k, pos, lm)
    for o in range(num_agents):
        if o != agent:
            k = write_relative(observation, env, agent, k, pos, o)


@numba.njit
def adversary_reward(env, agent, num_agents, pos, goal, reward, n_adversaries):
    """Adversary: minus its distance to the goal. Good agents (shared): the sum of the
    adversaries' distances to the goal minus the nearest good agent's."""
    g = num_agents + goal[env]
    if agent < n_adversaries:
        reward[env, agent] = -entity_distance(pos, env, agent, g)
        return
    away = 0.0
    for a in range(n_adversaries):
        away += entity_distance(pos, env, a, g)
    nearest = math.inf
    for a in range(n_adversaries, num_agents):
        nearest = min(nearest, entity_distance(pos, env, a, g))
    reward[env, agent] = away - nearest
