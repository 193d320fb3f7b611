"""VMAS MPE ``simple_push`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

The adversary (entity 0), the good agent (1), two landmarks (2, 3); the agents collide with
each other. ``goal`` (``[E]``, int32) is the goal landmark's index among the landmarks (0 or
1); the good agent sees it (and its own colour, which VMAS sets from it), the adversary does
not. ``landmark_color`` (``[2, 3]``) holds the landmarks' colours, which the good agent sees.
"""
import math

import numba

from torchrl_warp.cuda.mpe import entity_distance, scatter_place
from torchrl_warp.cuda.mpe_goal import draw_goal, write_relative, write_velocity

__all__ = ["push_place", "push_observe", "push_reward"]


@numba.njit
def push_place(env, agent, seed, episode, num_agents, pos, goal):
    """Both agents and both landmarks uniform in ``[-1, 1)^2``; agent 0 draws the goal landmark."""
    ep = episode[env]
    scatter_place(env, agent, seed, ep, num_agents, pos)
    draw_goal(env, agent, seed, ep, goal, pos.shape[1] - num_agents)


@numba.njit
def push_observe(env, agent, num_agents, pos, vel, goal, observation, landmark_color, n_adversaries):
    """Good agent (19 floats): own velocity, the goal's position minus the own, its own colour
    (gray, its goal's channel raised by 0.5), each landmark's position minus the own, each
    landmark's colour, the other agent's position minus the own. Adversary (8): own velocity,
    each landmark's relative position, the other agent's."""
    k = write_velocity(observation, env, agent, 0, vel)
    good = agent >= n_adversaries
    if good:
        g = goal[env]
        k = write_relative(observation, env, agent, k, pos, num_agents + g)
        for c in range(3):
            observation[env, agent, k + c] = 0.75 if c == g + 1 else 0.25
        k += 3
    for lm in range(num_agents, pos.shape[1]):
        k = write_relative(observation, env, agent, k, pos, lm)
    if good:
        for lm in range(landmark_color.shape[0]):
            for c in range(3):
                observation[env, agent, k + c] = landmark_color[lm, c]
            k += 3
    for o in range(num_agents):
        if o != agent:
            k = write_relative(observation, env, agent, k, pos, o)


@numba.njit
def push_reward(env, agent, num_agents, pos, goal, reward, n_adversaries):
    """Good agent: minus its distance to the goal. Adversary: the nearest good agent's distance
    to the goal minus its own."""
    g = num_agents + goal[env]
    own = entity_distance(pos, env, agent, g)
    if agent >= n_adversaries:
        reward[env, agent] = -own
        return
    nearest = math.inf
    for a in range(n_adversaries, num_agents):
        nearest = min(nearest, entity_distance(pos, env, a, g))
    reward[env, agent] = nearest - own
