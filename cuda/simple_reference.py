"""VMAS MPE ``simple_reference`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

Entities: agents ``0`` and ``1``, landmarks ``2..4``. ``goal`` (``[E, 2]``, int32): agent
``i``'s goal landmark (0-2), the one the *other* agent must reach; agent ``i`` sees only its
colour, and tells the other where to go.
"""
import numba

from torchrl_warp.cuda.mpe import entity_distance, scatter_place
from torchrl_warp.cuda.rng import randint

__all__ = ["reference_place", "reference_observe", "reference_reward"]


@numba.njit
def reference_place(env, agent, seed, episode, num_agents, pos, goal, landmark_color):
    """Every agent and landmark uniform in ``[-1, 1)^2``; each agent draws its goal landmark."""
    ep = episode[env]
    scatter_place(env, agent, seed, ep, num_agents, pos)
    goal[env, agent] = randint(seed, env, ep, 1, agent, 0, landmark_color.shape[0])


@numba.njit
def reference_observe(env, agent, num_agents, pos, vel, comm, goal, observation, landmark_color, dim_c):
    """Own velocity, each landmark's position minus the own, the own goal's colour, the other
    agents' messages (``2 + 2 * 3 + 3 + dim_c``)."""
    observation[env, agent, 0] = vel[env, agent, 0]
    observation[env, agent, 1] = vel[env, agent, 1]
    k = 2
    for lm in range(num_agents, pos.shape[1]):
        observation[env, agent, k] = pos[env, lm, 0] - pos[env, agent, 0]
        observation[env, agent, k + 1] = pos[env, lm, 1] - pos[env, agent, 1]
        k += 2
    g = goal[env, agent]
    for i in range(3):
        observation[env, agent, k + i] = landmark_color[g, i]
    k += 3
    for other in range(num_agents):
        if other != agent:
            for i in range(dim_c):
                observation[env, agent, k + i] = comm[env, other, i]
            k += dim_c


@numba.njit
def reference_reward(env, agent, num_agents, pos, goal, reward):
    """Shared: minus, for each agent, the other agent's distance to that agent's goal landmark."""
    total = 0.0
    for a in range(num_agents):
        other = (a + 1) % num_agents
        total -= entity_distance(pos, env, other, num_agents + goal[env, a])
    reward[env, agent] = total
