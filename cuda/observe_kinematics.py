"""The observation of envs that observe their whole state: a copy of ``kinematics``.

CartPole and both MountainCars keep their state in the field ``kinematics`` and hand
out a copy of it (the caller may edit the observation without changing the env).

Examples:
    >>> import numpy as np
    >>> kinematics, observation = np.ones((2, 1, 4), np.float32), np.zeros((2, 1, 4), np.float32)
    >>> observe_kinematics(1, 0, kinematics, observation)
    >>> observation[:, 0, 0].tolist()
    [0.0, 1.0]
"""
import numba

__all__ = ["observe_kinematics"]


@numba.njit
def observe_kinematics(env, agent, kinematics, observation):
    """Observe phase: the agent's observation row is its ``kinematics`` row."""
    for i in range(kinematics.shape[2]):
        observation[env, agent, i] = kinematics[env, agent, i]
