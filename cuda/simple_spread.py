"""VMAS MPE ``simple_spread`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

``n`` agents (entities ``0..n-1``) and ``n`` landmarks (entities ``n..2n-1``). Agent
``i`` resets itself and landmark ``i``. After the physics, ``spread_partials`` writes
the agent's observation and its share of the shared reward (landmark ``i``'s term and
agent ``i``'s overlaps), ``spread_reward`` sums the shares.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["spread_place", "spread_partials", "spread_reward"]


@numba.njit
def spread_place(env, agent, seed, episode, num_agents, pos, vel):
    """Agent ``i`` and landmark ``i`` uniform in ``[-1, 1)^2``, at rest."""
    ep = episode[env]
    lm = num_agents + agent
    for d in range(2):
        pos[env, agent, d] = uniform(seed, env, ep, 0, agent, d) * 2.0 - 1.0
        pos[env, lm, d] = uniform(seed, env, ep, 0, agent, 2 + d) * 2.0 - 1.0
        vel[env, agent, d] = 0.0
        vel[env, lm, d] = 0.0


@numba.njit
def spread_partials(env, agent, num_agents, pos, vel, observation, reward_part, entity_size, obs_agents):
    """Observation: own pos, own vel, every landmark - own pos, every other agent - own pos.

    Share of the reward: ``-n * min_a |a - landmark_i|`` (VMAS subtracts the landmark
    sum once per agent) minus 1 per other agent overlapping agent ``i``."""
    n = num_agents
    px = pos[env, agent, 0]
    py = pos[env, agent, 1]
    observation[env, agent, 0] = px
    observation[env, agent, 1] = py
    observation[env, agent, 2] = vel[env, agent, 0]
    observation[env, agent, 3] = vel[env, agent, 1]
    k = 4
    for lm in range(n, 2 * n):
        observation[env, agent, k] = pos[env, lm, 0] - px
        observation[env, agent, k + 1] = pos[env, lm, 1] - py
        k += 2
    if obs_agents:
        for o in range(n):
            if o != agent:
                observation[env, agent, k] = pos[env, o, 0] - px
                observation[env, agent, k + 1] = pos[env, o, 1] - py
                k += 2
    lx = numba.float64(pos[env, n + agent, 0])
    ly = numba.float64(pos[env, n + agent, 1])
    closest = math.inf
    for a in range(n):
        dx = pos[env, a, 0] - lx
        dy = pos[env, a, 1] - ly
        closest = min(closest, math.sqrt(dx * dx + dy * dy))
    part = -n * closest
    for o in range(n):
        if o != agent:
            dx = numba.float64(pos[env, o, 0]) - px
            dy = numba.float64(pos[env, o, 1]) - py
            if math.sqrt(dx * dx + dy * dy) - entity_size[o] - entity_size[agent] < 0.0:
                part -= 1.0
    reward_part[env, agent] = part


@numba.njit
def spread_reward(env, agent, num_agents, reward_part, reward):
    """Every agent gets the sum of the shares."""
    total = 0.0
    for a in range(num_agents):
        total += reward_part[env, a]
    reward[env, agent] = total
