"""VMAS MPE ``simple_tag`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

Entities: adversaries ``0..A-1``, good agents ``A..A+G-1``, then the ``L`` obstacles
(landmarks). Every loop over other entities runs inside one agent's lane (O(A + G + L)
per agent), so that many agents per env cost no more than that.

Phases:

* reset: ``tag_place`` (agent ``i`` places itself and landmarks ``i``, ``i + n``, ...),
  barrier, ``tag_observe``;
* step, after the physics: ``tag_reward_part`` (each agent's own reward, from the state
  the physics left; with ``respawn_at_catch`` a good agent also works out where it
  respawns, into ``spawn_pos``/``spawn_vel``), barrier, (``tag_reward``: the team's sum
  where the team shares it; ``tag_observe``; ``tag_commit``: a good agent moves to its
  ``spawn_pos``).

The respawn costs no barrier of its own: in the phase where good agents move, everyone
reads the good agents' positions and velocities from ``spawn_pos``/``spawn_vel`` (written
a phase before), and ``pos``/``vel`` only for adversaries and obstacles, which never
respawn. Without ``respawn_at_catch`` the observation reads ``pos``/``vel``; both
settings run the same kernels.

Random numbers: resets draw with stream 0 (key ``(entity, axis)``), respawns with stream
``step_count[env]`` (>= 1 in a step; key ``(agent, 2 * adversary + axis)``), so every
draw of an episode is distinct.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["tag_place", "tag_reward_part", "tag_reward", "tag_observe", "tag_commit", "tag_distance",
           "tag_respawned"]


@numba.njit
def tag_distance(pos, env, a, b):
    """``|pos_a - pos_b|`` (float64 of the float32 difference)."""
    dx = numba.float64(pos[env, a, 0] - pos[env, b, 0])
    dy = numba.float64(pos[env, a, 1] - pos[env, b, 1])
    return math.sqrt(dx * dx + dy * dy)


@numba.njit
def tag_place(env, agent, seed, episode, num_agents, num_landmarks, pos, spawn_pos, spawn_vel, bound):
    """Agents uniform in ``[-bound, bound)^2``; agent ``i`` also places landmarks ``i``,
    ``i + n``, ... uniform in ``[-(bound - 0.1), bound - 0.1)^2`` (velocities: ``quiet``)."""
    ep = episode[env]
    for d in range(2):
        pos[env, agent, d] = uniform(seed, env, ep, 0, agent, d) * (2.0 * bound) - bound
        spawn_pos[env, agent, d] = pos[env, agent, d]
        spawn_vel[env, agent, d] = 0.0
    inner = bound - 0.1
    for lm in range(agent, num_landmarks, num_agents):
        e = num_agents + lm
        for d in range(2):
            pos[env, e, d] = uniform(seed, env, ep, 0, e, d) * (2.0 * inner) - inner


@numba.njit
def tag_respawned(env, agent, seed, ep, stream, num_adversaries, pos, entity_size, bound):
    """Where good agent ``agent`` respawns: it checks the adversaries in order, and each that
    touches it where it is then (after any earlier respawn of this loop, as VMAS's loop does)
    sends it to a new uniform position in ``[-bound, bound)^2``. ``(x, y, moved)``."""
    x = pos[env, agent, 0]
    y = pos[env, agent, 1]
    moved = False
    for a in range(num_adversaries):
        dx = numba.float64(x - pos[env, a, 0])
        dy = numba.float64(y - pos[env, a, 1])
        if math.sqrt(dx * dx + dy * dy) < entity_size[agent] + entity_size[a]:
            x = numba.float32(uniform(seed, env, ep, stream, agent, 2 * a) * (2.0 * bound) - bound)
            y = numba.float32(uniform(seed, env, ep, stream, agent, 2 * a + 1) * (2.0 * bound) - bound)
            moved = True
    return x, y, moved


@numba.njit
def tag_reward_part(env, agent, seed, episode, step_count, num_agents, num_adversaries, pos, vel, spawn_pos,
                    spawn_vel, reward_part, entity_size, shape_agent_rew, shape_adversary_rew, respawn_at_catch,
                    bound):
    """The agent's own reward. Adversary: ``+10`` per good agent it touches (with
    ``shape_adversary_rew``, ``- 0.1 * `` the distance to the nearest good agent). Good
    agent: ``-10`` per adversary touching it (with ``shape_agent_rew``, ``+ 0.1 * `` the sum
    of its distances to the adversaries); with ``respawn_at_catch``, where it respawns (at
    rest if it does): ``spawn_pos``, ``spawn_vel``."""
    rew = 0.0
    if agent < num_adversaries:
        nearest = math.inf
        for g in range(num_adversaries, num_agents):
            dist = tag_distance(pos, env, g, agent)
            nearest = min(nearest, dist)
            if dist < entity_size[g] + entity_size[agent]:
                rew += 10.0
        if shape_adversary_rew:
            rew -= 0.1 * nearest
    else:
        for a in range(num_adversaries):
            dist = tag_distance(pos, env, a, agent)
            if shape_agent_rew:
                rew += 0.1 * dist
            if dist < entity_size[a] + entity_size[agent]:
                rew -= 10.0
        if respawn_at_catch:
            x, y, moved = tag_respawned(env, agent, seed, episode[env], step_count[env], num_adversaries, pos,
                                        entity_size, bound)
            spawn_pos[env, agent, 0] = x
            spawn_pos[env, agent, 1] = y
            spawn_vel[env, agent, 0] = 0.0 if moved else vel[env, agent, 0]
            spawn_vel[env, agent, 1] = 0.0 if moved else vel[env, agent, 1]
    reward_part[env, agent] = rew


@numba.njit
def tag_reward(env, agent, num_agents, num_adversaries, reward_part, reward, adversaries_share_rew,
               agents_share_rew):
    """The agent's reward: its own, or its team's sum (``adversaries_share_rew``,
    ``agents_share_rew``)."""
    adversary = agent < num_adversaries
    if adversary and adversaries_share_rew:
        total = 0.0
        for a in range(num_adversaries):
            total += reward_part[env, a]
        reward[env, agent] = total
    elif not adversary and agents_share_rew:
        total = 0.0
        for g in range(num_adversaries, num_agents):
            total += reward_part[env, g]
        reward[env, agent] = total
    else:
        reward[env, agent] = reward_part[env, agent]


@numba.njit
def tag_observe(env, agent, num_agents, num_adversaries, num_landmarks, pos, vel, spawn_pos, spawn_vel,
                observation, observe_same_team, observe_pos, observe_vel, respawn_at_catch):
    """VMAS's observation: [own vel], [own pos], each landmark - own pos, the observed other
    agents' positions - own pos (in agent order), then the observed other good agents'
    velocities. An adversary observes every good agent (and, with ``observe_same_team``, the
    other adversaries' positions); a good agent every adversary's position (and, with
    ``observe_same_team``, the other good agents'). Good agents' positions and velocities
    are read from ``spawn_pos``/``spawn_vel`` with ``respawn_at_catch``."""
    good_pos = spawn_pos if respawn_at_catch else pos
    good_vel = spawn_vel if respawn_at_catch else vel
    adversary = agent < num_adversaries
    own_pos = pos if adversary else good_pos
    own_vel = vel if adversary else good_vel
    px = own_pos[env, agent, 0]
    py = own_pos[env, agent, 1]
    k = 0
    if observe_vel:
        observation[env, agent, 0] = own_vel[env, agent, 0]
        observation[env, agent, 1] = own_vel[env, agent, 1]
        k = 2
    if observe_pos:
        observation[env, agent, k] = px
        observation[env, agent, k + 1] = py
        k += 2
    for lm in range(num_agents, num_agents + num_landmarks):
        observation[env, agent, k] = pos[env, lm, 0] - px
        observation[env, agent, k + 1] = pos[env, lm, 1] - py
        k += 2
    if observe_same_team or not adversary:  # the adversaries' positions
        for o in range(num_adversaries):
            if o != agent:
                observation[env, agent, k] = pos[env, o, 0] - px
                observation[env, agent, k + 1] = pos[env, o, 1] - py
                k += 2
    if observe_same_team or adversary:  # the good agents' positions, then velocities
        for o in range(num_adversaries, num_agents):
            if o != agent:
                observation[env, agent, k] = good_pos[env, o, 0] - px
                observation[env, agent, k + 1] = good_pos[env, o, 1] - py
                k += 2
        for o in range(num_adversaries, num_agents):
            if o != agent:
                observation[env, agent, k] = good_vel[env, o, 0]
                observation[env, agent, k + 1] = good_vel[env, o, 1]
                k += 2


@numba.njit
def tag_commit(env, agent, num_adversaries, pos, vel, spawn_pos, spawn_vel, respawn_at_catch):
    """With ``respawn_at_catch``, a good agent takes its ``spawn_pos``/``spawn_vel``."""
    if respawn_at_catch and agent >= num_adversaries:
        for d in range(2):
            pos[env, agent, d] = spawn_pos[env, agent, d]
            vel[env, agent, d] = spawn_vel[env, agent, d]
