"""The CPU backend's threads: Numba's parallel loops, chosen explicitly, torch's left alone.

The CPU backend runs each kernel as a ``numba.prange`` loop over environments, on
Numba's *threading layer*, a thread pool that Numba starts once per process at the
first parallel launch: ``tbb``, ``omp`` or ``workqueue``, by default the first that
loads. Without TBB that is ``omp``, and the ``omp`` layer sets OpenMP's thread count
when it starts (to ``NUMBA_NUM_THREADS``, the number of cores). On Linux torch's CPU
wheels use the same ``libgomp``, and OpenMP's thread count *is* torch's intra-op
thread count: under ``OMP_NUM_THREADS=1``, ``torch.get_num_threads()`` went from 1 to 2
at an env's first step, and on a busy machine torch's own work then ran 35-50x slower.

So the CPU backend chooses instead of letting the first launch choose:

* **the layer**: ``workqueue`` (Numba's own pool: no OpenMP, its idle threads sleep),
  unless ``NUMBA_THREADING_LAYER`` or ``NUMBA_THREADING_LAYER_PRIORITY`` is set (then
  Numba's rule applies) or Numba's threads were started already by other code. The
  backend starts the layer itself (:func:`start_numba_threads`) and puts torch's thread
  count back if the start changed it, whatever the layer.
* **the threads per launch** (:func:`num_threads`): ``TORCHRL_WARP_NUM_THREADS`` if set,
  else ``torch.get_num_threads()`` at the launch (so ``OMP_NUM_THREADS`` and
  ``torch.set_num_threads`` bound the envs too), at most ``NUMBA_NUM_THREADS`` (the
  pool's size, fixed when it starts: the number of cores unless set). A launch sets
  Numba's count for the calling thread and puts the caller's back afterwards.

``workqueue`` runs one parallel loop at a time: launches from several Python threads
take turns (:func:`numba_threads` holds a lock), and nested parallel loops are refused.

Examples:
    >>> layer = start_numba_threads()
    >>> with numba_threads(1):
    ...     pass
    >>> num_threads() >= 1
    True
"""
from __future__ import annotations

import contextlib
import os
import threading

import numba
import torch

__all__ = ["THREADS_ENV", "DEFAULT_LAYER", "num_threads", "start_numba_threads", "numba_threads"]

#: environment variable: the CPU backend's threads per launch (default: torch's count)
THREADS_ENV = "TORCHRL_WARP_NUM_THREADS"
#: the threading layer chosen when the user names none
DEFAULT_LAYER = "workqueue"

_START_LOCK = threading.Lock()
_LAUNCH_LOCK = threading.Lock()
_serial = False  # the layer runs one parallel loop at a time (workqueue)


def num_threads() -> int:
    """The threads of the CPU backend's next launch (see the module's docstring)."""
    pool = numba.config.NUMBA_NUM_THREADS
    wanted = os.environ.get(THREADS_ENV, "").strip()
    if wanted:
        try:
            n = int(wanted)
        except ValueError:
            raise ValueError(f"{THREADS_ENV} must be a positive int, got {wanted!r}") from None
        if n < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive int, got {wanted!r}")
    else:
        n = torch.get_num_threads()
    return max(1, min(n, pool))


def _started() -> str | None:
    try:
        return numba.threading_layer()
    except ValueError:  # "Threading layer is not initialized."
        return None


def start_numba_threads() -> str:
    """Start Numba's threading layer if no one has (choosing ``workqueue`` unless the
    user chose), keep torch's thread counts as they were, and return the layer's name."""
    global _serial
    with _START_LOCK:
        layer = _started()
        if layer is None:
            chosen = any(os.environ.get(v) for v in ("NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY"))
            if not chosen and str(numba.config.THREADING_LAYER).lower() == "default":
                numba.config.THREADING_LAYER = DEFAULT_LAYER
            intra = torch.get_num_threads()
            numba.get_num_threads()  # starts the layer
            if torch.get_num_threads() != intra:  # the omp layer's start, on a libgomp that torch shares
                torch.set_num_threads(intra)
            layer = _started()
        _serial = layer == "workqueue"
        return layer


@contextlib.contextmanager
def numba_threads(n: int):
    """Run the body's parallel loops on ``n`` of Numba's threads (the calling thread's
    count is put back after), one loop at a time where the layer needs it."""
    lock = _LAUNCH_LOCK if _serial else contextlib.nullcontext()
    with lock:
        before = numba.get_num_threads()
        if before == n:
            yield
            return
        numba.set_num_threads(n)
        try:
            yield
        finally:
            numba.set_num_threads(before)
