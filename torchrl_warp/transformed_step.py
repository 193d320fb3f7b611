"""TorchRL's ``step_and_maybe_reset`` of a ``TransformedEnv`` over a WarpEnv, without host syncs.

``EnvBase.step_and_maybe_reset`` asks the host whether any env is done before it resets
(``if any_done: reset(...)``), and its reset checks the done flags on the host too; a
CUDA graph cannot capture either. :func:`step_and_maybe_reset` takes the same steps with
the reset masked instead: the WarpEnv's masked reset kernel runs at every step (it skips
the envs that are not done), the transforms' ``_reset`` sees ``"_reset"`` set where done,
and the reset entries are merged where done, as TorchRL's ``_update_during_reset`` merges
them, so the results are TorchRL's bit for bit (``tests/test_graphed_transforms.py``
compares them with ``Collector``'s).

Only transforms whose step and reset run on the device alone can be captured:
:data:`CAPTURABLE` lists those checked (each against ``Collector`` and under
:func:`~torchrl_warp.host_syncs.forbid_host_syncs`); :func:`warp_base` refuses the others,
naming them.

Examples:
    >>> from torchrl.envs import RewardSum, StepCounter, TransformedEnv, Compose
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> env = TransformedEnv(CartPoleEnv(num_envs=2, seed=0), Compose(StepCounter(max_steps=3), RewardSum()))
    >>> type(warp_base(env)).__name__
    'CartPoleEnv'
    >>> carrier = env.reset()
    >>> for _ in range(3):
    ...     data, carrier = step_and_maybe_reset(env, env.rand_action(carrier))
    >>> data["next", "truncated"].squeeze(-1).tolist(), carrier["step_count"].squeeze(-1).tolist()
    ([True, True], [0, 0])
"""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.envs import Compose, Transform, TransformedEnv
from torchrl.envs import transforms as _t

from torchrl_warp.env import WarpEnv

__all__ = ["CAPTURABLE", "keep_flags_on_host", "step_and_maybe_reset", "transforms_of", "warp_base"]

#: transforms whose step and reset need no host sync, and whose reset changes only the envs it
#: resets (checked against Collector and under forbid_host_syncs: tests/test_graphed_transforms.py)
CAPTURABLE: tuple[type[Transform], ...] = (
    # observations
    _t.CatTensors, _t.ClipTransform, _t.DTypeCastTransform, _t.DoubleToFloat, _t.ExcludeTransform,
    _t.ExpandAs, _t.FlattenObservation, _t.Hash, _t.ObservationNorm, _t.PermuteTransform, _t.RenameTransform,
    _t.SelectTransform, _t.SignTransform, _t.SqueezeTransform, _t.Stack, _t.UnaryTransform,
    _t.UnsqueezeTransform, _t.RemoveEmptySpecs, _t.ModuleTransform,
    # rewards
    _t.BinarizeReward, _t.LineariseRewards, _t.RewardClipping, _t.RewardScaling, _t.RewardSum,
    _t.SuccessReward, _t.TargetReturn, _t.RNDTransform,
    # actions
    _t.ActionDiscretizer, _t.ActionScaling, _t.ActionTokenizerTransform, _t.FlattenAction,
    # episodes and steps
    _t.FrameSkipTransform, _t.InitTracker, _t.PolicyAgeFilter, _t.StepCounter, _t.TerminateTransform,
)

#: transforms that read a 0-d flag buffer of theirs on the host at every call (``if self.flag:``);
#: on a GPU that read would wait for the device, so :func:`keep_flags_on_host` keeps it on the CPU
_HOST_FLAGS = {_t.ObservationNorm: "standard_normal", _t.RewardScaling: "standard_normal"}


def transforms_of(env: TransformedEnv) -> list[Transform]:
    """The transforms of ``env`` in order, ``Compose``s flattened."""
    out, todo = [], [env.transform]
    while todo:
        t = todo.pop(0)
        if isinstance(t, Compose):
            todo[:0] = list(t.transforms)
        else:
            out.append(t)
    return out


def warp_base(env: TransformedEnv) -> WarpEnv:
    """The WarpEnv under ``env``, after checking that every transform of it can be captured.

    Raises ``TypeError`` naming the transforms that cannot (or a base that is no WarpEnv)."""
    base = env.base_env
    if not isinstance(base, WarpEnv):
        raise TypeError(f"GraphedCollector steps a TransformedEnv over a torchrl_warp WarpEnv, got one over "
                        f"{type(base).__name__} (nest the transforms in one TransformedEnv)")
    others = list(dict.fromkeys(type(t).__name__ for t in transforms_of(env) if type(t) not in CAPTURABLE))
    if others:
        raise TypeError(
            f"GraphedCollector cannot run {', '.join(others)} inside its CUDA graph: only transforms whose step "
            f"and reset need no host sync are taken ({', '.join(t.__name__ for t in CAPTURABLE)}). Apply "
            f"{'it' if len(others) == 1 else 'them'} to each batch, or collect with torchrl.collectors.Collector")
    if not env._simple_done:
        raise TypeError("GraphedCollector needs the transformed env to keep the root 'done' and 'terminated' flags")
    return base


def keep_flags_on_host(env: TransformedEnv) -> None:
    """Move the flags of :data:`_HOST_FLAGS` to the CPU (same values), marked ``read_on_host`` for
    :func:`~torchrl_warp.host_syncs.forbid_host_syncs`; ``env.to(device)`` moves them back."""
    for t in transforms_of(env):
        name = _HOST_FLAGS.get(type(t))
        if name is not None:
            flag = getattr(t, name)
            if flag.device.type != "cpu":  # (before the capture: this copy waits for the device)
                flag = flag.cpu()
                setattr(t, name, flag)
            flag.read_on_host = True


def step_and_maybe_reset(env: TransformedEnv, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
    """``env.step_and_maybe_reset(tensordict)`` for a TransformedEnv over a WarpEnv (see the module)."""
    data = env.step(tensordict)
    following = env._step_mdp(data)
    reset = following.get("done").clone()  # EnvBase.any_done's "_reset" (the root done: our envs have one)
    following.set("_reset", reset)
    reset_data = env._reset(following.select(*env.reset_keys, strict=False))
    return data, _merge_where_reset(reset_data, following, env.reset_keys)


def _merge_where_reset(reset_data: TensorDictBase, following: TensorDictBase, reset_keys) -> TensorDictBase:
    """TorchRL's ``_update_during_reset`` for a root ``"_reset"``, without asking the host whether
    every env reset: the entries where reset, the others kept, and (as TorchRL's partial
    reset pads) zeros where one side lacks an entry, unless every env reset.

    The zeros are made on the device (``zeros_like``): TensorDict's own ``where(..., pad=0)``
    builds its pad with ``torch.tensor(0, device=...)``, a copy from host memory that a CUDA
    graph cannot capture."""
    mask = following.pop("_reset")
    for key in reset_keys:  # the groups' reset entries: the root's decides (and none was set)
        following.pop(key, None)
    new = reset_data.exclude("_reset")
    mask = mask.reshape(following.shape[0], -1).any(-1)
    ours, theirs = set(following.keys(True, True)), set(new.keys(True, True))
    kept, reset = following, new
    if ours != theirs:  # pad each side's missing entries with zeros (shallow copies: the inputs stay)
        kept, reset = following.copy(), new.copy()
        for key in theirs - ours:
            kept.set(key, torch.zeros_like(new.get(key)))
        for key in ours - theirs:
            reset.set(key, torch.zeros_like(following.get(key)))
    merged = kept.where(~mask, other=reset)
    if ours != theirs:  # TorchRL's update when every env reset keeps what only one side has
        everyone = mask.all()
        for key in ours - theirs:
            merged.set(key, torch.where(everyone, following.get(key), merged.get(key)))
        for key in theirs - ours:
            merged.set(key, torch.where(everyone, new.get(key), merged.get(key)))
    return following.update(merged)
