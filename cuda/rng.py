"""A counter-based random number generator for kernels.

Random numbers are a pure function of ``(seed, env, episode, step, agent, draw)``:
no RNG state lives in memory, and every backend (CUDA, CPU, simulator) draws the
same numbers for the same key. The hash is SplitMix64's finalizer, chained over
the key's parts.

Examples:
    >>> from torchrl_warp.cuda.rng import uniform
    >>> u = uniform(7, 0, 1, 0, 3, 0)   # seed 7, env 0, episode 1, step 0, agent 3, draw 0
    >>> 0.0 <= u < 1.0
    True
"""
import numba
import numpy as np

__all__ = ["mix64", "random_bits", "uniform", "randint"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_SHIFT30 = np.uint64(30)
_SHIFT27 = np.uint64(27)
_SHIFT31 = np.uint64(31)
_SHIFT40 = np.uint64(40)
_INV_2_24 = np.float32(1.0 / (1 << 24))


@numba.njit(cache=False)
def mix64(x):
    """SplitMix64: a bijective, well-mixing hash of one uint64."""
    z = numba.uint64(x) + _GOLDEN
    z = (z ^ (z >> _SHIFT30)) * _MUL1
    z = (z ^ (z >> _SHIFT27)) * _MUL2
    return z ^ (z >> _SHIFT31)


@numba.njit(cache=False)
def random_bits(seed, env, episode, step, agent, draw):
    """64 random bits for the key ``(seed, env, episode, step, agent, draw)``."""
    h = mix64(numba.uint64(seed) ^ mix64(numba.uint64(env)))
    h = mix64(h ^ numba.uint64(episode))
    h = mix64(h ^ numba.uint64(step))
    h = mix64(h ^ numba.uint64(agent))
    return mix64(h ^ numba.uint64(draw))


@numba.njit(cache=False)
def uniform(seed, env, episode, step, agent, draw):
    """A float32 uniform in ``[0, 1)`` (24 random bits) for the given key."""
    bits = random_bits(seed, env, episode, step, agent, draw) >> _SHIFT40
    return numba.float32(bits) * _INV_2_24


@numba.njit(cache=False)
def randint(seed, env, episode, step, agent, draw, n):
    """An integer uniform in ``[0, n)`` for the given key (``n`` well below 2**24)."""
    k = numba.int64(uniform(seed, env, episode, step, agent, draw) * n)
    return min(k, n - 1)
