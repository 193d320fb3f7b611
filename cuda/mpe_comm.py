"""Kernel helpers shared by the MPE scenarios with communication (``simple_speaker_listener``,
``simple_reference``, ``simple_crypto``): placing entities on reset, distances.

Entities are numbered as everywhere in :mod:`torchrl_warp.cuda.mpe`: the agents
``0..num_agents-1``, then the landmarks.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["place_entities", "distance"]


@numba.njit
def place_entities(env, agent, seed, ep, num_agents, pos, stream):
    """Agent ``agent`` places entities ``agent``, ``agent + num_agents``, ... (all the agents
    and landmarks, split over the lanes) uniform in ``[-1, 1)^2`` (VMAS's ``uniform_(-1, 1)``);
    draw stream ``stream``."""
    for j in range(agent, pos.shape[1], num_agents):
        for d in range(2):
            pos[env, j, d] = uniform(seed, env, ep, stream, j, d) * 2.0 - 1.0


@numba.njit
def distance(pos, env, i, j):
    """``|pos_i - pos_j|`` (float64) of entities ``i`` and ``j``."""
    dx = numba.float64(pos[env, i, 0]) - pos[env, j, 0]
    dy = numba.float64(pos[env, i, 1]) - pos[env, j, 1]
    return math.sqrt(dx * dx + dy * dy)
