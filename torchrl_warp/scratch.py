"""``scratch_row``: per-agent working memory for phase functions, fast on the GPU.

A phase that keeps a small array while it works (say, the sorted list of the k
nearest agents found so far) can keep it in a state field ``[num_envs, num_agents,
n]``, one row per agent. On the GPU that row is global memory: each write goes out
to L2, and reading it back in the next loop iteration waits for L2. ``scratch_row(
array, env, agent)`` gives the phase an ``n``-long buffer to work in instead:

* CUDA: a thread-private array (local memory, cached in L1 with write-back) of
  :data:`LOCAL_LIMIT` entries of ``array``'s dtype when ``n <= LOCAL_LIMIT``, else the
  row ``array[env, agent]`` itself;
* CPU and the CUDA simulator: the row ``array[env, agent]`` itself (a view; no
  allocation per call).

So its contents are undefined when the phase gets it, and the row of ``array`` is
unspecified after the phase wrote to the buffer: a phase writes what it must keep to
a state field explicitly. ``array`` must be 3-D (``[env, agent, n]``).

Examples:
    >>> import numba
    >>> import numpy as np
    >>> @numba.njit
    ... def running_sum(env, agent, values, scratch, total):   # a phase function
    ...     buf = scratch_row(scratch, env, agent)
    ...     acc = 0.0
    ...     for j in range(values.shape[2]):
    ...         acc += values[env, agent, j]
    ...         buf[j] = acc
    ...     total[env, agent] = buf[values.shape[2] - 1]
    >>> values, total = np.ones((1, 2, 3)), np.zeros((1, 2))
    >>> for agent in range(2):
    ...     running_sum(0, agent, values, np.zeros((1, 2, 3)), total)
    >>> total.tolist()
    [[3.0, 3.0]]
"""
from __future__ import annotations


from numba.core.extending import overload

from torchrl_warp.simulator import simulator_enabled

__all__ = ["scratch_row", "LOCAL_LIMIT"]

#: longest row that CUDA kernels keep in thread-private memory (longer rows stay global).
#: Numba zero-fills a local array once per thread and kernel: 16 entries keep that small
#: and cover the usual k of a k-nearest list (Tag: 2 or 10)
LOCAL_LIMIT = 16


def scratch_row(array, env, agent):
    """A buffer of ``array.shape[2]`` entries for this agent's work in this phase call.

    This Python body (the CUDA simulator's) returns the row itself; compiled code gets
    the target's overload (see the module docstring).
    """
    return array[env, agent]


@overload(scratch_row, target="cpu")
def _scratch_row_cpu(array, env, agent):
    def impl(array, env, agent):
        return array[env, agent]

    return impl


def _register_cuda():
    from numba import cuda
    from numba.cuda.extending import overload as cuda_overload

    # inline="always": the local array must be allocated in the calling phase's frame,
    # not in a callee's that has returned
    @cuda_overload(scratch_row, target="cuda", inline="always")
    def _scratch_row_cuda(array, env, agent):
        dtype = array.dtype

        def impl(array, env, agent):
            if array.shape[2] <= LOCAL_LIMIT:
                return cuda.local.array(LOCAL_LIMIT, dtype)
            return array[env, agent]

        return impl


if not simulator_enabled():
    _register_cuda()
