"""MPE physics (VMAS's ``World.step``), shared by the MPE scenarios.

State fields ``pos`` and ``vel`` are ``[num_envs, n_entities, 2]``: the agents first,
then the landmarks (VMAS's ``world.entities`` order). Per-entity properties are
constants of shape ``[n_entities]``: ``entity_size`` (sphere radius),
``entity_collide``, ``entity_movable`` (1.0 / 0.0), ``entity_mass``,
``entity_max_speed`` (``<= 0``: none); per agent ``agent_u_multiplier``.
``u`` (``[E, A, 2]``) is the agent's processed action, ``force`` (``[E, A, 2]``) its
total force of the current substep.

One step is, for each of ``substeps`` substeps: (action phase on the first only,
``collision_force``), barrier, ``integrate_first`` (first substep: applies drag) or
``integrate``, barrier. Only agents integrate (one lane each): a landmark keeps its
position, as every immovable entity does.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

f32 = numba.float32

__all__ = ["scatter_place", "entity_distance", "PLACE_STREAM", "quiet", "pad_observation", "mpe_action", "mpe_action_index", "collision_force", "integrate_first", "integrate", "mpe_done", "clamp_unit",
           "CONTINUOUS", "CATEGORICAL", "MULTI_CATEGORICAL", "ONE_HOT", "MULTI_ONE_HOT"]


#: the random-number stream of the entities' reset positions
PLACE_STREAM = 0


@numba.njit
def scatter_place(env, agent, seed, ep, num_agents, pos):
    """Agent ``agent`` places entities ``agent``, ``agent + num_agents``, ... (every agent and
    landmark, split over the lanes) uniform in ``[-1, 1)^2``, VMAS's ``uniform_(-1, 1)``."""
    for j in range(agent, pos.shape[1], num_agents):
        for d in range(2):
            pos[env, j, d] = uniform(seed, env, ep, PLACE_STREAM, j, d) * 2.0 - 1.0


@numba.njit
def entity_distance(pos, env, i, j):
    """``|pos_i - pos_j|`` (float64) of entities ``i`` and ``j``.

    >>> import numpy as np
    >>> entity_distance(np.array([[[0.0, 0.0], [3.0, 4.0]]], dtype=np.float32), 0, 0, 1)
    5.0
    """
    dx = numba.float64(pos[env, i, 0]) - pos[env, j, 0]
    dy = numba.float64(pos[env, i, 1]) - pos[env, j, 1]
    return math.sqrt(dx * dx + dy * dy)


@numba.njit
def clamp_unit(x, lim):
    """``x`` clamped to ``[-lim, lim]``; NaN gives 0."""
    if not (x == x):
        return 0.0
    if x > lim:
        return lim
    if x < -lim:
        return -lim
    return x


#: how an agent's action row is encoded (``action_encoding``), VMAS's action spaces
CONTINUOUS, CATEGORICAL, MULTI_CATEGORICAL, ONE_HOT, MULTI_ONE_HOT = 0, 1, 2, 3, 4


@numba.njit
def discrete_component(c, u_range):
    """VMAS's 3-way component: 0 stays, 1 is ``-u_range``, 2 is ``+u_range``."""
    if c == 1:
        return -u_range
    if c == 2:
        return u_range
    return 0.0


@numba.njit
def clamp_index(i, n):
    """``i`` clamped to ``[0, n)``."""
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i


@numba.njit
def argmax_run(action, env, agent, start, n):
    """The index of the largest of ``action[env, agent, start:start + n]`` (first on ties)."""
    best = 0
    for i in range(1, n):
        if action[env, agent, start + i] > action[env, agent, start + best]:
            best = i
    return best


@numba.njit
def set_discrete(env, agent, x, y, msg, u, comm, agent_u_range, agent_u_multiplier, talks, dim_c):
    """``u`` from the axis choices ``x``, ``y`` (0 stays, 1 is ``-u_range``, 2 is ``+u_range``),
    times ``u_multiplier``; for talkers, message ``msg`` one-hot in ``comm``."""
    lim = agent_u_range[agent]
    m = agent_u_multiplier[agent]
    u[env, agent, 0] = discrete_component(x, lim) * m
    u[env, agent, 1] = discrete_component(y, lim) * m
    if talks:
        for i in range(dim_c):
            comm[env, agent, i] = 1.0 if i == msg else 0.0


@numba.njit
def mpe_action_index(env, agent, action, u, comm, agent_u_range, agent_u_multiplier, agent_talks, dim_c):
    """A categorical action (``action`` ``[E, N]``): VMAS's flat index ``(x * 3 + y) * dim_c + c``
    over the axis choices and, for talkers, the message (``(x * 3 + y)`` for silent agents);
    clamped to its range."""
    talks = agent_talks[agent] > 0.0 and dim_c > 0
    per_message = dim_c if talks else 1
    a = clamp_index(action[env, agent], 9 * per_message)
    set_discrete(env, agent, a // (3 * per_message), (a // per_message) % 3, a % per_message, u, comm,
                 agent_u_range, agent_u_multiplier, talks, dim_c)


@numba.njit
def mpe_action(env, agent, action, u, comm, action_encoding, agent_u_range, agent_u_multiplier, agent_talks,
               dim_c):
    """The agent's action row (``action`` ``[E, N, A]``) as VMAS's ``Environment._set_action`` reads
    it: ``u`` (times ``u_multiplier``) and, for agents that talk, the message ``comm``.

    Continuous rows are ``[u_x, u_y, c_0 .. c_{dim_c - 1}]`` (``u`` clamped to
    ``+-u_range``, messages to ``[0, 1]``, NaN as 0). Discrete rows are the components
    (x, y, and the message for talkers; clamped) or their one-hot rows, or one one-hot row
    of the flat index (see :func:`mpe_action_index`)."""
    talks = agent_talks[agent] > 0.0 and dim_c > 0
    if action_encoding == CONTINUOUS:
        lim = agent_u_range[agent]
        m = agent_u_multiplier[agent]
        u[env, agent, 0] = numba.float32(clamp_unit(numba.float64(action[env, agent, 0]), lim)) * m
        u[env, agent, 1] = numba.float32(clamp_unit(numba.float64(action[env, agent, 1]), lim)) * m
        if talks:
            for i in range(dim_c):
                c = numba.float64(action[env, agent, 2 + i])
                comm[env, agent, i] = min(max(c, 0.0), 1.0) if c == c else 0.0
        return
    msg = 0
    if action_encoding == MULTI_CATEGORICAL:
        x = clamp_index(numba.int64(action[env, agent, 0]), 3)
        y = clamp_index(numba.int64(action[env, agent, 1]), 3)
        if talks:
            msg = clamp_index(numba.int64(action[env, agent, 2]), dim_c)
    elif action_encoding == ONE_HOT:
        per_message = dim_c if talks else 1
        a = argmax_run(action, env, agent, 0, 9 * per_message)
        x, y, msg = a // (3 * per_message), (a // per_message) % 3, a % per_message
    else:  # MULTI_ONE_HOT
        x = argmax_run(action, env, agent, 0, 3)
        y = argmax_run(action, env, agent, 3, 3)
        if talks:
            msg = argmax_run(action, env, agent, 6, dim_c)
    set_discrete(env, agent, x, y, msg, u, comm, agent_u_range, agent_u_multiplier, talks, dim_c)



@numba.njit
def softplus(x):
    """``log(1 + exp(x))`` in float32, without overflow."""
    return max(x, f32(0.0)) + math.log1p(math.exp(-abs(x)))


@numba.njit
def collision_force(env, agent, pos, u, force, entity_size, entity_collide, entity_movable,
                    collision_force_multiplier, contact_margin):
    """The agent's force: its action plus the soft contact force from every overlapping entity,
    in float32 as VMAS computes it (a pair farther apart than the radii's sum is skipped
    before any square root)."""
    fx = u[env, agent, 0]
    fy = u[env, agent, 1]
    if entity_collide[agent] > 0.0 and entity_movable[agent] > 0.0:
        px = pos[env, agent, 0]
        py = pos[env, agent, 1]
        ra = f32(entity_size[agent])
        k = f32(contact_margin)
        multiplier = f32(collision_force_multiplier)
        for j in range(pos.shape[1]):
            if j == agent or entity_collide[j] <= 0.0:
                continue
            dx = px - pos[env, j, 0]
            dy = py - pos[env, j, 1]
            dmin = ra + f32(entity_size[j])
            d2 = dx * dx + dy * dy
            if d2 > dmin * dmin * f32(1.0001):
                continue
            dist = math.sqrt(d2)
            if dist < f32(1e-6) or dist > dmin:
                continue
            s = multiplier * softplus((dmin - dist) / k) * k / dist
            fx += s * dx
            fy += s * dy
    force[env, agent, 0] = fx
    force[env, agent, 1] = fy


@numba.njit
def advance(env, agent, pos, vel, force, entity_mass, entity_max_speed, sub_dt, damping, semidim):
    """Semi-implicit Euler in float32: ``vel = vel * damping + F / m * dt``, clamp the speed,
    ``pos += vel * dt``, clamped to the world's ``[-semidim[d], semidim[d]]`` (infinite: unbounded)."""
    m = f32(entity_mass[agent])
    dt = f32(sub_dt)
    vx = vel[env, agent, 0] * damping + force[env, agent, 0] / m * dt
    vy = vel[env, agent, 1] * damping + force[env, agent, 1] / m * dt
    vmax = f32(entity_max_speed[agent])
    if vmax > f32(0.0):
        speed = math.sqrt(vx * vx + vy * vy)
        if speed > vmax:
            vx = vx / speed * vmax
            vy = vy / speed * vmax
    vel[env, agent, 0] = vx
    vel[env, agent, 1] = vy
    x = pos[env, agent, 0] + vx * dt
    y = pos[env, agent, 1] + vy * dt
    pos[env, agent, 0] = min(max(x, -semidim[0]), semidim[0])
    pos[env, agent, 1] = min(max(y, -semidim[1]), semidim[1])


@numba.njit
def integrate_first(env, agent, pos, vel, force, entity_mass, entity_max_speed, entity_movable, sub_dt, drag,
                    semidim):
    """The first substep's integration (drag applied once per step, as VMAS does)."""
    if entity_movable[agent] > 0.0:
        advance(env, agent, pos, vel, force, entity_mass, entity_max_speed, sub_dt, f32(1.0 - drag), semidim)


@numba.njit
def integrate(env, agent, pos, vel, force, entity_mass, entity_max_speed, entity_movable, sub_dt, semidim):
    """A later substep's integration (no drag)."""
    if entity_movable[agent] > 0.0:
        advance(env, agent, pos, vel, force, entity_mass, entity_max_speed, sub_dt, f32(1.0), semidim)


@numba.njit
def mpe_done(env, agent, step_count, done, terminated, truncated, max_steps, terminated_truncated):
    """Agent 0 sets the done flags: MPE scenarios never end by themselves, only after ``max_steps``
    (0: never). That is ``terminated`` (VMAS's single done flag), or with
    ``terminated_truncated`` ``truncated``."""
    if agent != 0:
        return
    time_up = max_steps > 0 and step_count[env] >= max_steps
    done[env] = time_up
    terminated[env] = time_up and not terminated_truncated
    truncated[env] = time_up and terminated_truncated


@numba.njit
def quiet(env, agent, num_agents, vel, comm):
    """On reset (VMAS zeroes every entity's state): the agent's velocity and message, and those
    of the landmarks ``num_agents + agent``, ``+ 2 * num_agents``..."""
    for j in range(agent, vel.shape[1], num_agents):
        vel[env, j, 0] = 0.0
        vel[env, j, 1] = 0.0
    for i in range(comm.shape[2]):
        comm[env, agent, i] = 0.0


@numba.njit
def pad_observation(env, agent, observation, agent_observation_size):
    """Zero the agent's observation row past its own size (groups of smaller observations share
    the field with larger ones: the padding is never handed out, but every byte is written)."""
    for i in range(agent_observation_size[agent], observation.shape[2]):
        observation[env, agent, i] = 0.0
