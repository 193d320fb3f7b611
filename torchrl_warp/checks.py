"""Input validation: devices, memory, parameters and actions.

Every check raises an error that names the offending thing and what was expected,
before anything is written into an environment's state.

Examples:
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> check_params("TagEnv", {"k": 3}, {"k": 4.0})
    Traceback (most recent call last):
    ...
    TypeError: TagEnv: parameter 'k' must be an int, got 4.0 (float)
"""
from __future__ import annotations

import torch

__all__ = ["resolve_device", "check_memory", "check_params", "check_action"]


def resolve_device(device) -> torch.device:
    """``device`` as a ``torch.device`` with an index for CUDA; errors if it does not exist."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"invalid device {device!r}: {err}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"unsupported device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for, but no CUDA device is available")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < count:
        raise ValueError(
            f"device {device!r} does not exist: this machine has {count} CUDA device(s) "
            f"(cuda:0..cuda:{count - 1})"
        )
    return torch.device("cuda", index)


def _free_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(env_name: str, needed: int, device: torch.device, what: str) -> None:
    """Raise ``MemoryError`` if ``needed`` bytes will not fit in ``device``'s free memory."""
    free = _free_bytes(device)
    if free is not None and needed > 0.9 * free:
        gib = 1024**3
        raise MemoryError(
            f"{env_name}({what}) needs about {needed / gib:.2f} GiB on {device} (state plus "
            f"one step of outputs) but only {free / gib:.2f} GiB is free: use fewer "
            f"environments or agents"
        )


def check_params(env_name: str, defaults: dict, given: dict) -> dict:
    """Merge ``given`` into ``defaults``, rejecting unknown names and wrong types."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(
            f"{env_name} got unknown parameter(s) {', '.join(map(repr, unknown))}; "
            f"valid parameters: {', '.join(sorted(defaults))}"
        )
    merged = dict(defaults)
    for name, value in given.items():
        kind = type(defaults[name])
        ok = (
            isinstance(value, bool)
            if kind is bool
            else isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind is float
            else isinstance(value, kind) and not isinstance(value, bool)
        )
        if not ok:
            raise TypeError(
                f"{env_name}: parameter {name!r} must be a{'n' if kind is int else ''} "
                f"{kind.__name__}, got {value!r} ({type(value).__name__})"
            )
        merged[name] = kind(value)
    return merged


def check_action(key, value, spec, device, check_values: bool) -> None:
    """Check one action tensor against its spec: shape, dtype, device, then values."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"action {key!r} must be a torch.Tensor, got {type(value).__name__}")
    if value.shape != spec.shape:
        raise ValueError(
            f"action {key!r} has shape {tuple(value.shape)}, expected {tuple(spec.shape)} "
            f"(spec: {type(spec).__name__})"
        )
    if value.dtype != spec.dtype:
        raise TypeError(f"action {key!r} has dtype {value.dtype}, expected {spec.dtype}")
    if value.device != device:
        raise ValueError(f"action {key!r} is on device {value.device}, expected {device}")
    if check_values and not spec.is_in(value):
        low, high = _bounds(spec)
        raise ValueError(
            f"action {key!r} has values outside its spec: min {value.min().item()}, "
            f"max {value.max().item()}, allowed [{low}, {high}] ({type(spec).__name__}); "
            f"pass check_actions=False to skip this check (it syncs with the device)"
        )


def _bounds(spec):
    n = getattr(spec.space, "n", None)
    if n is not None:
        return 0, n - 1
    nvec = getattr(spec, "nvec", None)
    if nvec is not None:
        return 0, (nvec - 1).flatten()[: spec.shape[-1]].tolist()
    return spec.space.low.min().item(), spec.space.high.max().item()
