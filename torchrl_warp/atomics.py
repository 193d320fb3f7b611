"""``atomic_add`` for phase functions, on every backend.

Several agents of one env may add to one entry in the same phase (say, count the
agents of a grid cell). On the GPU they run in parallel, so a plain ``a[i] += v``
loses updates; ``atomic_add(array, index, value)`` adds ``value`` to
``array[index]`` atomically and returns the value it replaced (which tells every
caller a distinct slot when counting). One name, three implementations:

* CUDA (``cuda.jit`` of the generated kernel): ``cuda.atomic.add``;
* CPU (``numba.njit(parallel=True)``: an env's agents run one after another inside
  one ``prange`` iteration, so no two threads touch one env's data): a plain
  read-modify-write;
* the CUDA simulator (phases run as Python on fake device arrays): the
  simulator's ``cuda.atomic.add``, which holds a lock.

``index`` is an int or a tuple of ints; ``value`` is cast to the array's dtype
(int32, uint32, int64, uint64, float32 or float64 on CUDA). Float additions in a
varying order round differently: add integers where results must be reproducible.

Examples:
    >>> import numba
    >>> import numpy as np
    >>> from torchrl_warp.atomics import atomic_add
    >>> @numba.njit
    ... def count(env, agent, cell, cell_count, slot):   # a phase function
    ...     slot[env, agent] = atomic_add(cell_count, (env, cell[env, agent]), 1)
    >>> cell, cell_count, slot = np.array([[1, 0, 1]]), np.zeros((1, 2), np.int32), np.zeros((1, 3), np.int32)
    >>> for agent in range(3):
    ...     count(0, agent, cell, cell_count, slot)
    >>> cell_count.tolist(), slot.tolist()
    ([[1, 2]], [[0, 0, 1]])
"""
from __future__ import annotations


from numba.core.extending import overload

from torchrl_warp.simulator import simulator_enabled

__all__ = ["atomic_add", "atomic_count"]


def atomic_add(array, index, value):
    """Add ``value`` to ``array[index]`` atomically; return the previous value.

    This Python body runs where phases run as Python: in the CUDA simulator it
    uses the simulator's atomic (a lock); elsewhere a plain read-modify-write.
    Compiled code gets the target's overload instead (see the module docstring).
    """
    context = _simulator_kernel_context()
    if context is not None:
        return context.atomic.add(array, index, value)
    old = array[index]
    array[index] = old + value
    return old


def atomic_count(array, index):
    """Add 1 to ``array[index]`` (an int index) for every agent that calls it; return nothing.

    Where many agents count into one entry (say, the runners left in an env), this is
    cheaper than ``atomic_add(array, index, 1)`` on the GPU: the lanes of a warp that
    call it with the same index add their number once (one atomic per warp, not per lane).
    """
    atomic_add(array, index, 1)


def _simulator_kernel_context():
    """The simulator's fake ``cuda`` module while a simulated kernel runs, else None."""
    if not simulator_enabled():
        return None
    from numba.cuda.simulator.kernel import _get_kernel_context

    return _get_kernel_context()


@overload(atomic_add, target="cpu")
def _atomic_add_cpu(array, index, value):
    def impl(array, index, value):
        old = array[index]
        array[index] = old + value
        return old

    return impl


def _register_cuda():
    from numba import cuda
    from numba.cuda.extending import overload as cuda_overload

    @cuda_overload(atomic_add, target="cuda")
    def _atomic_add_cuda(array, index, value):
        def impl(array, index, value):
            return cuda.atomic.add(array, index, value)

        return impl


@overload(atomic_count, target="cpu")
def _atomic_count_cpu(array, index):
    def impl(array, index):
        array[index] += 1

    return impl


def _register_cuda_count():
    from numba import cuda
    from numba.cuda.extending import overload as cuda_overload

    @cuda_overload(atomic_count, target="cuda")
    def _atomic_count_cuda(array, index):
        def impl(array, index):
            peers = cuda.match_any_sync(cuda.activemask(), index)  # the calling lanes with this index
            if peers & cuda.lanemask_lt() == 0:  # the lowest of them adds for all
                cuda.atomic.add(array, index, cuda.popc(peers))

        return impl


if not simulator_enabled():
    _register_cuda()
    _register_cuda_count()
