"""VMAS MPE ``simple_speaker_listener`` kernels (physics in :mod:`torchrl_warp.cuda.mpe`).

Entities: the speaker ``0`` (immovable, talks), the listener ``1`` (moves, silent),
landmarks ``2..4``. ``goal`` (``[E]``, int32) is the index (0-2) of the landmark the
listener must reach; only the speaker sees it, as that landmark's colour.
"""
import numba

from torchrl_warp.cuda.mpe import entity_distance, scatter_place
from torchrl_warp.cuda.rng import randint

__all__ = ["listener_place", "listener_observe", "listener_reward"]

SPEAKER, LISTENER, FIRST_LANDMARK = 0, 1, 2


@numba.njit
def listener_place(env, agent, seed, episode, num_agents, pos, goal, landmark_color):
    """Every agent and landmark uniform in ``[-1, 1)^2``; the speaker draws the goal landmark."""
    ep = episode[env]
    scatter_place(env, agent, seed, ep, num_agents, pos)
    if agent == SPEAKER:
        goal[env] = randint(seed, env, ep, 1, 0, 0, landmark_color.shape[0])


@numba.njit
def listener_observe(env, agent, pos, vel, comm, goal, observation, landmark_color, dim_c):
    """Speaker: the goal landmark's colour (3). Listener: own velocity, each landmark's
    position minus the own, the speaker's message (``2 + 2 * 3 + dim_c``)."""
    if agent == SPEAKER:
        g = goal[env]
        for k in range(3):
            observation[env, agent, k] = landmark_color[g, k]
        return
    observation[env, agent, 0] = vel[env, agent, 0]
    observation[env, agent, 1] = vel[env, agent, 1]
    k = 2
    for lm in range(FIRST_LANDMARK, pos.shape[1]):
        observation[env, agent, k] = pos[env, lm, 0] - pos[env, agent, 0]
        observation[env, agent, k + 1] = pos[env, lm, 1] - pos[env, agent, 1]
        k += 2
    for i in range(dim_c):
        observation[env, agent, k + i] = comm[env, SPEAKER, i]


@numba.njit
def listener_reward(env, agent, num_agents, pos, goal, reward):
    """Shared: minus the listener's distance to the goal landmark, once per agent (VMAS sums
    the same term over its agents: ``-2 |listener - goal|``)."""
    reward[env, agent] = -num_agents * entity_distance(pos, env, LISTENER, FIRST_LANDMARK + goal[env])
