"""VMAS MPE ``simple_world_comm`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

Agents ``0..n-1`` (VMAS's order: the leader, the other adversaries, then the good
agents), then the landmarks: ``num_landmarks`` obstacles, ``num_food`` food,
``num_forests`` forests. Agent ``i`` places itself and the landmarks ``n + i``,
``n + i + n``... on reset. After the physics, ``world_comm_observe`` writes the
agent's observation and ``world_comm_good_reward`` a good agent's reward and how many
adversaries touch it (``caught``); after a barrier ``world_comm_adversary_reward``
gives every adversary five times the sum of ``caught``.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["world_comm_place", "world_comm_observe", "world_comm_good_reward", "world_comm_adversary_reward",
           "touches"]


@numba.njit
def world_comm_place(env, agent, seed, episode, num_agents, pos):
    """Agents uniform in ``[-1, 1)^2``, landmarks (obstacles, food, forests) in ``[-0.9, 0.9)^2``
    (``quiet`` has zeroed the velocities)."""
    ep = episode[env]
    for j in range(agent, pos.shape[1], num_agents):
        half = 1.0 if j < num_agents else 0.9
        for d in range(2):
            pos[env, j, d] = (uniform(seed, env, ep, 0, j, d) * 2.0 - 1.0) * half


@numba.njit
def touches(env, a, b, pos, entity_size):
    """VMAS's ``is_collision`` (in float32, as VMAS computes it): centres closer than the radii's sum."""
    dx = numba.float32(pos[env, a, 0] - pos[env, b, 0])
    dy = numba.float32(pos[env, a, 1] - pos[env, b, 1])
    dist = numba.float32(math.sqrt(numba.float32(dx * dx + dy * dy)))
    return dist < numba.float32(entity_size[a] + entity_size[b])


@numba.njit
def world_comm_observe(env, agent, num_agents, pos, vel, comm, observation, num_adversaries, num_forests, dim_c):
    """VMAS's observation: own velocity, own position, every landmark minus the own position;
    then per other agent and per forest its position minus the own, then per other agent and
    per forest its velocity (good agents only); then ``-1`` per forest; then, for adversaries
    and the leader, the leader's message.

    VMAS's forest masks are written into copies (``in_forest[index][:, i] = 1``), so no agent
    is ever "in a forest": the ``-1`` flags never change, and only the leader sees the other
    agents (everyone else gets zeros there)."""
    n = num_agents
    leader = agent == 0
    px = pos[env, agent, 0]
    py = pos[env, agent, 1]
    observation[env, agent, 0] = vel[env, agent, 0]
    observation[env, agent, 1] = vel[env, agent, 1]
    observation[env, agent, 2] = px
    observation[env, agent, 3] = py
    k = 4
    for j in range(n, pos.shape[1]):
        observation[env, agent, k] = pos[env, j, 0] - px
        observation[env, agent, k + 1] = pos[env, j, 1] - py
        k += 2
    for o in range(n):
        if o == agent:
            continue
        for _ in range(num_forests):
            if leader:
                observation[env, agent, k] = pos[env, o, 0] - px
                observation[env, agent, k + 1] = pos[env, o, 1] - py
            else:
                observation[env, agent, k] = 0.0
                observation[env, agent, k + 1] = 0.0
            k += 2
    for o in range(n):
        if o == agent:
            continue
        shown = leader and o >= num_adversaries
        for _ in range(num_forests):
            observation[env, agent, k] = vel[env, o, 0] if shown else 0.0
            observation[env, agent, k + 1] = vel[env, o, 1] if shown else 0.0
            k += 2
    for _ in range(num_forests):
        observation[env, agent, k] = -1.0
        k += 1
    if leader or agent < num_adversaries:
        for i in range(dim_c):
            observation[env, agent, k + i] = comm[env, 0, i]


@numba.njit
def world_comm_good_reward(env, agent, num_agents, pos, reward, caught, entity_size, num_adversaries,
                           num_landmarks, num_food):
    """A good agent's reward: ``-5`` per adversary touching it, ``+2`` per food it touches, minus
    ``0.05 *`` the distance to the nearest food; ``caught`` counts the adversaries."""
    if agent < num_adversaries:
        caught[env, agent] = 0
        return
    hits = 0
    for a in range(num_adversaries):
        if touches(env, a, agent, pos, entity_size):
            hits += 1
    caught[env, agent] = hits
    rew = -5.0 * hits
    px = numba.float64(pos[env, agent, 0])
    py = numba.float64(pos[env, agent, 1])
    nearest = math.inf
    first = num_agents + num_landmarks
    for f in range(first, first + num_food):
        if touches(env, agent, f, pos, entity_size):
            rew += 2.0
        dx = pos[env, f, 0] - px
        dy = pos[env, f, 1] - py
        nearest = min(nearest, math.sqrt(dx * dx + dy * dy))
    reward[env, agent] = rew - 0.05 * nearest


@numba.njit
def world_comm_adversary_reward(env, agent, num_agents, reward, caught, num_adversaries):
    """Every adversary: ``+5`` per (good agent, adversary) pair in contact (VMAS's distance
    shaping term is ``0.1 * |a - a|``: always zero)."""
    if agent >= num_adversaries:
        return
    total = 0
    for g in range(num_adversaries, num_agents):
        total += caught[env, g]
    reward[env, agent] = 5.0 * total
