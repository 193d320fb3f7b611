"""Reset pools: start states that resetting environments draw from, on the device.

A reset pool is a TensorDict of start states: some of an env's own state fields, each
with a leading pool dimension ``P`` (``pool[name].shape == (P, *env.state[name].shape[1:])``).
Each env that resets draws one entry, ``k`` uniform in ``[0, P)`` from the env's
counter-based RNG (keyed by the seed, the env and its episode: no host sync,
reproducible for a seed), and its start state takes the entry's values. The reset
kernel runs the env's ``reset`` phases (its own random start), then the pool's copy,
then its ``observe`` phases (``Layout.observe``), which derive the observations (and
counts, search structures...) from the start state, pooled or not.

Examples:
    >>> import torch
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> starts = torch.tensor([[[0.1, 0.0, 0.02, 0.0]], [[-0.1, 0.0, -0.02, 0.0]]])
    >>> env = CartPoleEnv(num_envs=4, reset_pool={"kinematics": starts}, seed=0)
    >>> obs = env.reset()["observation"]
    >>> bool(((obs == starts[0, 0]).all(-1) | (obs == starts[1, 0]).all(-1)).all())
    True
"""
from __future__ import annotations

import functools
import math

import numba
import torch
from tensordict import TensorDict, TensorDictBase

from torchrl_warp.cuda.rng import random_bits
from torchrl_warp.layout import Field

__all__ = ["check_reset_pool", "with_fixed_starts", "pool_phase", "pool_index", "POOL_PREFIX", "RESET_POOL_STEP"]

#: kernel argument names of a pool's tensors: ``reset_pool_<field>``
POOL_PREFIX = "reset_pool_"
#: the RNG key's ``step`` for the pool draw: above any step count (int32), so that it
#: never repeats a draw an env's own reset or step makes
RESET_POOL_STEP = 1 << 40
_SHIFT32 = numba.uint64(32)


@numba.njit(cache=False)
def pool_index(seed, env, episode, size):
    """The pool entry env ``env`` starts episode ``episode`` from: uniform in ``[0, size)``
    (the high 32 random bits scaled by ``size``, exact for ``size < 2**32``)."""
    bits = random_bits(seed, env, episode, RESET_POOL_STEP, 0, 0) >> _SHIFT32
    return numba.int64((bits * numba.uint64(size)) >> _SHIFT32)


def with_fixed_starts(env_name: str, pool: TensorDict | None, fixed: dict) -> TensorDict:
    """A checked ``pool`` (or none) with the ``fixed`` start fields (name -> one env's value)
    added to every entry: a pool of one entry when ``pool`` is None. A pool that holds a
    fixed field too is refused (which would win is unclear).

    Examples:
        >>> pool = with_fixed_starts("Env", TensorDict({"speed": torch.zeros(3, 2)}, [3]), {"pos": torch.ones(2, 2)})
        >>> pool["pos"].shape, pool["speed"].shape
        (torch.Size([3, 2, 2]), torch.Size([3, 2]))
    """
    if pool is None:
        return TensorDict({k: v.unsqueeze(0) for k, v in fixed.items()}, batch_size=[1])
    both = sorted(set(fixed) & set(pool.keys()))
    if both:
        raise ValueError(f"{env_name}: the reset pool holds {', '.join(map(repr, both))}, which the env's "
                         f"fixed start (its constructor's starting_* arguments) sets too: give it in one place")
    merged = pool.clone(recurse=False)
    for k, v in fixed.items():
        merged[k] = v.to(pool.device).expand(pool.batch_size[0], *v.shape).clone()
    return merged


def check_reset_pool(env_name: str, pool, fields: list[Field], num_agents: int,
                     device: torch.device) -> TensorDict:
    """The env's own copy of ``pool`` (a TensorDict or a dict of tensors) on ``device``.

    Raises ``TypeError``/``ValueError`` naming the entry that is not one of the env's own
    non-scratch fields, or whose shape, dtype or values (NaN, infinities) are wrong.
    """
    if isinstance(pool, dict):
        pool = TensorDict(pool, batch_size=[])
    if not isinstance(pool, TensorDictBase):
        raise TypeError(f"{env_name}: a reset pool is a TensorDict (or a dict) of start states, "
                        f"got {type(pool).__name__}")
    allowed = {f.name: f for f in fields if not (f.scratch or f.derived)}
    if not allowed:
        raise ValueError(f"{env_name} takes no reset pool: it has no state fields of its own to start from")
    keys = list(pool.keys(include_nested=True, leaves_only=True))
    if not keys:
        raise ValueError(f"{env_name}: the reset pool is empty: give it one or more of the state fields "
                         f"{', '.join(allowed)}")
    size = None
    for key in keys:
        name = key if isinstance(key, str) else ".".join(key)
        field = allowed.get(name) if isinstance(key, str) else None
        if field is None:
            kind = next(("a kernel's scratch space" if f.scratch else "derived from the start state"
                         for f in fields if f.name == name), None)
            why = f" ({kind})" if kind else ""
            raise ValueError(f"{env_name}: reset pool entry {name!r} is not one of the env's own start-state "
                             f"fields{why}; it may hold {', '.join(allowed)}")
        value = pool.get(key)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{env_name}: reset pool entry {name!r} must be a tensor, got {type(value).__name__}")
        per_env = field.full_shape(1, num_agents)[1:]
        if value.dim() != len(per_env) + 1 or tuple(value.shape[1:]) != per_env or value.shape[0] < 1:
            raise ValueError(f"{env_name}: reset pool entry {name!r} must have shape [P, "
                             f"{', '.join(map(str, per_env))}] (P >= 1 start states), got {list(value.shape)}")
        if value.dtype != field.dtype:
            raise TypeError(f"{env_name}: reset pool entry {name!r} must have dtype {field.dtype} "
                            f"(the state field's), got {value.dtype}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{env_name}: reset pool entry {name!r} holds NaN or infinite values")
        if size is None:
            size = value.shape[0]
        elif value.shape[0] != size:
            raise ValueError(f"{env_name}: every reset pool entry needs the same number of start states; "
                             f"{name!r} has {value.shape[0]}, another {size}")
    if size >= 2**31:
        raise ValueError(f"{env_name}: a reset pool holds at most 2**31 - 1 start states, got {size}")
    return TensorDict({k: pool.get(k).detach().to(device).clone().contiguous() for k in keys},
                      batch_size=[size], device=device)


def pool_phase(fields: tuple[tuple[str, tuple, bool], ...]):
    """The reset phase that copies pool entry ``pool_index(...)`` into the env's fields.

    ``fields``: ``(name, trailing shape, per_agent)`` of each pooled field. Per-agent
    fields: each agent copies its own row; per-env fields: the agents share the copy,
    element ``j`` by agent ``j % num_agents``. The same fields give the same function
    (so that the kernels built from it are compiled once).
    """
    return _pool_phase(tuple((name, tuple(shape), bool(per_agent)) for name, shape, per_agent in fields))


@functools.lru_cache(maxsize=None)
def _pool_phase(fields):
    args = ["env", "agent", "num_agents", "seed", "episode"]
    for name, _, _ in fields:
        args += [name, POOL_PREFIX + name]
    first = POOL_PREFIX + fields[0][0]
    body = [f"k = pool_index(seed, env, episode[env], {first}.shape[0])"]
    for name, shape, per_agent in fields:
        src = POOL_PREFIX + name
        if per_agent:
            idx = [f"i{d}" for d in range(len(shape))]
            indent = "    "
            loop = []
            for d, n in enumerate(shape):
                loop.append(f"{indent * d}for i{d} in range({n}):")
            lead = indent * len(shape)
            loop.append(f"{lead}{name}[{', '.join(['env', 'agent'] + idx)}] = "
                        f"{src}[{', '.join(['k', 'agent'] + idx)}]")
            body += loop
        else:
            total = math.prod(shape)
            idx, rest = [], "j"
            for d in range(len(shape) - 1, 0, -1):  # j -> (i0, ..., i_last), row-major
                idx.insert(0, f"({rest}) % {shape[d]}")
                rest = f"({rest}) // {shape[d]}"
            idx.insert(0, rest)
            idx = idx if shape else []
            body += [f"for j in range(agent, {total}, num_agents):",
                     f"    {name}[{', '.join(['env'] + idx)}] = {src}[{', '.join(['k'] + idx)}]"]
    source = f"def draw_reset_pool({', '.join(args)}):\n" + "".join(f"    {line}\n" for line in body)
    namespace = {"pool_index": pool_index}
    exec(compile(source, "<torchrl_warp reset pool>", "exec"), namespace)
    fn = namespace["draw_reset_pool"]
    fn.__doc__ = f"Reset phase: copy one reset pool entry into {', '.join(n for n, _, _ in fields)}."
    fn.source = source
    return numba.njit(fn)
