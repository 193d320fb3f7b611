"""CUDA graph capture with Numba kernels inside: torch's capture, Numba's frees held off.

Numba frees what it owned (device memory, events, the modules of kernels that are gone)
in batches: once more than ``NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT`` frees are pending, the
next one flushes them all with ``cuMemFree`` / ``cuModuleUnload``. Python's garbage
collector can queue that next free at any allocation, inside a capture too, where those
calls invalidate the capture (``cudaErrorStreamCaptureInvalidated``): a capture then fails
or not depending on what earlier code left for the collector. Under :func:`cuda_graph`
the frees wait until the capture has ended.

Example::

    graph = torch.cuda.CUDAGraph()
    with cuda_graph(graph, device):
        env.step(td)
    graph.replay()
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch


def numba_frees_deferred(device) -> object:
    """A context in which Numba flushes no pending frees on ``device`` (nothing off CUDA)."""
    if torch.device(device).type != "cuda":
        return nullcontext()
    from numba import cuda

    index = torch.device(device).index
    with cuda.gpus[torch.cuda.current_device() if index is None else index]:
        # both of Numba's queues: its memory manager's (device memory) and the context's
        # (streams, events, modules)
        return cuda.current_context().defer_cleanup()


@contextmanager
def cuda_graph(graph: torch.cuda.CUDAGraph, device):
    """``torch.cuda.graph(graph)`` on ``device``, with Numba's frees deferred until it ends."""
    with torch.cuda.device(device), numba_frees_deferred(device), torch.cuda.graph(graph):
        yield graph
