"""CartPole kernels: gymnasium's CartPole-v1 dynamics, one agent per env.

Physics runs in float64 (as gymnasium does) on float32 state, so a step agrees
with gymnasium's from the same state to float32 rounding.

The state is ``kinematics[env, 0]``: cart position, cart velocity, pole angle, pole
angular velocity; each step and reset writes it, and a copy of it as the observation.
"""
import math

import numba

from torchrl_warp.cuda.rng import uniform

__all__ = ["reset_cartpole", "step_cartpole"]


@numba.njit
def reset_cartpole(env, agent, seed, episode, kinematics):
    """Every state variable uniform in ``[-0.05, 0.05)``."""
    for i in range(4):
        kinematics[env, agent, i] = uniform(seed, env, episode[env], 0, agent, i) * 0.1 - 0.05


@numba.njit
def step_cartpole(
    env, agent, step_count, action, kinematics, observation, reward, done, terminated, truncated,
    gravity, masscart, masspole, length, force_mag, tau, x_threshold,
    theta_threshold_radians, max_steps,
):
    """One Euler step; action 1 pushes right, anything else pushes left."""
    x = numba.float64(kinematics[env, agent, 0])
    x_dot = numba.float64(kinematics[env, agent, 1])
    theta = numba.float64(kinematics[env, agent, 2])
    theta_dot = numba.float64(kinematics[env, agent, 3])
    force = force_mag if action[env, agent] == 1 else -force_mag
    total_mass = masspole + masscart
    polemass_length = masspole * length
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (
        length * (4.0 / 3.0 - masspole * costheta * costheta / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x = x + tau * x_dot
    x_dot = x_dot + tau * xacc
    theta = theta + tau * theta_dot
    theta_dot = theta_dot + tau * thetaacc
    kinematics[env, agent, 0] = x
    kinematics[env, agent, 1] = x_dot
    kinematics[env, agent, 2] = theta
    kinematics[env, agent, 3] = theta_dot
    for i in range(4):
        observation[env, agent, i] = kinematics[env, agent, i]
    term = x < -x_threshold or x > x_threshold or theta < -theta_threshold_radians or theta > theta_threshold_radians
    trunc = step_count[env] >= max_steps
    reward[env, agent] = 1.0
    terminated[env] = term
    truncated[env] = trunc
    done[env] = term or trunc
