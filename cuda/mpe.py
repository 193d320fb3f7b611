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

__all__ = ["continuous_action", "discrete_action", "collision_force", "integrate_first", "integrate",
           "clamp_unit"]


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


@numba.njit
def continuous_action(env, agent, action, u, u_range, agent_u_multiplier):
    """The action (clamped to ``[-u_range, u_range]``, NaN as 0) times ``u_multiplier``."""
    m = agent_u_multiplier[agent]
    u[env, agent, 0] = numba.float32(clamp_unit(numba.float64(action[env, agent, 0]), u_range)) * m
    u[env, agent, 1] = numba.float32(clamp_unit(numba.float64(action[env, agent, 1]), u_range)) * m


@numba.njit
def discrete_component(c, u_range):
    """VMAS's 3-way component: 0 stays, 1 is ``-u_range``, 2 is ``+u_range``."""
    if c == 1:
        return -u_range
    if c == 2:
        return u_range
    return 0.0


@numba.njit
def discrete_action(env, agent, action, u, u_range, agent_u_multiplier):
    """A flat index in ``[0, 9)`` (clamped): x component ``a // 3``, y component ``a % 3``."""
    a = action[env, agent]
    if a < 0:
        a = 0
    if a > 8:
        a = 8
    m = agent_u_multiplier[agent]
    u[env, agent, 0] = discrete_component(a // 3, u_range) * m
    u[env, agent, 1] = discrete_component(a % 3, u_range) * m


@numba.njit
def softplus(x):
    """``log(1 + exp(x))``, without overflow."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@numba.njit
def collision_force(env, agent, pos, u, force, entity_size, entity_collide, entity_movable,
                    collision_force_multiplier, contact_margin):
    """The agent's force: its action plus the soft contact force from every overlapping entity."""
    fx = numba.float64(u[env, agent, 0])
    fy = numba.float64(u[env, agent, 1])
    if entity_collide[agent] > 0.0 and entity_movable[agent] > 0.0:
        px = numba.float64(pos[env, agent, 0])
        py = numba.float64(pos[env, agent, 1])
        ra = entity_size[agent]
        k = contact_margin
        for j in range(pos.shape[1]):
            if j == agent or entity_collide[j] <= 0.0:
                continue
            dx = px - pos[env, j, 0]
            dy = py - pos[env, j, 1]
            dist = math.sqrt(dx * dx + dy * dy)
            dmin = ra + entity_size[j]
            if dist < 1e-6 or dist > dmin:
                continue
            s = collision_force_multiplier * softplus((dmin - dist) / k) * k / dist
            fx += s * dx
            fy += s * dy
    force[env, agent, 0] = fx
    force[env, agent, 1] = fy


@numba.njit
def advance(env, agent, pos, vel, force, entity_mass, entity_max_speed, sub_dt, damping):
    """Semi-implicit Euler: ``vel = vel * damping + F / m * dt``, clamp the speed, ``pos += vel * dt``."""
    m = entity_mass[agent]
    vx = numba.float64(vel[env, agent, 0]) * damping + force[env, agent, 0] / m * sub_dt
    vy = numba.float64(vel[env, agent, 1]) * damping + force[env, agent, 1] / m * sub_dt
    vmax = entity_max_speed[agent]
    if vmax > 0.0:
        speed = math.sqrt(vx * vx + vy * vy)
        if speed > vmax:
            vx = vx / speed * vmax
            vy = vy / speed * vmax
    vel[env, agent, 0] = vx
    vel[env, agent, 1] = vy
    pos[env, agent, 0] = pos[env, agent, 0] + vx * sub_dt
    pos[env, agent, 1] = pos[env, agent, 1] + vy * sub_dt


@numba.njit
def integrate_first(env, agent, pos, vel, force, entity_mass, entity_max_speed, entity_movable, sub_dt, drag):
    """The first substep's integration (drag applied once per step, as VMAS does)."""
    if entity_movable[agent] > 0.0:
        advance(env, agent, pos, vel, force, entity_mass, entity_max_speed, sub_dt, 1.0 - drag)


@numba.njit
def integrate(env, agent, pos, vel, force, entity_mass, entity_max_speed, entity_movable, sub_dt):
    """A later substep's integration (no drag)."""
    if entity_movable[agent] > 0.0:
        advance(env, agent, pos, vel, force, entity_mass, entity_max_speed, sub_dt, 1.0)
