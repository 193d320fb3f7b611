"""Acrobot kernels: gymnasium's Acrobot-v1 dynamics, one agent per env.

Physics runs in float64 (as gymnasium does) on float32 state, so a step agrees with
gymnasium's from the same state to float32 rounding: the same equations in the same
order (``_dsdt``), one fourth-order Runge-Kutta step of ``dt`` (``rk4`` with
``t = [0, dt]``), then the angles wrapped into ``[-pi, pi]`` and the velocities bounded.

The state is ``kinematics[env, 0]``: ``theta1``, ``theta2`` (relative to link 1),
``dtheta1``, ``dtheta2``. The observation is ``[cos theta1, sin theta1, cos theta2,
sin theta2, dtheta1, dtheta2]``, computed from the float64 state before it is stored.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["reset_acrobot", "observe_acrobot", "step_acrobot", "acrobot_dsdt", "wrap"]

_GRAVITY = 9.8  # gymnasium's _dsdt hard-codes it


@numba.njit
def wrap(x, m, M):
    """gymnasium's ``wrap``: ``x`` shifted by multiples of ``M - m`` into ``[m, M]``.

    Its loops, so the result is gymnasium's to the bit; a value hundreds of turns out
    (gymnasium would loop for ages, a GPU thread too) is first brought near with a
    floor; NaN and infinities come out NaN."""
    diff = M - m
    if not (m - 64.0 * diff < x < M + 64.0 * diff):
        x = x - diff * math.floor((x - m) / diff)
    while x > M:
        x = x - diff
    while x < m:
        x = x + diff
    return x


@numba.njit
def acrobot_dsdt(theta1, theta2, dtheta1, dtheta2, a, LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1,
                 LINK_COM_POS_2, LINK_MOI, nips):
    """gymnasium's ``_dsdt``: the state's time derivative (the torque's, 0, left out)."""
    m1 = LINK_MASS_1
    m2 = LINK_MASS_2
    l1 = LINK_LENGTH_1
    lc1 = LINK_COM_POS_1
    lc2 = LINK_COM_POS_2
    I1 = LINK_MOI
    I2 = LINK_MOI
    g = _GRAVITY
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * math.cos(theta2)) + I1 + I2
    d2 = m2 * (lc2**2 + l1 * lc2 * math.cos(theta2)) + I2
    phi2 = m2 * lc2 * g * math.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * math.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * math.sin(theta2)
        + (m1 * lc1 + m2 * l1) * g * math.cos(theta1 - math.pi / 2)
        + phi2
    )
    if nips:
        ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * lc2**2 + I2 - d2**2 / d1)
    else:
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * math.sin(theta2) - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@numba.njit
def reset_acrobot(env, agent, seed, episode, kinematics):
    """Every state variable uniform in ``[-0.1, 0.1)`` (gymnasium's default bounds)."""
    for i in range(4):
        kinematics[env, agent, i] = uniform(seed, env, episode[env], 0, agent, i) * 0.2 - 0.1


@numba.njit
def observe_acrobot(env, agent, kinematics, observation):
    """Observe phase: ``cos``/``sin`` of both angles and both angular velocities."""
    theta1 = numba.float64(kinematics[env, agent, 0])
    theta2 = numba.float64(kinematics[env, agent, 1])
    observation[env, agent, 0] = math.cos(theta1)
    observation[env, agent, 1] = math.sin(theta1)
    observation[env, agent, 2] = math.cos(theta2)
    observation[env, agent, 3] = math.sin(theta2)
    observation[env, agent, 4] = kinematics[env, agent, 2]
    observation[env, agent, 5] = kinematics[env, agent, 3]


@numba.njit
def step_acrobot(
    env, agent, seed, episode, step_count, action, kinematics, observation, reward, done, terminated, truncated,
    dt, LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, MAX_VEL_1, MAX_VEL_2,
    torque_noise_max, nips, max_steps,
):
    """One RK4 step under torque ``action - 1`` (index clamped to ``[0, 2]``), plus uniform
    noise in ``[-torque_noise_max, torque_noise_max)`` when that is positive."""
    a = action[env, agent]
    a = 0 if a < 0 else (2 if a > 2 else a)
    torque = numba.float64(a) - 1.0
    if torque_noise_max > 0:
        u = numba.float64(uniform(seed, env, episode[env], step_count[env], agent, 0))
        torque += u * (2.0 * torque_noise_max) - torque_noise_max
    y0 = numba.float64(kinematics[env, agent, 0])
    y1 = numba.float64(kinematics[env, agent, 1])
    y2 = numba.float64(kinematics[env, agent, 2])
    y3 = numba.float64(kinematics[env, agent, 3])
    # gymnasium's rk4(derivs, s_augmented, [0, dt]): one step, the torque held
    dt2 = dt / 2.0
    k1 = acrobot_dsdt(y0, y1, y2, y3, torque, LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1,
                      LINK_COM_POS_2, LINK_MOI, nips)
    k2 = acrobot_dsdt(y0 + dt2 * k1[0], y1 + dt2 * k1[1], y2 + dt2 * k1[2], y3 + dt2 * k1[3], torque,
                      LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, nips)
    k3 = acrobot_dsdt(y0 + dt2 * k2[0], y1 + dt2 * k2[1], y2 + dt2 * k2[2], y3 + dt2 * k2[3], torque,
                      LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, nips)
    k4 = acrobot_dsdt(y0 + dt * k3[0], y1 + dt * k3[1], y2 + dt * k3[2], y3 + dt * k3[3], torque,
                      LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, nips)
    h = dt / 6.0
    theta1 = y0 + h * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
    theta2 = y1 + h * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    dtheta1 = y2 + h * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
    dtheta2 = y3 + h * (k1[3] + 2 * k2[3] + 2 * k3[3] + k4[3])
    theta1 = wrap(theta1, -math.pi, math.pi)
    theta2 = wrap(theta2, -math.pi, math.pi)
    dtheta1 = min(max(dtheta1, -MAX_VEL_1), MAX_VEL_1)  # gymnasium's bound
    dtheta2 = min(max(dtheta2, -MAX_VEL_2), MAX_VEL_2)
    kinematics[env, agent, 0] = theta1
    kinematics[env, agent, 1] = theta2
    kinematics[env, agent, 2] = dtheta1
    kinematics[env, agent, 3] = dtheta2
    observation[env, agent, 0] = math.cos(theta1)
    observation[env, agent, 1] = math.sin(theta1)
    observation[env, agent, 2] = math.cos(theta2)
    observation[env, agent, 3] = math.sin(theta2)
    observation[env, agent, 4] = dtheta1
    observation[env, agent, 5] = dtheta2
    term = -math.cos(theta1) - math.cos(theta2 + theta1) > 1.0
    trunc = step_count[env] >= max_steps
    reward[env, agent] = 0.0 if term else -1.0
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc
