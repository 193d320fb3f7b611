"""VMAS MPE ``simple`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

One agent (entity 0) and one landmark (entity 1); nothing collides.
"""
import numba

from torchrl_warp.cuda.mpe import scatter_place
from torchrl_warp.cuda.mpe_goal import write_relative, write_velocity

__all__ = ["simple_place", "simple_observe", "simple_reward"]


@numba.njit
def simple_place(env, agent, seed, episode, num_agents, pos):
    """The agent and the landmark uniform in ``[-1, 1)^2``."""
    scatter_place(env, agent, seed, episode[env], num_agents, pos)


@numba.njit
def simple_observe(env, agent, num_agents, pos, vel, observation):
    """Own velocity, then each landmark's position minus the own (4 floats)."""
    k = write_velocity(observation, env, agent, 0, vel)
    for lm in range(num_agents, pos.shape[1]):
        k = write_relative(observation, env, agent, k, pos, lm)


@numba.njit
def simple_reward(env, agent, num_agents, pos, reward):
    """Minus the squared distance to the landmark (VMAS's reward is squared here)."""
    dx = numba.float64(pos[env, agent, 0]) - pos[env, num_agents, 0]
    dy = numba.float64(pos[env, agent, 1]) - pos[env, num_agents, 1]
    reward[env, agent] = -(dx * dx + dy * dy)
