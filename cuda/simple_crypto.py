"""VMAS MPE ``simple_crypto`` kernels (no physics: every agent is immovable).

Agents: eve ``0`` (the adversary), bob ``1`` (the listener), alice ``2`` (the speaker); no
landmarks. ``key`` and ``secret`` (``[E, dim_c]``, int32, each bit 0 or 1) are the env's
shared key and the secret alice must pass to bob; every message is ``comm`` (``[E, 3,
dim_c]``).
"""
import numba

from torchrl_warp.cuda.mpe import scatter_place
from torchrl_warp.cuda.rng import randint

__all__ = ["crypto_place", "crypto_observe", "crypto_reward"]

EVE, BOB, ALICE = 0, 1, 2


@numba.njit
def crypto_place(env, agent, seed, episode, num_agents, pos, key, secret, dim_c):
    """Every agent uniform in ``[-1, 1)^2`` (only drawn: nothing reads positions); eve draws
    the key and the secret, each bit uniform in ``{0, 1}``."""
    ep = episode[env]
    scatter_place(env, agent, seed, ep, num_agents, pos)
    if agent == EVE:
        for i in range(dim_c):
            key[env, i] = randint(seed, env, ep, 1, 0, i, 2)
            secret[env, i] = randint(seed, env, ep, 2, 0, i, 2)


@numba.njit
def crypto_observe(env, agent, comm, key, secret, observation, dim_c):
    """eve: alice's message (``dim_c``); bob: the key, alice's message; alice: the secret, the
    key (``2 * dim_c`` each)."""
    for i in range(dim_c):
        if agent == EVE:
            observation[env, agent, i] = comm[env, ALICE, i]
        elif agent == BOB:
            observation[env, agent, i] = key[env, i]
            observation[env, agent, dim_c + i] = comm[env, ALICE, i]
        else:
            observation[env, agent, i] = secret[env, i]
            observation[env, agent, dim_c + i] = key[env, i]


@numba.njit
def guess_error(env, who, comm, secret, dim_c):
    """``|message - secret|^2`` of agent ``who``'s message; 0 for an all-zero message (VMAS
    scores only agents that said something)."""
    said = False
    err = 0.0
    for i in range(dim_c):
        c = numba.float64(comm[env, who, i])
        said = said or c != 0.0
        d = c - secret[env, i]
        err += d * d
    return err if said else 0.0


@numba.njit
def crypto_reward(env, agent, comm, secret, reward, dim_c):
    """eve: minus her error; bob and alice (shared): eve's error minus bob's."""
    eve = guess_error(env, EVE, comm, secret, dim_c)
    if agent == EVE:
        reward[env, agent] = -eve
    else:
        reward[env, agent] = eve - guess_error(env, BOB, comm, secret, dim_c)
