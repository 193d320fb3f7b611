"""The environments' kernels, installed as ``torchrl_warp.cuda``.

Every function here is a plain ``@numba.njit`` function. The framework
(:mod:`torchrl_warp.codegen`) compiles the same source for the GPU
(``numba.cuda``), for the CPU (``numba.njit(parallel=True)``) and for Numba's
CUDA simulator.

* Phase functions take ``(env, agent, ...)``, index state arrays, and write only
  their own agent's entries (per-env values are written by one agent).
* Helpers such as :func:`~torchrl_warp.cuda.rng.uniform` take scalars only.
* ``rng``: the counter-based RNG; ``tag``, ``cartpole``: one module per env.
"""
# When Python runs from the repository root, this folder is importable as a
# top-level ``cuda`` and would hide NVIDIA's ``cuda`` namespace package
# (``cuda.bindings``, ``cuda.core``) that numba-cuda imports. Extending the path
# keeps those importable in that case; installed as ``torchrl_warp.cuda`` it is a no-op.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
