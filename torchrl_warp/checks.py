"""Input validation: devices, memory, seeds, masks and actions (parameters: :mod:`~torchrl_warp.params`).

Every check raises an error that names the offending thing and what was expected,
before anything is written into an environment's state.

Examples:
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> check_seed("TagEnv", -1)
    Traceback (most recent call last):
    ...
    ValueError: TagEnv: seed must be an int in [0, 2**64 - 1] or None, got -1
"""
from __future__ import annotations

import numbers

import torch

__all__ = ["resolve_device", "check_memory", "check_seed", "check_mask", "check_flag", "check_action",
           "action_violation"]


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


def check_memory(env_name: str, needed: int, device: torch.device, what: str,
                 contents: str = "state plus one step of outputs", advice: str = "use fewer environments or agents") -> None:
    """Raise ``MemoryError`` if ``needed`` bytes will not fit in ``device``'s free memory."""
    free = _free_bytes(device)
    if free is not None and needed > 0.9 * free:
        gib = 1024**3
        raise MemoryError(
            f"{env_name}({what}) needs about {needed / gib:.2f} GiB on {device} ({contents}) "
            f"but only {free / gib:.2f} GiB is free: {advice}"
        )


#: seeds are ints in [0, SEED_MAX]: the counter-based RNG takes 64 bits
SEED_MAX = 2**64 - 1


def check_seed(owner: str, seed) -> int | None:
    """``seed`` as an int in ``[0, 2**64 - 1]`` (``None`` stays ``None``: draw one), or an error."""
    if seed is None:
        return None
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise TypeError(f"{owner}: seed must be an int in [0, 2**64 - 1] or None, got {seed!r} "
                        f"({type(seed).__name__})")
    if not 0 <= int(seed) <= SEED_MAX:
        raise ValueError(f"{owner}: seed must be an int in [0, 2**64 - 1] or None, got {seed!r}")
    return int(seed)


def check_flag(owner: str, name: str, value) -> bool:
    """``value`` if it is a bool, else a ``TypeError`` naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def check_mask(key, value, shapes: list[tuple], device) -> torch.Tensor:
    """A bool mask (``"_reset"``, ``"_step"``, ``"done"``) of one of ``shapes``, on ``device``."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"mask {key!r} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype != torch.bool:
        raise TypeError(f"mask {key!r} must be a bool tensor, got dtype {value.dtype}")
    if tuple(value.shape) not in shapes:
        raise ValueError(f"mask {key!r} has shape {tuple(value.shape)}, expected one of "
                         f"{', '.join(map(str, shapes))}")
    if value.device != torch.device(device):
        raise ValueError(f"mask {key!r} is on device {value.device}, expected {device}")
    return value


def check_action(key, value, spec, device, check_values: bool, check_range: bool = True, *, owner: str = "",
                 agents: int | None = None) -> None:
    """Check one action tensor against its spec: shape, dtype, device, then values (finite
    floats, and with ``check_range`` inside the spec). ``owner`` starts the messages (the
    env and the call, ``"TagEnv.step"``); ``agents``: the size of the group's agent
    dimension (dim 1), named when an action lacks it.

    Examples:
        >>> from torchrl.data import MultiCategorical
        >>> spec = MultiCategorical([21, 21], shape=(2, 3, 2))
        >>> check_action(("runners", "action"), torch.zeros(2, 2, dtype=torch.long), spec, torch.device("cpu"),
        ...              True, owner="TagEnv.step", agents=3)
        Traceback (most recent call last):
        ...
        ValueError: TagEnv.step: action ('runners', 'action') has shape (2, 2), expected (2, 3, 2) (spec: MultiCategorical): its agent dimension is missing (dim 1: the 3 agents of group 'runners')
        >>> check_action(("runners", "action"), torch.full((2, 3, 2), 25), spec, torch.device("cpu"), True)
        Traceback (most recent call last):
        ...
        ValueError: action ('runners', 'action') has values outside its spec: min 25, max 25; allowed [0, 20] in each of its 2 components (MultiCategorical, nvec [21, 21]); out of range: component 0 (min 25, max 25), component 1 (min 25, max 25); pass check_actions=False to skip this check (it syncs with the device)
    """
    where = f"{owner}: " if owner else ""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}action {key!r} must be a torch.Tensor, got {type(value).__name__}")
    if value.shape != spec.shape:
        expected = tuple(spec.shape)
        hint = ""
        if agents is not None and len(expected) >= 2 and tuple(value.shape) == expected[:1] + expected[2:]:
            group = f" of group {key[0]!r}" if isinstance(key, tuple) else ""
            hint = f": its agent dimension is missing (dim 1: the {agents} agents{group})"
        raise ValueError(
            f"{where}action {key!r} has shape {tuple(value.shape)}, expected {expected} "
            f"(spec: {_spec_name(spec)}){hint}"
        )
    if value.dtype != spec.dtype:
        raise TypeError(f"{where}action {key!r} has dtype {value.dtype}, expected {spec.dtype}")
    if value.device != device:
        raise ValueError(f"{where}action {key!r} is on device {value.device}, expected {device}")
    if check_values and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{where}action {key!r} has NaN or infinite values; pass check_actions=False to skip "
                         f"this check (the kernels then must not let them into the state)")
    if check_values and check_range and not spec.is_in(value):
        raise ValueError(
            f"{where}action {key!r} has values outside its spec: min {value.min().item()}, "
            f"max {value.max().item()}; {_allowed(value, spec)}; "
            f"pass check_actions=False to skip this check (it syncs with the device)"
        )


def action_violation(value: torch.Tensor, spec, check_range: bool = True) -> torch.Tensor:
    """Whether ``value`` breaks :func:`check_action`'s value rules, as a 0-d bool tensor on its
    device: no host sync, so it can run inside a CUDA graph (the caller reads it later).

    Examples:
        >>> from torchrl.data import Categorical
        >>> action_violation(torch.tensor([0, 2]), Categorical(3)), action_violation(torch.tensor([3]), Categorical(3))
        (tensor(False), tensor(True))
    """
    bad = ~torch.isfinite(value).all() if value.is_floating_point() else torch.zeros((), dtype=torch.bool,
                                                                                      device=value.device)
    if not check_range:
        return bad
    from torchrl.data import OneHot

    space = spec.space
    if isinstance(spec, OneHot):
        return bad | ((value != 0) & (value != 1)).any() | (value.sum(-1) != 1).any()
    n = getattr(space, "n", None)
    nvec = getattr(spec, "nvec", None)
    if n is not None:
        return bad | ((value < 0) | (value >= n)).any()
    if nvec is not None:
        return bad | ((value < 0) | (value >= nvec.to(value.device).expand_as(value))).any()
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is None:  # unbounded
        return bad
    return bad | ((value < low.to(value.device)) | (value > high.to(value.device))).any()


def _spec_name(spec) -> str:
    """The spec's class as TorchRL users know it (our ``BatchedMultiCategorical`` is a ``MultiCategorical``)."""
    return type(spec).__name__.replace("Batched", "")


def _num(x) -> str:
    x = float(x)
    return repr(int(x)) if x.is_integer() else repr(x)


def _allowed(value: torch.Tensor, spec) -> str:
    """The values ``spec`` allows, and where ``value`` leaves them: per component (the last
    dim) for specs whose bounds differ by component, e.g. ``MultiCategorical([3, 3, 10])``."""
    from torchrl.data import OneHot

    name = _spec_name(spec)
    if isinstance(spec, OneHot):  # MultiOneHot too
        return f"allowed one-hot rows: each entry 0 or 1, one 1 per row ({name})"
    nvec = getattr(spec, "nvec", None)
    if nvec is not None:
        low = torch.zeros(spec.shape[-1])
        high = (torch.as_tensor(nvec).reshape(-1, spec.shape[-1])[0] - 1).double()
        kind = f"{name}, nvec {[int(h) + 1 for h in high]}"
    else:
        n = getattr(spec.space, "n", None)
        if n is not None:
            return f"allowed [0, {n - 1}] ({name}({n}))"
        if not value.ndim:
            return f"allowed [{_num(spec.space.low)}, {_num(spec.space.high)}] ({name})"
        low = spec.space.low.reshape(-1, spec.shape[-1]).min(0).values.double().cpu()
        high = spec.space.high.reshape(-1, spec.shape[-1]).max(0).values.double().cpu()
        kind = name
    rows = value.reshape(-1, value.shape[-1]).double().cpu()
    lo, hi = rows.min(0).values, rows.max(0).values
    bad = [j for j in range(len(low)) if lo[j] < low[j] or hi[j] > high[j]]
    if bool((low == low[0]).all() and (high == high[0]).all()):
        allowed = f"allowed [{_num(low[0])}, {_num(high[0])}]" + (
            f" in each of its {len(low)} components" if len(low) > 1 else "")
    else:
        allowed = "allowed " + ", ".join(f"component {j} in [{_num(low[j])}, {_num(high[j])}]" for j in range(len(low)))
    out = ", ".join(f"component {j} (min {_num(lo[j])}, max {_num(hi[j])})" for j in bad)
    return f"{allowed} ({kind})" + (f"; out of range: {out}" if out and len(low) > 1 else "")
