"""What a run needs in memory, from an env's specs, and a clear refusal when it will not fit.

A TorchRL ``Collector`` returns ``[num_envs, steps]`` TensorDicts shaped as the env's
``fake_tensordict()``: at the root each step's observations, done flags and what the
policy writes (the action; a PPO actor's distribution parameters and log-probability),
under ``"next"`` the step's observations, rewards and done flags. :func:`frame_bytes` adds
those up for one frame (one env, one step) from the specs, and :func:`batch_bytes` for a
batch, without allocating one.

A collector loop holds about :data:`COLLECTOR_BATCHES` batches at its peak
(:func:`collector_bytes`): the steps it is stacking, its own buffer, and the copy it
yields, while the loop still holds the batch it yielded last. Tag with 10 + 100 agents
(77 floats per agent's observation) is 71.5 kB a frame: a batch of 1024 envs x 100 steps
is 7.3 GB, a collector loop over it about 26 GB. :func:`training_parts` adds what the
training recipe keeps beside it (advantages, GAE's and a gradient
step's temporaries).

Examples:
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> env = CartPoleEnv(num_envs=4)
    >>> frame_bytes(env)  # 2 x 4 float32 observations, a float32 reward, an int64 action, 2 x 3 flags
    50
    >>> batch_bytes(env, frames_per_batch=4 * 100)
    20000
"""
from __future__ import annotations

import math

import torch

from torchrl_warp import checks

__all__ = ["COLLECTOR_BATCHES", "frame_bytes", "policy_frame_bytes", "batch_bytes", "collector_bytes",
           "training_parts", "available_bytes", "check_fits", "gib"]

#: batches a ``for batch in collector`` loop holds at its peak: the steps being stacked, the
#: collector's buffer and the copy it yields (the loop still holds the previous one), plus
#: the allocator's slack (a CPU loop over Tag peaked at 3.4 batches above its start)
COLLECTOR_BATCHES = 3.5
#: GAE's copies of a group's observations and of its critic's widest layer, per frame of a
#: slice of envs (root and next stacked for the critic, standardized, layer outputs):
#: fitted to CPU runs of Tag's MAPPO (a centralised critic: the observations) and IPPO
#: (a critic row per agent: the layers)
GAE_OBSERVATION_COPIES = 8
GAE_LAYER_COPIES = 6
#: a gradient step's activations and their gradients, per float of the forward pass's
#: layer outputs (a Tag MAPPO minibatch on the CPU: 1.03)
ACTIVATION_FACTOR = 1.25


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB, for messages.

    >>> gib(3 * 2**30), gib(2**20)
    ('3.00 GiB', '0.00098 GiB')
    """
    value = nbytes / 2**30
    return f"{value:.2f} GiB" if value >= 0.01 else f"{value:.2g} GiB"


def _leaf_bytes(spec, batch_numel: int) -> dict:
    """``{key: bytes per batch element}`` of a (composite) spec's leaves."""
    out = {}
    for key, leaf in spec.items(True, True):
        dtype = getattr(leaf, "dtype", None)
        if not isinstance(dtype, torch.dtype):  # non-tensor entries
            continue
        out[key] = math.prod(leaf.shape) * dtype.itemsize // batch_numel
    return out


def policy_frame_bytes(env, policy) -> dict:
    """``{key: bytes per frame}`` of what ``policy`` writes, from one call on one env's zero
    observations (a few kB; the policy's networks run once)."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    one = tuple(slice(0, 1) for _ in env.batch_size)
    td = env.full_observation_spec[one].zero()
    td.update(env.full_done_spec[one].zero())
    before = set(td.keys(True, True))
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        out = policy(td)
    frames = max(1, math.prod(out.batch_size))
    return {k: out.get(k).numel() * out.get(k).element_size() // frames
            for k in out.keys(True, True) if k not in before}


def frame_bytes(env, policy=None, *, traj_ids: bool = False) -> int:
    """Bytes of one frame (one env, one step) of the batch a ``Collector`` over ``env``
    returns: the keys of ``env.fake_tensordict()`` plus what ``policy`` writes (``None``:
    the random policy, the action only); ``traj_ids``: the collector's trajectory ids
    (``track_traj_ids=True``, its default), an int64 per frame."""
    n = max(1, math.prod(env.batch_size))
    root = {}
    for spec in (env.full_state_spec, env.full_action_spec, env.full_observation_spec, env.full_done_spec):
        root.update(_leaf_bytes(spec, n))
    if policy is not None:
        root.update(policy_frame_bytes(env, policy))
    following = {}
    for spec in (env.full_observation_spec, env.full_reward_spec, env.full_done_spec):
        following.update(_leaf_bytes(spec, n))
    return sum(root.values()) + sum(following.values()) + (8 if traj_ids else 0)


def batch_bytes(env, frames_per_batch: int, policy=None, *, traj_ids: bool = False) -> int:
    """Bytes of one batch of ``frames_per_batch`` frames (:func:`frame_bytes` each)."""
    return frames_per_batch * frame_bytes(env, policy, traj_ids=traj_ids)


def collector_bytes(env, frames_per_batch: int, policy=None, *, traj_ids: bool = False) -> int:
    """Peak bytes of a ``for batch in collector`` loop: :data:`COLLECTOR_BATCHES` batches."""
    return int(COLLECTOR_BATCHES * batch_bytes(env, frames_per_batch, policy, traj_ids=traj_ids))


def _group_key(group, name):
    return name if group is None else (group, name)


def training_parts(env, policy, groups, *, steps_per_batch: int, minibatch_size: int, hidden,
                   centralised_critic: bool, gae_chunk_floats: int = 1 << 29, batches_in_place: bool = False) -> dict:
    """Bytes of the training recipe's working set (recipes/train.py), by part: ``{what: bytes}``.

    Over a batch of ``num_envs x steps_per_batch`` frames the recipe holds the batch in
    training and each group's advantages (4 floats per agent: values of both steps,
    advantage, value target); its minibatches are gathered from the batch where it is.
    ``batches_in_place`` (``GraphedCollector(copy_batches=False)``, the recipe's GPU
    collector): the batch is the graph's own memory; else (``Collector``) the collector
    keeps a buffer of its own beside the batch it handed out. On top of that, at any one
    time, the largest of: another batch (the next one being collected; in place, the
    eager first batch, alive while the graph is captured), GAE over a slice of envs (the
    critic on copies of a group's observations and critic layers), and a gradient
    step (a minibatch and the actor's and critic's activations, ``hidden`` layers of
    MLPs, per agent; a centralised critic's once per group). The constants are fitted to CPU
    runs' peak resident memory; tests/test_memory.py checks the parts against a recipe's batch.
    """
    num_envs = max(1, math.prod(env.batch_size))
    frames = num_envs * steps_per_batch
    frame = frame_bytes(env, policy)
    outputs = policy_frame_bytes(env, policy)
    sum_h, max_h = sum(hidden), max(hidden)
    advantages = next_obs = activations = gae = 0
    for g in groups:
        obs = env.full_observation_spec[_group_key(g, "observation")]
        agents = 1 if g is None else obs.shape[-2]
        dim = obs.shape[-1]
        advantages += 16 * agents
        next_obs += 4 * agents * dim
        out = sum(b for k, b in outputs.items() if g is None or (isinstance(k, tuple) and k[0] == g)) // 4
        critic_rows = 1 if centralised_critic or g is None else agents
        activations += 4 * (agents * (dim + 2 * sum_h) + out  # actor: standardized input, layers, outputs
                            + agents * dim + critic_rows * (2 * sum_h + 1))
        # GroupAgent.advantage: slices of whole envs of about gae_chunk_floats critic floats
        critic_floats = agents * dim + critic_rows * max_h
        envs = min(num_envs, max(1, gae_chunk_floats // critic_floats // steps_per_batch))
        gae = max(gae, envs * steps_per_batch * 4 * (GAE_OBSERVATION_COPIES * agents * dim + GAE_LAYER_COPIES * critic_rows * max_h))
    stored = frame - next_obs + advantages
    step = min(minibatch_size, frames) * int(stored + ACTIVATION_FACTOR * activations)
    held = 1 if batches_in_place else 2
    return {f"{held} batch{'es' if held > 1 else ''} of {frames} frames": held * frames * frame,
            "advantages": frames * advantages,
            "another batch, GAE or a gradient step (the largest)": max(frames * frame, gae, step)}


def available_bytes(device) -> int | None:
    """Free memory of ``device``: ``torch.cuda.mem_get_info``'s free bytes for a GPU, the
    host's ``MemAvailable`` (``/proc/meminfo``) for the CPU; ``None`` where unknown."""
    return checks._free_bytes(torch.device(device))


def check_fits(what: str, parts: dict, device, advice: str) -> int:
    """Raise ``MemoryError`` if the bytes of ``parts`` (name -> bytes) exceed 90% of
    ``device``'s free memory; else return their sum. The message says what needs how
    much, what is free, and ``advice`` (the knobs to turn)."""
    device = torch.device(device)
    needed = sum(parts.values())
    free = available_bytes(device)
    if free is not None and needed > 0.9 * free:
        where = "free on the GPU" if device.type == "cuda" else "available on the host (MemAvailable)"
        detail = ", ".join(f"{name} {gib(b)}" for name, b in parts.items())
        raise MemoryError(f"{what} needs about {gib(needed)} on {device} ({detail}) but only {gib(free)} "
                          f"is {where}: {advice}")
    return needed
