"""CUDA graph capture with Numba kernels inside: torch's capture, with nothing freed behind it.

Two kinds of frees that run at arbitrary times invalidate a capture when they land inside
one (``cudaErrorStreamCaptureInvalidated``), so a capture failed or not by what earlier
code left behind (the GPU suite's order-dependent failures):

- Numba frees what it owned (device memory, events, the modules of kernels that are gone)
  in batches: once more than ``NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT`` frees are pending, the
  next one flushes them all (``cuMemFree``: ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``).
- Python's cyclic garbage collector runs at any allocation, and frees what earlier runs
  left in reference cycles, torch's ``CUDAGraph`` objects among them, whose destructor
  (``CUDAGraph::reset``) is "not permitted when stream is capturing".

Under :func:`cuda_graph` Numba defers its frees and the cyclic collector waits, until the
capture has ended.

Example::

    graph = torch.cuda.CUDAGraph()
    with cuda_graph(graph, device):
        env.step(td)
    graph.replay()
"""
from __future__ import annotations

import gc
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
def no_cyclic_collection():
    """A context in which Python's cyclic garbage collector does not run by itself
    (``gc.disable()``; an explicit ``gc.collect()`` still does); as it was afterwards.

    >>> with no_cyclic_collection():
    ...     gc.isenabled()
    False
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def nothing_freed_behind(device):
    """Numba's frees deferred and the cyclic collector held off (see the module's doc)."""
    with numba_frees_deferred(device), no_cyclic_collection():
        yield


@contextmanager
def cuda_graph(graph: torch.cuda.CUDAGraph, device):
    """``torch.cuda.graph(graph)`` on ``device``, with nothing freed behind it until it ends."""
    with torch.cuda.device(device), nothing_freed_behind(device), torch.cuda.graph(graph):
        yield graph
