"""Moving an env's output rows between a collector's per-step slots and its batches.

A :class:`~torchrl_warp.graphed_collector.GraphedCollector` that hands out batches of the
caller's own keeps one output buffer per step (``slots[t + 1]``: step ``t``'s outputs, which
the masked reset then rewrites in place for the envs that ended) and, before that reset,
the rows of those envs as the step left them (``terminal[t]``, ``ended[t]`` saying which).
Two operations do that, each on one *part* of the buffer (its float rows and its flag rows,
``[..., num_envs, width]``, see :class:`~torchrl_warp.outputs.Outputs`):

* :func:`save_ended_rows`: ``terminal[e] = slot[e]`` for each env ``e`` that ended (sparse:
  only those rows are read and written);
* :func:`batch_rows`: the batch's rows, env-major, in one pass over the slots: the start rows
  ``root[e, t] = slots[t, e]`` and the step's rows ``next[e, t] = slots[t + 1, e]``, or
  ``terminal[t, e]`` where the env ended (each slot is read once for both).

On a CUDA env both are Numba kernels launched on torch's current stream (so a
``save_ended_rows`` inside a graph capture is part of the graph, and neither waits for the
host); in the CUDA simulator the same kernels run simulated; on the CPU they are torch ops.

Examples:
    >>> import torch
    >>> slots = torch.arange(3 * 2 * 2, dtype=torch.int32).view(3, 2, 2)  # T = 2 steps, 2 envs, width 2
    >>> terminal = torch.full((2, 2, 2), -1, dtype=torch.int32)
    >>> ended = torch.tensor([[False, True], [False, False]])  # env 1 ended at step 0
    >>> root, nxt = torch.empty(2, 2, 2, dtype=torch.int32), torch.empty(2, 2, 2, dtype=torch.int32)
    >>> batch_rows(slots, terminal, ended, root, nxt, backend="cpu")
    >>> nxt[1].tolist()  # env 1: step 0's row is the terminal one, step 1's is slot 2's
    [[-1, -1], [10, 11]]
    >>> root[1].tolist()
    [[2, 3], [6, 7]]
"""
from __future__ import annotations

import functools

import torch

__all__ = ["save_ended_rows", "batch_rows"]

#: threads per block of the kernels (columns of a row per block)
_THREADS = 128


def save_ended_rows(slot: torch.Tensor, terminal: torch.Tensor, ended: torch.Tensor, backend) -> None:
    """``terminal[e] = slot[e]`` (rows ``[num_envs, width]``) for each env ``e`` where ``ended[e]``."""
    kind = _kind(backend)
    if kind == "torch":
        terminal.copy_(torch.where(ended.unsqueeze(-1), slot, terminal))  # no host sync (a mask's size)
        return
    kernels, launch = _kernels(kind == "cudasim"), _launcher(backend, kind)
    launch(kernels[0], (slot.shape[0],), _threads(slot.shape[1], kind), slot, terminal, ended)


def batch_rows(slots: torch.Tensor, terminal: torch.Tensor, ended: torch.Tensor, root: torch.Tensor,
               nxt: torch.Tensor, backend) -> None:
    """A batch's rows from ``slots`` ``[T + 1, E, W]``, ``terminal`` ``[T, E, W]`` and ``ended``
    ``[T, E]``: ``root`` ``[E, T, W]`` (``slots[t, e]``) and ``nxt`` ``[E, T, W]``
    (``slots[t + 1, e]``, or ``terminal[t, e]`` where ``ended[t, e]``)."""
    kind = _kind(backend)
    if kind == "torch":
        root.copy_(slots[:-1].transpose(0, 1))
        nxt.copy_(torch.where(ended.transpose(0, 1).unsqueeze(-1), terminal.transpose(0, 1),
                              slots[1:].transpose(0, 1)))
        return
    threads = _threads(slots.shape[2], kind)
    kernels, launch = _kernels(kind == "cudasim"), _launcher(backend, kind)
    launch(kernels[1], (slots.shape[1], -(-slots.shape[2] // threads)), threads, slots, terminal, ended, root, nxt)


def _kind(backend) -> str:
    name = backend if isinstance(backend, str) else backend.name
    return name if name in ("cuda", "cudasim") else "torch"


def _threads(width: int, kind: str) -> int:
    if kind == "cudasim":  # every simulated thread is a Python thread
        return min(width, 8)
    return min(_THREADS, max(32, -(-width // 32) * 32))


def _launcher(backend, kind: str):
    if kind == "cudasim":
        def launch(kernel, grid, threads, *tensors):
            kernel[grid, threads](*(backend.view(t) for t in tensors))
        return launch

    def launch(kernel, grid, threads, *tensors):
        with backend._gpu:
            kernel[grid, threads, backend._stream()](*(backend.view(t) for t in tensors))
    return launch


#: Numba's CUDA module, imported on first use (:func:`_kernels`): the kernels below read it as a
#: global, which the CUDA simulator swaps for its own while it runs them
cuda = None


def _save_rows(slot, terminal, ended):
    e = cuda.blockIdx.x
    if not ended[e]:
        return
    for c in range(cuda.threadIdx.x, slot.shape[1], cuda.blockDim.x):
        terminal[e, c] = slot[e, c]


def _rows(slots, terminal, ended, root, nxt):
    e = cuda.blockIdx.x
    c = cuda.blockIdx.y * cuda.blockDim.x + cuda.threadIdx.x
    if c >= slots.shape[2]:
        return
    steps = terminal.shape[0]
    root[e, 0, c] = slots[0, e, c]
    for t in range(steps):
        value = slots[t + 1, e, c]
        if t + 1 < steps:
            root[e, t + 1, c] = value
        nxt[e, t, c] = terminal[t, e, c] if ended[t, e] else value


@functools.lru_cache(maxsize=2)
def _kernels(simulated: bool):
    """The two kernels, compiled on first use (``simulated``: the simulator's; one per process mode)."""
    global cuda
    from numba import cuda

    return cuda.jit(_save_rows), cuda.jit(_rows)
