"""Whether Numba runs its CUDA simulator in this process (``NUMBA_ENABLE_CUDASIM``, which
must be set before numba is imported).

The device helpers (:mod:`~torchrl_warp.atomics`, :mod:`~torchrl_warp.scratch`,
:mod:`~torchrl_warp.rounding`) register their CUDA versions only outside the simulator;
the backends launch through it when it is on.

Examples:
    >>> isinstance(simulator_enabled(), bool)
    True
"""
from __future__ import annotations

import os

__all__ = ["simulator_enabled"]


def simulator_enabled() -> bool:
    """Whether Numba runs in CUDA-simulator mode in this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
