"""Find, on any device, the tensor operations that would make the host wait for a CUDA device.

A CUDA graph cannot capture an operation whose result the host reads (``bool(t)``,
``t.item()``, ``t.tolist()``, a Python branch on a tensor) or whose output size depends
on values (``nonzero``, boolean-mask indexing, ``unique``...). On a GPU the capture
fails with a CUDA error that rarely names the operation; :func:`forbid_host_syncs` names
it on the CPU as well, where nothing waits, so that a policy, a transform or a loop meant
for :class:`~torchrl_warp.graphed_collector.GraphedCollector` can be checked on a laptop.

Examples:
    >>> import torch
    >>> x = torch.ones(3)
    >>> with forbid_host_syncs():
    ...     y = torch.where(x > 0, x, 0.0).sum()  # stays on the device
    >>> with forbid_host_syncs():
    ...     if x.any():
    ...         pass
    Traceback (most recent call last):
    ...
    torchrl_warp.host_syncs.HostSyncError: Tensor.__bool__ makes the host wait for the device (reads a tensor's value on the host)
"""
from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["HostSyncError", "forbid_host_syncs"]


class HostSyncError(RuntimeError):
    """An operation that a CUDA graph cannot capture: the host would wait for the device."""


#: operations whose result is read on the host
_READS = frozenset(("__bool__", "item", "tolist", "__int__", "__float__", "__index__", "__complex__", "numpy",
                    "cpu", "__array__"))
#: operations whose output size depends on the values
_SIZED_BY_VALUES = frozenset(("nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount",
                              "repeat_interleave"))


#: modules whose tensor reads are the CPU backend's own (numpy views of the state for Numba's CPU
#: kernels; the CUDA backend's views need no host)
_BACKENDS = frozenset(("torchrl_warp.backends",))


def _has_mask(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _reason(func, args, kwargs) -> str | None:
    name = getattr(func, "__name__", "")
    if name in _READS:
        if args and getattr(args[0], "read_on_host", False):  # a flag kept on the CPU on purpose
            return None
        return "reads a tensor's value on the host"
    if name in _SIZED_BY_VALUES:
        if name == "repeat_interleave" and (kwargs or {}).get("output_size") is not None:
            return None
        return "its output's size depends on the values"
    if name in ("__getitem__", "__setitem__") and len(args) > 1 and _has_mask(args[1]):
        return "indexes with a boolean mask (its size depends on the values; use torch.where)"
    if name in ("to", "copy_") and _to_host(args, kwargs):
        return "copies to the host"
    return None


def _to_host(args, kwargs) -> bool:
    """Whether ``tensor.to(...)`` / ``.copy_(...)`` moves a device tensor to the CPU."""
    if not isinstance(args[0], torch.Tensor) or args[0].device.type == "cpu":
        return False
    return any(isinstance(v, (str, torch.device)) and torch.device(v).type == "cpu"
               or isinstance(v, torch.Tensor) and v.device.type == "cpu"
               for v in (*args[1:], *(kwargs or {}).values()))


def _capturing() -> bool:
    return True


def _pretend_capturing() -> list:
    """Make the capture queries answer True; -> (owner, name, original) to restore."""
    patched = [(torch.cuda, "is_current_stream_capturing", torch.cuda.is_current_stream_capturing)]
    torchrl_utils = sys.modules.get("torchrl._utils")
    proxy = getattr(torchrl_utils, "safe_is_current_stream_capturing", None)
    if proxy is not None:
        patched += [(m, "safe_is_current_stream_capturing", proxy) for m in list(sys.modules.values())
                    if getattr(m, "safe_is_current_stream_capturing", None) is proxy]
    for owner, name, _ in patched:
        setattr(owner, name, _capturing)
    return patched


class forbid_host_syncs(TorchFunctionMode):
    """A context in which an operation that would make the host wait for a CUDA device raises
    :class:`HostSyncError`, naming it, on every device (see the module's docstring).

    A tensor with the attribute ``read_on_host`` set (a CPU flag kept there on purpose, see
    :func:`~torchrl_warp.transformed_step.keep_flags_on_host`) may be read.

    Inside it, code that asks whether a CUDA graph is being captured is told it is
    (``torch.cuda.is_current_stream_capturing`` and TorchRL's
    ``safe_is_current_stream_capturing``, wherever imported): libraries skip their host-side
    argument checks under capture (TorchRL's ``TanhNormal`` does), so the context sees what a
    capture would run.

    It sees what goes through torch's Python API (tensor methods, ``torch.*`` functions):
    enough for TorchRL modules, transforms and tensordict operations. Operations inside
    a compiled kernel (Numba's launches) are not tensors' and are not seen.
    """

    def __enter__(self):
        self._patched = _pretend_capturing()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for owner, name, original in self._patched:
                setattr(owner, name, original)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        reason = _reason(func, args, kwargs)
        if reason is not None and sys._getframe(1).f_globals.get("__name__") not in _BACKENDS:
            owner = "Tensor." if getattr(func, "__objclass__", None) is not None or \
                getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor.")) else "torch."
            raise HostSyncError(f"{owner}{getattr(func, '__name__', func)} makes the host wait for the device "
                                f"({reason})")
        return func(*args, **(kwargs or {}))
