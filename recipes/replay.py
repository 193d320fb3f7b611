"""What the off-policy families share: a replay buffer on the env's device, collection, and the
loop "collect a batch -> extend the buffer -> gradient steps -> target updates -> log".

A family module (recipes/off_policy.py: DDPG, SAC and their multi-agent forms;
recipes/value_decomposition.py: DQN, IQL, VDN, QMIX) builds one :class:`ReplayAgent` per agent
group: its networks, its TorchRL loss and target updater, its exploration; :func:`train` runs
them all the same way, with no branch on the algorithm::

    run = start_run(cfg, out_dir, build_agents, make_optimizer)  # recipes/common.py
    buffer = replay_buffer(cfg.algo.buffer_size, cfg.algo.minibatch_size, run.device)
    for batch in batches(...):                     # random actions first (init_random_frames)
        buffer.extend(batch.reshape(-1))           # a copy: the collector's batch can be reused
        for _ in range(due):                       # frames_per_batch / frames_per_gradient_step
            losses = gradient_step(buffer.sample())  # the losses summed, one Adam step, SoftUpdate
            after()                                # HardUpdate (its counter is the host's)
    return finish_run(run, ...)                    # checkpoint, evaluation, summary

On CUDA the batches come from :class:`~torchrl_warp.graphed_collector.GraphedCollector` with
``copy_batches=False`` (the buffer copies each batch, so the collector's memory is reused), and
with ``algo.cudagraph_update`` each gradient step is one CUDA graph replay (tensordict's
``CudaGraphModule``, as on_policy.py's; ``SoftUpdate``'s target update inside it:
:func:`target_updates`). Sampling, the step and the target updates ask nothing
of the host (tests/test_off_policy.py checks it with ``forbid_host_syncs``).

Example:
    >>> buffer = replay_buffer(size=100, minibatch_size=4, device="cpu")
    >>> buffer.extend(TensorDict({"x": torch.arange(10.0)}, [10]))  # the indices written
    tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    >>> buffer.sample()["x"].shape, len(buffer)
    (torch.Size([4]), 10)
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from omegaconf import DictConfig
from tensordict import TensorDict, unravel_key
from tensordict.nn import TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.samplers import RandomSampler
from torchrl.modules import MLP, MultiAgentMLP
from torchrl.objectives import HardUpdate, SoftUpdate
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from torchrl_warp.graphed_collector import GraphedCollector
from torchrl_warp.memory import COLLECTOR_BATCHES, check_fits, frame_bytes, gib
from torchrl_warp.recipes.common import (
    GradientStep, IterationProfiler, Standardize, Stopwatch, TimeLimit, finish_run, key, log, make_env, start_run,
    with_group_done_flags,
)
from torchrl_warp.recipes.config import ConfigError
from torchrl_warp.recipes.distributed import Ranks
from torchrl_warp.recipes.metrics import EpisodeTracker, make_logger

__all__ = ["ReplayAgent", "network", "Observing", "target_updater", "target_updates", "annealed", "replay_buffer", "refill", "collection_policy",
           "make_optimizer", "network_of", "trained_groups", "gradient_steps_due", "GradientStep", "make_collector",
           "batches", "train", "memory_parts", "memory_needed"]


class ReplayAgent(torch.nn.Module):
    """The networks, loss and exploration of one agent group (or of the single agent), as
    :func:`train` uses them; a family's agents subclass it and set:

    - ``actor``: the policy that evaluation and recipes/play.py run, writing
      ``(group, "action")``; deterministic under ``ExplorationType.DETERMINISTIC``;
    - ``explorer``: what collects, ``actor`` followed by its exploration (none for SAC, whose
      actor samples);
    - ``loss``: the TorchRL loss; ``updater``: its :func:`target_updater`;

    and override :meth:`loss_value` (the loss's terms summed), :meth:`explore_at` (the
    exploration's schedule) and, where the loss reads more than the env writes, :meth:`prepare`.
    Submodules register in the order actor, critic, mixer, loss, so that the parameters come in
    that order (:func:`make_optimizer`'s groups)."""

    actor: torch.nn.Module
    explorer: torch.nn.Module
    loss: torch.nn.Module
    updater: SoftUpdate | HardUpdate | None = None

    def loss_value(self, minibatch) -> tuple[torch.Tensor, dict]:
        """``(total, {name: detached term})`` of the loss on ``minibatch``."""
        raise NotImplementedError

    def explore_at(self, frames: int, total_frames: int) -> dict:
        """Set the exploration's schedule for ``frames`` frames done of ``total_frames``; returns
        what to log (``{name: value}``)."""
        return {}

    def prepare(self, batch) -> None:
        """Add what the loss reads beyond the env's outputs to a collected ``batch`` (in place),
        before it is stored."""

    def scaled(self, minibatch, reward_key, scale: float):
        """``minibatch`` (a shallow copy: the buffer's sample is left as it is) with its
        ``("next", reward_key)`` times ``scale`` (``algo.reward_scale``), what the critic's
        targets are computed from."""
        if scale == 1.0:
            return minibatch
        reward_key = unravel_key(("next", reward_key))
        minibatch = minibatch.copy()
        minibatch.set(reward_key, minibatch.get(reward_key) * scale)
        return minibatch


def network(in_features: int, out_features: int, group_size: int | None, algo: DictConfig, device, *,
            centralized: bool = False, activation=torch.nn.ReLU) -> torch.nn.Module:
    """An ``algo.hidden`` network: TorchRL's ``MLP`` for a single agent (``group_size=None``),
    else a ``MultiAgentMLP`` over the group's ``group_size`` agents (``centralized``: each agent's
    output reads every agent's input; ``algo.share_params``: one network for all agents). Either
    takes several inputs and concatenates them (a critic's observation and action).

    >>> from omegaconf import OmegaConf
    >>> algo = OmegaConf.create({"hidden": [8], "share_params": True})
    >>> network(3 + 2, 1, 4, algo, "cpu", centralized=True)(torch.zeros(7, 4, 3), torch.zeros(7, 4, 2)).shape
    torch.Size([7, 4, 1])
    """
    hidden = list(algo.hidden)
    if group_size is None:
        return MLP(in_features=in_features, out_features=out_features, num_cells=hidden, activation_class=activation,
                   device=device)
    return MultiAgentMLP(in_features, out_features, n_agents=group_size, centralized=centralized,
                         share_params=algo.share_params, depth=len(hidden), num_cells=hidden,
                         activation_class=activation, device=device)


class Observing(torch.nn.Module):
    """``net(..., standardize(observation), ...)``: a network whose input number ``at`` (the
    first by default), the observation, is standardized (``algo.obs_norm``:
    :class:`~torchrl_warp.recipes.common.Standardize` with the run's statistics, saved with the
    model) and whose other inputs (a critic's action, a mixer's Q-values) are not; without
    statistics, ``net`` as it is.

    >>> stats = (torch.tensor([1.0]), torch.tensor([2.0]))
    >>> Observing(torch.nn.Identity(), stats)(torch.tensor([3.0])).tolist()
    [1.0]
    >>> Observing(lambda q, state: q + state, stats, at=1)(torch.tensor([3.0]), torch.tensor([3.0])).tolist()
    [4.0]
    """

    def __init__(self, net, obs_stats=None, at: int = 0):
        super().__init__()
        self.standardize = Standardize(*obs_stats) if obs_stats is not None else torch.nn.Identity()
        self.net, self.at = net, at

    def forward(self, *inputs):
        inputs = list(inputs)
        inputs[self.at] = self.standardize(inputs[self.at])
        return self.net(*inputs)


def target_updater(loss, algo: DictConfig) -> SoftUpdate | HardUpdate:
    """The target networks' updater of ``loss``: ``HardUpdate`` copying every
    ``algo.hard_update_interval`` gradient steps, or (interval 0) ``SoftUpdate`` with
    ``algo.tau`` after every one. (HardUpdate copies when its counter reaches its interval and
    counts from 0, so an interval of N is TorchRL's ``value_network_update_interval=N - 1``.)

    Made with the loss, before a checkpoint is restored: it copies the online networks into the
    targets when made, and the checkpoint's targets must win."""
    if algo.hard_update_interval:
        return HardUpdate(loss, value_network_update_interval=algo.hard_update_interval - 1)
    return SoftUpdate(loss, tau=algo.tau)


def annealed(start: float, end: float, anneal_frames: int | None, frames: int, total_frames: int) -> float:
    """A value falling linearly from ``start`` to ``end`` over ``anneal_frames`` frames (``None``:
    half of ``total_frames``, as TorchRL's examples anneal), then ``end``: the exploration's
    schedule, computed from the frames done (a resumed run continues it).

    >>> annealed(1.0, 0.1, 100, 50, 1000), annealed(1.0, 0.1, None, 2000, 1000)
    (0.55, 0.1)
    """
    frames_to_end = anneal_frames if anneal_frames is not None else max(1, total_frames // 2)
    return end + (start - end) * max(0.0, 1.0 - frames / frames_to_end)


def replay_buffer(size: int, minibatch_size: int, device) -> ReplayBuffer:
    """TorchRL's ``ReplayBuffer`` of ``size`` frames in a ``LazyTensorStorage`` on ``device``
    (the env's: frames never leave it), sampled uniformly with replacement (``RandomSampler``),
    ``minibatch_size`` frames a sample. ``compilable=True``: the storage keeps its write cursor in
    a tensor, so extending asks nothing of the host (otherwise ``cursor.item()``, a sync, per
    batch)."""
    storage = LazyTensorStorage(size, device=torch.device(device), compilable=True)
    return ReplayBuffer(storage=storage, sampler=RandomSampler(), batch_size=minibatch_size, compilable=True)


def refill(buffer: ReplayBuffer, state: dict, device, chunk: int = 65_536) -> int:
    """Put the frames of a saved buffer (``state``: a ``ReplayBuffer.state_dict()`` as a
    checkpoint holds it, on any device) into ``buffer``, oldest first, so the newest survive
    where ``buffer`` is the smaller; returns the frames put in. Sizes may differ (a resumed run
    may change ``algo.buffer_size``).

    >>> saved = replay_buffer(4, 2, "cpu")
    >>> _ = saved.extend(TensorDict({"x": torch.arange(6.0)}, [6]))  # 0, 1 overwritten by 4, 5
    >>> fresh = replay_buffer(3, 2, "cpu")
    >>> refill(fresh, saved.state_dict(), "cpu"), fresh[:]["x"].tolist()
    (3, [3.0, 4.0, 5.0])
    """
    stored = state["_storage"]
    frames, cursor = int(stored["_len"]), int(state["_writer"]["_cursor"])
    if not frames:
        return 0
    data = TensorDict().load_state_dict(stored["_storage"], strict=False)
    size = data.batch_size[0]
    keep = min(frames, buffer.storage.max_size)
    where = next(iter(data.values(True, True))).device  # the state's (a checkpoint's: the CPU)
    order = (cursor - keep + torch.arange(keep, device=where)) % size  # the newest `keep` frames, oldest first
    for start in range(0, keep, chunk):
        buffer.extend(data[order[start:start + chunk]].to(device))
    return keep


def collection_policy(agents: dict) -> TensorDictSequential:
    """The groups' explorers as one policy that writes only the actions into the batch (not a
    Q-network's action values or an actor's distribution parameters: they would be stored).

    >>> import torch
    >>> from tensordict.nn import TensorDictModule
    >>> agent = ReplayAgent()
    >>> agent.explorer = TensorDictModule(torch.nn.Linear(3, 2), in_keys=["observation"], out_keys=["action"])
    >>> td = collection_policy({None: agent})(TensorDict({"observation": torch.zeros(4, 3)}, [4]))
    >>> sorted(td.keys())
    ['action', 'observation']
    """
    keep = [key(g, "action") for g in agents]
    return TensorDictSequential(*[a.explorer for a in agents.values()], selected_out_keys=keep)


def network_of(name: str) -> str:
    """Which network a parameter of an agent belongs to, by its name: ``actor``, ``critic``,
    ``alpha`` (SAC's entropy coefficient) or ``mixer`` (VDN's and QMIX's).

    >>> network_of("agents.loss.log_alpha"), network_of("agents.loss.qvalue_network_params.module.0.weight")
    ('alpha', 'critic')
    """
    for fragment, network in ((".log_alpha", "alpha"), (".mixer", "mixer"), (".critic", "critic"),
                              ("value_network_params", "critic")):
        if fragment in name:
            return network
    return "actor"


def make_optimizer(cfg: DictConfig, agents, device, ranks: Ranks = Ranks()) -> torch.optim.Adam:
    """One Adam over every agent's networks, a parameter group per network and group
    (``"adversary/actor"``, ``"adversary/critic"``, ...): Adam's update is per parameter, so this
    is the separate optimizers of TorchRL's examples, and a checkpoint holds one optimizer
    (recipes/checkpoint.py) as every family's does. The groups are consecutive runs of
    ``agents.parameters()``, so its order is theirs. Fused (on the CPU too: the unfused CPU
    Adam reads its step count on the host); capturable, its lr a tensor, when each gradient step
    is a CUDA graph (``algo.cudagraph_update`` on CUDA, one rank).

    >>> agents = torch.nn.ModuleDict({"agent": torch.nn.ModuleDict({"actor": torch.nn.Linear(2, 2),
    ...                                                              "critic": torch.nn.Linear(2, 1)})})
    >>> [g["name"] for g in make_optimizer(None, agents, "cpu").param_groups]
    ['agent/actor', 'agent/critic']
    """
    graphed = cfg is not None and graphed_update(cfg, device, ranks)
    lr = 1e-3 if cfg is None else cfg.algo.lr
    lr = torch.tensor(lr, device=device) if graphed else lr
    groups = []
    for name, p in agents.named_parameters():
        label = f"{name.split('.')[0]}/{network_of(name)}"
        if not groups or groups[-1]["name"] != label:
            groups.append({"name": label, "params": []})
        groups[-1]["params"].append(p)
    return torch.optim.Adam(groups, lr=lr, fused=True, capturable=graphed)


def target_updates(agents: dict) -> tuple[Callable, Callable]:
    """The ``agents``' target updates as ``(within, after)`` a gradient step: ``SoftUpdate``'s
    lerp is device work on the same tensors every step, so it runs inside the step (and inside
    its CUDA graph with ``algo.cudagraph_update``: no host work per step for it); ``HardUpdate``
    counts its steps on the host (a Python branch a graph cannot hold), so it runs after.

    >>> within, after = target_updates({})
    >>> within(), after()
    (None, None)
    """
    soft = [a.updater for a in agents.values() if isinstance(a.updater, SoftUpdate)]
    hard = [a.updater for a in agents.values() if a.updater is not None and not isinstance(a.updater, SoftUpdate)]

    def within() -> None:
        for updater in soft:
            updater.step()

    def after() -> None:
        for updater in hard:
            updater.step()

    return within, after


def graphed_update(cfg: DictConfig, device, ranks: Ranks) -> bool:
    """Whether each gradient step is a CUDA graph: ``algo.cudagraph_update`` on CUDA, one rank."""
    return cfg.algo.cudagraph_update and torch.device(device).type == "cuda" and not ranks.distributed


def trained_groups(cfg: DictConfig, groups: list) -> list:
    """The groups ``algo.train_groups`` names (all for null; ``"agent"`` is a single-agent env's
    one), a :class:`ConfigError` naming the env's groups for a name it lacks.

    >>> from omegaconf import OmegaConf
    >>> trained_groups(OmegaConf.create({"algo": {"train_groups": ["agent"]}}), ["adversary", "agent"])
    ['agent']
    """
    names = [g or "agent" for g in groups]
    wanted = cfg.algo.train_groups
    if wanted is None:
        return list(groups)
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise ConfigError(f"algo.train_groups names {', '.join(map(repr, unknown))}, not a group of this env "
                          f"(its groups: {', '.join(names)})")
    return [g for g, n in zip(groups, names) if n in wanted]


def gradient_steps_due(frames_before: int, frames_after: int, random_frames: int, frames_per_step: int) -> int:
    """Gradient steps a batch brings: one per ``frames_per_step`` frames collected after the
    first ``random_frames`` (a ratio that does not divide a batch carries its remainder over).

    >>> [gradient_steps_due(f, f + 100, 200, 64) for f in (0, 100, 200, 300, 400)]
    [0, 0, 1, 2, 1]
    """
    def due(frames):
        return max(0, frames - random_frames) // frames_per_step
    return due(frames_after) - due(frames_before)


def make_collector(cfg: DictConfig, env, policy, frames_per_batch: int, total_frames: int, device):
    """The batches' collector: on CUDA (``env.graphed_rollout``) a ``GraphedCollector`` whose
    batches view its graph's memory (``copy_batches=False``: the buffer copies them), elsewhere
    TorchRL's ``Collector`` (the same batches); ``policy=None``: uniform-random actions."""
    if cfg.env.graphed_rollout and device.type == "cuda":
        return GraphedCollector(env, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                                track_traj_ids=False, copy_batches=False)
    return Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=total_frames, device=device,
                     storing_device=device, no_cuda_sync=True, track_traj_ids=False,
                     auto_register_policy_transforms=False,
                     cudagraph_policy=cfg.env.cudagraph_policy and device.type == "cuda" and policy is not None)


def batches(cfg: DictConfig, run, policy, random_frames: int):
    """The run's batches: ``random_frames`` frames (this rank's, whole batches) of uniform-random actions,
    then the policy's up to ``env.total_frames``; each collector is made when its turn comes
    (it resets the envs and, on CUDA, captures its graph). Yields ``(batch, collector)``, the
    collector ``None`` for the random actions' (it has no policy weights to update)."""
    frames_left = (run.total_frames - run.frames_done) // run.ranks.world
    random_left = min(frames_left, random_frames)
    for policy_now, frames in ((None, random_left), (policy, frames_left - random_left)):
        if frames <= 0:
            continue
        collector = make_collector(cfg, run.env, policy_now, run.frames_per_batch, frames, run.device)
        try:
            for batch in collector:
                yield batch, collector if policy_now is not None else None
        finally:
            collector.shutdown()


def train(cfg: DictConfig, out_dir: str, build_agents) -> dict:
    """Train ``cfg.algo.name`` with its family's ``build_agents`` (a ``ModuleDict`` of
    :class:`ReplayAgent` by group) and write the run to ``out_dir`` as every family does
    (recipes/common.py: ``checkpoint.pt``, the logger's scalars, ``learning_curve.png``,
    ``summary.json``, ``video.gif``); returns the summary. Checkpoints hold the replay buffer
    (``algo.checkpoint_buffer``) and the gradient steps taken: a resumed run continues with
    both, and collects no random frames."""
    run = start_run(cfg, out_dir, build_agents, make_optimizer)
    if isinstance(run, dict):  # the checkpoint has trained env.total_frames already
        return run
    env, groups, device, ranks, optimizer = run.env, run.groups, run.device, run.ranks, run.optimizer
    agents_by_group, algo = run.agents_by_group, cfg.algo
    trained = {g: agents_by_group[g] for g in trained_groups(cfg, groups)}
    graphed = graphed_update(cfg, device, ranks)
    policy = collection_policy(agents_by_group)
    in_place = cfg.env.graphed_rollout and device.type == "cuda"
    needed = check_fits(f"training {cfg.algo.name} with algo.buffer_size={algo.buffer_size}",
                        memory_parts(cfg, env, policy, in_place), device,
                        "lower algo.buffer_size, or env.num_envs or env.steps_per_batch (a batch is their product)")
    log.info("memory: about %s on %s for the replay buffer, batches and gradient steps", gib(needed), device)
    buffer = replay_buffer(algo.buffer_size, algo.minibatch_size, device)
    # a resumed run continues with the checkpoint's buffer (every rank: rank 0's, so that every
    # rank takes its gradient steps together) and its target updates' count
    resumed = run.resumed_state
    if "replay_buffer" in resumed:
        log.info("replay buffer: %d frames from %s", refill(buffer, resumed["replay_buffer"], device), cfg.resume)
    steps_before = int(resumed.get("gradient_steps", 0))
    for agent in trained.values():
        if isinstance(agent.updater, HardUpdate):  # copies when its counter, steps mod the interval, reaches it
            agent.updater.counter = steps_before % algo.hard_update_interval
    steps_total = 0
    run.extra_state = lambda: {"gradient_steps": steps_before + steps_total,
                               **({"replay_buffer": buffer.state_dict()} if algo.checkpoint_buffer else {})}
    # each rank's random frames, whole batches, algo.init_random_frames of all ranks (none when resumed)
    random_frames = -(-algo.init_random_frames // (run.frames_per_batch * ranks.world)) * run.frames_per_batch
    random_frames = random_frames if run.frames_done == 0 else 0
    if random_frames * ranks.world != algo.init_random_frames and run.frames_done == 0:
        log.info("algo.init_random_frames=%d rounded up to %d: whole batches", algo.init_random_frames,
                 random_frames * ranks.world)
    tracker = EpisodeTracker(groups, cfg.env.num_envs, device)
    logger = make_logger(cfg.logger, out_dir) if ranks.is_main else None
    run.started()
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=algo.amp, cache_enabled=not graphed)
    clock = Stopwatch(device)
    within, after = target_updates(trained)  # soft updates inside the (captured) step, hard ones after it
    gradient_step = GradientStep(trained, optimizer, algo, amp, graphed, device, ranks, then=within)
    profiler = IterationProfiler(cfg.profile_iteration, run.iteration, device, out_dir)
    limit = TimeLimit(cfg.time_limit_s, ranks, device)
    losses = {}
    with logging_redirect_tqdm(), tqdm(total=run.total_frames, initial=run.frames_done, unit="frames",
                                       disable=not ranks.is_main) as pbar:
        for batch, collector in batches(cfg, run, policy, random_frames):
            collect_s = clock.lap()
            limit.check_collection(collect_s)
            run.iteration += 1
            batch_frames = batch.numel() * ranks.world  # every rank's batch
            frames_before, run.frames_done = run.frames_done, run.frames_done + batch_frames
            tracker.update(batch)
            with_group_done_flags(batch, groups)  # MPE: its root done flags, per agent for the losses
            for agent in agents_by_group.values():
                agent.prepare(batch)
            buffer.extend(batch.reshape(-1))
            exploration = {}
            for g, agent in agents_by_group.items():
                exploration.update({f"{k}/{g or 'agent'}": v
                                    for k, v in agent.explore_at(run.frames_done, run.total_frames).items()})
            # each rank's frames and buffer: its gradient steps (every one averaged over the ranks)
            due = gradient_steps_due(frames_before // ranks.world, run.frames_done // ranks.world, random_frames,
                                     algo.frames_per_gradient_step) if len(buffer) >= algo.minibatch_size else 0
            steps_done = 0
            for steps_done in range(1, due + 1):
                losses = gradient_step(buffer.sample())
                after()
                if limit.reached():  # every rank stops at the same step (each waits for all of them)
                    break
            steps_total += steps_done
            if collector is not None:
                collector.update_policy_weights_()
            update_s = clock.lap()
            profiler.step()

            row = {"frames": run.frames_done, "iteration": run.iteration, "time/collect_s": collect_s,
                   "time/update_s": update_s, "gradient_steps": steps_done, "buffer_frames": len(buffer),
                   **exploration, **tracker.summary(), **{k: v.item() for k, v in losses.items()},
                   "agent_steps_per_s": run.agent_steps_per_s(),
                   "gradient_steps_per_s": steps_done / update_s if update_s > 0 else math.nan}
            run.record(row, logger, pbar, frames_before, clocks=(clock, limit))
            if limit.reached(batch_end=True):
                limit.say_stopped(run.iteration, steps_done, due)
                break
    return finish_run(run, limit.hit, {"memory_estimate_gib": needed / 2**30, "gradient_steps": steps_total})


def memory_parts(cfg: DictConfig, env, policy, batches_in_place: bool) -> dict:
    """The run's working set by part, ``{what: bytes}``, from the env's specs: the replay
    buffer (``algo.buffer_size`` frames as the collector writes them, plus per-agent done flags),
    the collector's batches (in place on CUDA: one; TorchRL's ``Collector``:
    :data:`~torchrl_warp.memory.COLLECTOR_BATCHES`), and a gradient step (a minibatch and a rough
    count of its networks' activations: online and target passes over the observation and the
    next one, each hidden layer's output and gradient, per agent)."""
    frame = frame_bytes(env, policy)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    agents = sum(1 if g is None else env.layout.groups[g] for g in groups)
    frames_per_batch = cfg.env.num_envs * cfg.env.steps_per_batch
    stored = frame + 2 * agents  # the per-agent done flags the losses read
    activations = 4 * agents * 2 * 3 * 2 * sum(cfg.algo.hidden)  # 2 observations x 3 networks x output and grad
    batch = frames_per_batch * frame
    return {f"replay buffer of {cfg.algo.buffer_size} frames": cfg.algo.buffer_size * stored,
            "collected batches": batch if batches_in_place else int(COLLECTOR_BATCHES * batch),
            "a gradient step": cfg.algo.minibatch_size * (stored + activations)}


def memory_needed(cfg: DictConfig, on_gpu: bool, build_agents) -> int:
    """Bytes a run of ``cfg`` needs (what :func:`train` checks before it starts), on a GPU (the
    batches in place, with ``env.graphed_rollout``) or on the CPU; the env and networks are built
    on the CPU, only their specs and sizes are read."""
    device = torch.device("cpu")
    env = make_env(cfg, device, cfg.env.num_envs, cfg.seed)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    agents = build_agents(cfg, env, groups, device, None)
    policy = collection_policy({g: agents[g or "agent"] for g in groups})
    return sum(memory_parts(cfg, env, policy, on_gpu and cfg.env.graphed_rollout).values())
