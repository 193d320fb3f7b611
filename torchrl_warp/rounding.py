"""``mul_rn``: a product that rounds the same on every backend.

The CUDA compiler fuses ``a * b + c`` into one fused multiply-add (one rounding); the
CPU backend rounds the product and the sum apart. Results then differ in the last bit,
and a comparison of two such results (which of two agents is nearer) can flip.
``mul_rn(a, b)`` is ``a * b`` rounded to its own dtype, never fused: sums of
``mul_rn`` products are bit-identical on the CPU, the simulator and the GPU.

* CUDA: libdevice's ``fmul_rn`` (float32) or ``dmul_rn`` (float64);
* CPU and the CUDA simulator: ``a * b`` (Numba and NumPy never fuse).

Examples:
    >>> import numba
    >>> import numpy as np
    >>> @numba.njit
    ... def squared_distance(dx, dy):
    ...     return mul_rn(dx, dx) + mul_rn(dy, dy)
    >>> float(squared_distance(np.float32(3.0), np.float32(4.0)))
    25.0
"""
from __future__ import annotations


from numba import types
from numba.core.extending import overload

from torchrl_warp.simulator import simulator_enabled

__all__ = ["mul_rn"]


def mul_rn(a, b):
    """``a * b`` rounded on its own (see the module docstring); both of one float dtype."""
    return a * b


@overload(mul_rn, target="cpu")
def _mul_rn_cpu(a, b):
    def impl(a, b):
        return a * b

    return impl


def _register_cuda():
    from numba.cuda import libdevice
    from numba.cuda.extending import overload as cuda_overload

    @cuda_overload(mul_rn, target="cuda")
    def _mul_rn_cuda(a, b):
        if a == types.float32 and b == types.float32:
            return lambda a, b: libdevice.fmul_rn(a, b)
        if a == types.float64 and b == types.float64:
            return lambda a, b: libdevice.dmul_rn(a, b)
        raise TypeError(f"mul_rn: both arguments float32 or both float64, got {a} and {b}")


if not simulator_enabled():
    _register_cuda()
