"""Numba kernels of torchrl-warp's environments, and shared device helpers.

Every function here is a plain ``@numba.njit`` function: the framework
(:mod:`torchrl_warp.codegen`) compiles the same source for the GPU
(``numba.cuda``), for the CPU (``numba.njit(parallel=True)``) and for Numba's
CUDA simulator. Phase functions take ``(env, agent, ...)`` and index state
arrays; helpers such as :func:`~torchrl_warp.cuda.rng.uniform` take scalars only.
"""
