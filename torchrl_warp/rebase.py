"""``rebase(array, nbytes)``: the same array ``nbytes`` further on in memory, in a kernel.

A CUDA graph replays a kernel with the arguments it was captured with, device
pointers included. An environment that hands its output buffer to the caller (so as
not to copy it) must write the next outputs somewhere else, yet replay the same
graph. So the generated CUDA driver takes the distance from the buffer it was
captured with to the current one (``output_shift``, an int64 in device memory,
updated before each launch) and moves every output array there first::

    observation = rebase(observation, output_shift[0])

Shape and strides stay; only the data pointer moves (the caller keeps ``nbytes``
within an allocation laid out like the captured one). ``rebase`` is a Numba
intrinsic, for compiled code (CUDA or CPU): the driver calls it directly (as an
overload inlined into the driver, Numba-CUDA 0.30 dropped the stores through the
moved array). Where kernels run as Python (the CUDA simulator), the driver gets
:func:`rebase_in_python` instead, and views of the current buffer.

Examples:
    >>> import numba
    >>> import numpy as np
    >>> @numba.njit
    ... def write_one(array, shift):
    ...     rebase(array, shift[0])[1] = 1.0
    >>> buffer = np.zeros(6, np.float32)
    >>> write_one(buffer[:3], np.array([12], np.int64))  # 12 bytes: 3 float32 further
    >>> buffer.tolist()
    [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic
from numba.core.imputils import impl_ret_borrowed
from numba.np.arrayobj import make_array

__all__ = ["rebase", "rebase_in_python"]


@intrinsic
def rebase(typingctx, array, nbytes):
    """``array`` moved ``nbytes`` bytes on in memory (same shape, strides, dtype)."""
    if not isinstance(array, types.Array) or not isinstance(nbytes, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        value, shift = args
        moved = make_array(sig.args[0])(context, builder, value=value)
        # a byte offset from the data pointer (a GEP: the pointer stays derived from it)
        byte = ir.IntType(8).as_pointer(moved.data.type.addrspace)
        address = builder.gep(builder.bitcast(moved.data, byte), [shift])
        moved.data = builder.bitcast(address, moved.data.type)
        # a new reference to the same memory (NRT counts references on the CPU)
        return impl_ret_borrowed(context, builder, sig.return_type, moved._getvalue())

    return array(array, nbytes), codegen


def rebase_in_python(array, nbytes):
    """:func:`rebase` where kernels run as Python (the CUDA simulator): outputs are passed
    there as views of the current buffer, so only ``nbytes == 0`` is valid."""
    if nbytes != 0:
        raise ValueError(f"rebase: the CUDA simulator passes current views; got a shift of {nbytes} bytes")
    return array
