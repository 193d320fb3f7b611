"""Find, on any device, the tensor operations that a CUDA graph cannot capture.

A CUDA graph cannot capture an operation whose result the host reads (``bool(t)``,
``t.item()``, ``t.tolist()``, a Python branch on a tensor), whose output size depends
on values (``nonzero``, boolean-mask indexing, ``unique``...), or that copies host memory
to the device (``torch.tensor(0.0, device=d)``, ``cpu_tensor.to(d)``, indexing a device
tensor with a CPU one). On a GPU the capture fails with an error that rarely names the
operation; :func:`forbid_host_syncs` names it on the CPU as well, where nothing waits
and nothing is copied, so that a policy, a transform or a loop meant for
:class:`~torchrl_warp.graphed_collector.GraphedCollector` can be checked on a laptop.

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
    >>> with forbid_host_syncs():  # on the CPU, standing in for a GPU: a device tensor from host data
    ...     y = x + torch.tensor(1.0, device=x.device)
    Traceback (most recent call last):
    ...
    torchrl_warp.host_syncs.HostSyncError: torch.tensor cannot be captured in a CUDA graph (copies host memory to the device; make it on the device: torch.full, torch.zeros_like, or a tensor made before the capture)
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


#: operations that build a tensor from host data (Python numbers, lists, arrays)
_FROM_HOST_DATA = frozenset(("tensor", "as_tensor", "asarray", "new_tensor"))


#: modules whose tensor reads are the CPU backend's own (numpy views of the state for Numba's CPU
#: kernels; the CUDA backend's views need no host)
_BACKENDS = frozenset(("torchrl_warp.backends",))


def _has_mask(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _reason(func, args, kwargs, device: torch.device) -> str | None:
    """Why a graph on ``device`` cannot capture ``func(*args, **kwargs)``, or None."""
    name = getattr(func, "__name__", "")
    kwargs = kwargs or {}
    if name in _READS:
        if args and getattr(args[0], "read_on_host", False):  # a flag kept on the CPU on purpose
            return None
        return "reads a tensor's value on the host"
    if name in _SIZED_BY_VALUES:
        if name == "repeat_interleave" and kwargs.get("output_size") is not None:
            return None
        return "its output's size depends on the values"
    if name in ("__getitem__", "__setitem__") and len(args) > 1 and _has_mask(args[1]):
        return "indexes with a boolean mask (its size depends on the values; use torch.where)"
    if name in ("to", "copy_") and _to_host(name, args, kwargs):
        return "copies to the host"
    if _from_host(name, args, kwargs, device):
        return ("copies host memory to the device; make it on the device: torch.full, torch.zeros_like, "
                "or a tensor made before the capture")
    return None


def _from_host(name: str, args, kwargs, device: torch.device) -> bool:
    """Whether the operation copies host memory to a device tensor: a tensor built from host data
    with an explicit ``device`` (on a CPU run, standing in for a GPU, any explicit device), a CPU
    tensor moved to a GPU, or a GPU tensor indexed with a CPU tensor."""
    def on_device(target) -> bool:
        target = torch.device(target)
        return target.type != "cpu" or device.type == "cpu"

    if name in _FROM_HOST_DATA:
        data = args[1] if name == "new_tensor" else args[0] if args else kwargs.get("data")
        if isinstance(data, torch.Tensor) and data.device.type != "cpu":
            return False  # already on a device: no host memory read
        target = kwargs.get("device", args[0].device if name == "new_tensor" else None)
        return target is not None and on_device(target)
    if not args or not isinstance(args[0], torch.Tensor):
        return False
    if name == "to" and args[0].device.type == "cpu" and not args[0].is_pinned():
        targets = [v for v in (*args[1:], *kwargs.values()) if isinstance(v, (str, torch.device, torch.Tensor))]
        return any((v.device if isinstance(v, torch.Tensor) else torch.device(v)).type != "cpu" for v in targets)
    if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return args[0].device.type != "cpu" and args[1].device.type == "cpu" and args[1].dim() > 0 \
            and not args[1].is_pinned()
    if name in ("__getitem__", "__setitem__") and len(args) > 1 and args[0].device.type != "cpu":
        items = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(isinstance(i, torch.Tensor) and i.device.type == "cpu" and i.dim() > 0 for i in items)
    return False


def _to_host(name: str, args, kwargs) -> bool:
    """Whether ``tensor.to(...)`` moves a device tensor to the CPU, or ``cpu_tensor.copy_(src)``
    copies a device tensor into it."""
    if not isinstance(args[0], torch.Tensor):
        return False
    if name == "copy_":
        return args[0].device.type == "cpu" and len(args) > 1 and isinstance(args[1], torch.Tensor) \
            and args[1].device.type != "cpu"
    return args[0].device.type != "cpu" and any(
        isinstance(v, (str, torch.device)) and torch.device(v).type == "cpu"
        or isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in (*args[1:], *kwargs.values()))


def _capturing() -> bool:
    return True


def _no_health_check(self) -> None:
    return None


def _pretend_capturing() -> list:
    """Make the capture queries answer True; -> (owner, name, original) to restore. torch's
    optimizers ask too, and refuse to step under a capture unless built ``capturable``: that
    check is skipped (whether a step waits for the host is what is looked for here; a fused
    Adam, capturable or not, does not)."""
    patched = [(torch.cuda, "is_current_stream_capturing", torch.cuda.is_current_stream_capturing)]
    patched += [(torch.optim.Optimizer, name, getattr(torch.optim.Optimizer, name))
                for name in ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check")
                if hasattr(torch.optim.Optimizer, name)]
    torchrl_utils = sys.modules.get("torchrl._utils")
    proxy = getattr(torchrl_utils, "safe_is_current_stream_capturing", None)
    if proxy is not None:
        patched += [(m, "safe_is_current_stream_capturing", proxy) for m in list(sys.modules.values())
                    if getattr(m, "safe_is_current_stream_capturing", None) is proxy]
    for owner, name, _ in patched:
        setattr(owner, name, _no_health_check if owner is torch.optim.Optimizer else _capturing)
    return patched


class forbid_host_syncs(TorchFunctionMode):
    """A context in which an operation that a CUDA graph cannot capture (the host would wait for
    the device, or host memory would be copied to it) raises :class:`HostSyncError`, naming it,
    on every device (see the module's docstring).

    Args:
        device: where the checked code runs. On the CPU (the default), standing in for a GPU,
            every tensor built from host data with an explicit ``device`` counts as a copy to the
            device (``torch.tensor(0, device=t.device)`` is one on a GPU); on a CUDA device,
            those built there.

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

    def __init__(self, device: torch.device | str = "cpu"):
        super().__init__()
        self.device = torch.device(device)

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
        reason = _reason(func, args, kwargs, self.device)
        if reason is not None and sys._getframe(1).f_globals.get("__name__") not in _BACKENDS:
            owner = "Tensor." if getattr(func, "__objclass__", None) is not None or \
                getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor.")) else "torch."
            what = "cannot be captured in a CUDA graph" if reason.startswith("copies host") else \
                "makes the host wait for the device"
            raise HostSyncError(f"{owner}{getattr(func, '__name__', func)} {what} ({reason})")
        return func(*args, **(kwargs or {}))
