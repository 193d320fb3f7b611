"""On-policy training: PPO (single-agent envs), MAPPO and IPPO (agent groups), read top to
bottom in :func:`train`.

Each batch: a ``Collector`` (or, on CUDA, a :class:`~torchrl_warp.graphed_collector.GraphedCollector`
replaying the whole batch as one graph) with env and policy on one device; (multi-agent) GAE
per group; ``algo.epochs`` passes of minibatches gathered on the device from the batch in
place; per group a ``ProbabilisticActor`` over ``MultiAgentMLP`` (categorical, or for
continuous actions ``TanhNormal`` within the spec's bounds) and a critic (MAPPO's
centralised), trained by ``ClipPPOLoss`` / ``MAPPOLoss`` / ``IPPOLoss`` (recipes/losses.py).

Example:
    >>> from omegaconf import OmegaConf
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> algo = OmegaConf.create(dict(name="ppo", hidden=[8], reward_scale=1.0, clip_epsilon=0.2,
    ...                              entropy_coeff=0.0, critic_coeff=1.0, gamma=0.99, lmbda=0.95))
    >>> type(GroupAgent(CartPoleEnv(num_envs=2), None, algo, "cpu").loss).__name__
    'ClipPPOLossNoSync'
"""
from __future__ import annotations

import torch
from omegaconf import DictConfig
from tensordict import TensorDict, unravel_key
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, MultiCategorical
from torchrl.modules import MLP, MultiAgentMLP, ProbabilisticActor, TanhNormal
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from torchrl_warp.distributions import MultiCategoricalLogits
from torchrl_warp.graphed_collector import GraphedCollector
from torchrl_warp.memory import check_fits, gib, training_parts
from torchrl_warp.recipes.common import (
    GradientStep, IterationProfiler, Standardize, Stopwatch, TimeLimit, annealed, finish_run, key, log, make_env,
    set_lr, start_run, with_group_done_flags,
)
from torchrl_warp.recipes.losses import LOSSES
from torchrl_warp.recipes.metrics import EpisodeTracker, count_tags, make_logger

#: the algorithms this module trains (``algo.name``)
ALGOS = ("ppo", "mappo", "ippo")


def tanh_normal_policy(net, spec: Bounded, agents: tuple, device):
    """``net`` (writing 2 x the action's dims per agent) as a TanhNormal policy within ``spec``'s
    bounds: ``(actor_net, distribution, its kwargs, the net's output keys)``. ``agents``: the
    bounds' agent dims in one env (``(n,)`` for a group, ``()`` for one agent); the batch dims
    are dropped (the bounds are the same in every env)."""
    dim = spec.shape[-1]
    low, high = (b.reshape(-1, *agents, dim)[0].to(device) for b in (spec.space.low, spec.space.high))
    return torch.nn.Sequential(net, NormalParamExtractor()), TanhNormal, {"low": low, "high": high}, ["loc", "scale"]


class GroupAgent(torch.nn.Module):
    """The actor, critic and loss of one agent group (or of the single agent).

    ``obs_stats=(loc, scale)`` puts a :class:`Standardize` in front of both networks
    (``algo.obs_norm``): Tag's features range from flags to distances of tens of steps.
    """

    def __init__(self, env, group, algo: DictConfig, device, obs_stats=None):
        super().__init__()
        obs_dim = env.layout.observation_shape_of(group)[-1]  # groups' may differ (MPE's simple_tag)
        spec = env.full_action_spec[key(group, "action")]
        params = ["logits"]  # what the actor's network writes, the distribution's arguments
        hidden = list(algo.hidden)
        # floats per frame the critic reads (every agent's observation) and holds in a hidden
        # layer (one row per agent, or one for the group: MAPPO's centralised critic)
        agents = 1 if group is None else env.layout.groups[group]
        centralised = group is None or algo.name == "mappo"
        self.reward_scale = algo.reward_scale
        self.critic_floats_per_frame = agents * obs_dim + (1 if centralised else agents) * max(algo.hidden)
        if group is None:  # one agent per env: plain MLPs, a categorical or TanhNormal policy
            if isinstance(spec, Bounded):  # continuous (Pendulum, MountainCarContinuous)
                net = MLP(in_features=obs_dim, out_features=2 * spec.shape[-1], num_cells=hidden,
                          activation_class=torch.nn.Tanh, device=device)
                actor_net, dist, dist_kwargs, params = tanh_normal_policy(net, spec, (), device)
            else:
                actor_net = MLP(in_features=obs_dim, out_features=spec.space.n, num_cells=hidden,
                                activation_class=torch.nn.Tanh, device=device)
                dist, dist_kwargs = torch.distributions.Categorical, {}
            critic_net = MLP(in_features=obs_dim, out_features=1, num_cells=hidden,
                             activation_class=torch.nn.Tanh, device=device)
        else:  # a group of agents sharing a policy; MAPPO's critic sees the whole group
            n = env.layout.groups[group]
            mlp = dict(n_agents=n, share_params=True, depth=len(hidden), num_cells=hidden,
                       activation_class=torch.nn.Tanh, device=device)
            if isinstance(spec, Bounded):  # continuous (MPE): a TanhNormal within the spec's bounds
                net = MultiAgentMLP(obs_dim, 2 * spec.shape[-1], centralized=False, **mlp)
                actor_net, dist, dist_kwargs, params = tanh_normal_policy(net, spec, (n,), device)
            elif isinstance(spec, MultiCategorical):  # Tag, MPE's multidiscrete_actions (a Categorical too)
                nvec = spec.nvec.reshape(-1, spec.shape[-1])[0].tolist()
                actor_net = MultiAgentMLP(obs_dim, sum(nvec), centralized=False, **mlp)
                dist, dist_kwargs = MultiCategoricalLogits, {"nvec": nvec}
            elif isinstance(spec, Categorical):  # MPE's discrete actions: one index per agent
                actor_net = MultiAgentMLP(obs_dim, spec.space.n, centralized=False, **mlp)
                dist, dist_kwargs = torch.distributions.Categorical, {}
            else:
                raise TypeError(f"group {group!r}: the recipe trains Bounded, Categorical or MultiCategorical "
                                f"actions, not {type(spec).__name__}")
            critic_net = MultiAgentMLP(obs_dim, 1, centralized=algo.name == "mappo", **mlp)
        if obs_stats is not None:
            actor_net = torch.nn.Sequential(Standardize(*obs_stats), actor_net)
            critic_net = torch.nn.Sequential(Standardize(*obs_stats), critic_net)
        self.actor = ProbabilisticActor(
            TensorDictModule(actor_net, in_keys=[key(group, "observation")],
                             out_keys=[key(group, p) for p in params]),
            in_keys={p: key(group, p) for p in params},
            out_keys=[key(group, "action")],
            distribution_class=dist,
            distribution_kwargs=dist_kwargs,
            return_log_prob=True,
        )
        self.critic = TensorDictModule(critic_net, in_keys=[key(group, "observation")],
                                       out_keys=[key(group, "state_value")])
        # functional=False: the loss calls our modules as they are, instead of swapping their
        # parameters in and out of them (TensorDict.to_module) around every call: same
        # gradients, a quarter less host time per loss call (docs/benchmarks.md)
        # without an entropy term (entropy_coeff 0: CartPole) the loss computes no entropy, and
        # no explained variance (a diagnostic we do not log): each is kernels and host time
        # on every gradient step
        self.loss = LOSSES[algo.name](
            self.actor, self.critic, clip_epsilon=algo.clip_epsilon, entropy_coeff=algo.entropy_coeff,
            entropy_bonus=algo.entropy_coeff > 0, log_explained_variance=False,
            critic_coeff=algo.critic_coeff, normalize_advantage=True, functional=False,
        )
        if group is not None:
            self.loss.set_keys(
                reward=key(group, "reward"), action=key(group, "action"),
                sample_log_prob=key(group, "action_log_prob"), value=key(group, "state_value"),
                advantage=key(group, "advantage"), value_target=key(group, "value_target"),
                done=key(group, "done"), terminated=key(group, "terminated"),
            )
        self.loss.make_value_estimator(self.loss.default_value_estimator, gamma=algo.gamma, lmbda=algo.lmbda)

    def advantage(self, batch, chunk_floats: int = 1 << 29):
        """GAE into ``batch`` (``[envs, time]``), a slice of envs at a time, to bound the
        critic's temporaries (IPPO's over 2048 envs x 100 steps x 100 runners: 21 GB per
        hidden layer) to ~``chunk_floats`` floats each. Each env's trajectory is in one
        slice, so this is exact. Slices are as large as that allows: each one's value
        estimator asks the device whether its inputs hold a NaN (a host sync).
        Rewards are multiplied by ``algo.reward_scale`` here, so the critic learns scaled
        values; the logged returns stay unscaled."""
        frames = max(1, chunk_floats // self.critic_floats_per_frame)
        added = []
        reward = unravel_key(("next", self.loss.tensor_keys.reward))
        for part in batch.split(max(1, frames // batch.shape[1]), 0):
            inputs = part.copy()  # the structure only: entries set on it leave ``batch`` alone
            if self.reward_scale != 1.0:
                inputs.set(reward, part.get(reward) * self.reward_scale)
            out = self.loss.value_estimator(inputs)
            added.append(out.exclude(*part.keys(True, True)))
        batch.update(torch.cat(added, 0))

    def loss_value(self, minibatch) -> tuple[torch.Tensor, dict]:
        out = self.loss(minibatch)
        total = out["loss_objective"] + out["loss_critic"] + out.get("loss_entropy", 0.0)
        return total, {k: v.detach() for k, v in out.items() if k.startswith("loss_")}


def without_next_observations(batch, groups):
    """``batch`` without ``("next", group, "observation")``: the losses do not read it (GAE,
    which does, runs before), and it is half of the observations a batch holds.

    >>> from tensordict import TensorDict
    >>> td = TensorDict({"observation": torch.zeros(3, 2), "next": {"observation": torch.zeros(3, 2)}}, [3])
    >>> sorted(without_next_observations(td, [None]).keys(True, True))
    ['observation']
    """
    keys = [("next", "observation") if g is None else ("next", g, "observation") for g in groups]
    return batch.exclude(*keys)


def minibatches(batch, size: int, epochs: int):
    """A PPO update's minibatches: ``epochs`` passes over the frames of ``batch``
    (``[envs, steps]``), each pass in a new random order, ``size`` frames a minibatch, the
    remainder of a pass left out. These are the minibatches, and the random draws, of
    TorchRL's ``ReplayBuffer(LazyTensorStorage(...), SamplerWithoutReplacement(drop_last=True))``
    extended with ``batch.reshape(-1)`` (the sampler draws a pass's order on the storage's
    device, and the next one as it hands out a pass's last minibatch), gathered from
    ``batch`` where it is instead of from a copy of it: a batch less of memory.

    >>> td = TensorDict({"x": torch.arange(6).reshape(2, 3)}, [2, 3])
    >>> [mb["x"].shape for mb in minibatches(td, 4, epochs=2)]
    [torch.Size([4]), torch.Size([4])]
    """
    steps = batch.shape[1]
    frames, per_pass = batch.numel(), batch.numel() // size
    order = torch.randperm(frames, device=batch.device)
    for _ in range(epochs):
        for i in range(per_pass):
            index = order[i * size:(i + 1) * size]
            if i == per_pass - 1:
                order = torch.randperm(frames, device=batch.device)
            yield batch[index // steps, index % steps]


def collection_policy(actors) -> TensorDictSequential:
    """The actors as one policy that writes only what the losses read, the actions and their
    log-probabilities: their distributions' arguments (logits: 42 floats per Tag agent) stay out
    of the batch.

    >>> from omegaconf import OmegaConf
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> env = CartPoleEnv(num_envs=2)
    >>> agent = GroupAgent(env, None, OmegaConf.create(dict(name="ppo", hidden=[8], reward_scale=1.0,
    ...     clip_epsilon=0.2, entropy_coeff=0.0, critic_coeff=1.0, gamma=0.99, lmbda=0.95)), "cpu")
    >>> sorted(collection_policy([agent.actor])(env.reset()).keys())
    ['action', 'action_log_prob', 'done', 'observation', 'terminated', 'truncated']
    """
    keep = [k for actor in actors for k in actor.out_keys if k not in actor.module[0].out_keys]
    return TensorDictSequential(*actors, selected_out_keys=keep)


def build_agents(cfg: DictConfig, env, groups, device, obs_stats=None) -> torch.nn.ModuleDict:
    """One :class:`GroupAgent` per group (``"agent"`` for a single-agent env), with
    ``obs_stats[group]`` (``(loc, scale)``) in front of its networks if given."""
    return torch.nn.ModuleDict({g or "agent": GroupAgent(env, g, cfg.algo, device, obs_stats[g] if obs_stats else None)
                                for g in groups})


def make_optimizer(cfg: DictConfig, agents, device, ranks) -> torch.optim.Adam:
    """Adam over every network. Fused: one kernel for every parameter's update (CartPole,
    H200: 7.7 -> 6.4 ms of host time per gradient step, docs/benchmarks.md); a graph-captured
    step needs a capturable optimizer, its lr a tensor (changed in place: a captured float
    would stay fixed)."""
    graphed = graphed_update(cfg, device, ranks)
    lr = torch.tensor(cfg.algo.lr, device=device) if graphed else cfg.algo.lr
    return torch.optim.Adam(agents.parameters(), lr=lr, fused=device.type == "cuda", capturable=graphed)


def graphed_update(cfg: DictConfig, device, ranks) -> bool:
    """Whether each gradient step is a CUDA graph: ``algo.cudagraph_update`` on CUDA, one rank
    (several ranks' all-reduce of the gradients is not captured)."""
    return cfg.algo.cudagraph_update and torch.device(device).type == "cuda" and not ranks.distributed


def train(cfg: DictConfig, out_dir: str) -> dict:
    """Train PPO, MAPPO or IPPO on ``cfg`` and write the run to ``out_dir``: the logger's scalars,
    ``checkpoint.pt``, ``learning_curve.png``, ``summary.json`` and, with ``cfg.video``,
    ``video.gif``; returns the summary.

    The config, and the checkpoint ``cfg.resume`` names if any, are checked before any env
    is built (:func:`~torchrl_warp.recipes.common.start_run`).
    """
    run = start_run(cfg, out_dir, build_agents, make_optimizer)
    if isinstance(run, dict):  # the checkpoint has trained env.total_frames already
        return run
    env, groups, device, ranks, optimizer = run.env, run.groups, run.device, run.ranks, run.optimizer
    agents_by_group, frames_per_batch = run.agents_by_group, run.frames_per_batch
    graphed = graphed_update(cfg, device, ranks)
    policy = collection_policy([agents_by_group[g].actor for g in groups])
    # the batches, advantages and an update's temporaries, before any is allocated
    in_place = cfg.env.graphed_rollout and device.type == "cuda"  # GraphedCollector(copy_batches=False)
    needed = check_fits(
        f"training {cfg.env.name} with env.num_envs={cfg.env.num_envs} x env.steps_per_batch="
        f"{cfg.env.steps_per_batch} (frames per batch: {frames_per_batch})",
        memory_parts(cfg, env, policy, groups, in_place), device,
        "lower env.num_envs or env.steps_per_batch (a batch is their product), or algo.minibatch_size")
    log.info("memory: about %s on %s for batches, advantages and updates", gib(needed), device)
    frames_left = (run.total_frames - run.frames_done) // ranks.world
    if in_place:  # each batch one CUDA graph replay
        # each batch views the graph's memory (no copy): the update is done with it before the next
        collector = GraphedCollector(env, policy, frames_per_batch=frames_per_batch, total_frames=frames_left,
                                     track_traj_ids=False, copy_batches=False)
    else:
        collector = Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=frames_left,
                              device=device, storing_device=device, no_cuda_sync=True,
                              # GAE needs done flags only; trajectory ids cost a host sync per step
                              track_traj_ids=False,
                              # feed-forward policies need no env transforms; torchrl 0.14 flags an
                              # InitTracker as missing for any module policy (and 0.15 would append it,
                              # wrapping the env in a TransformedEnv off its lean step path)
                              auto_register_policy_transforms=False,
                              cudagraph_policy=cfg.env.cudagraph_policy and device.type == "cuda")
    # every minibatch full-sized (a graph-captured step takes one shape): each epoch draws
    # frames_per_batch // minibatch_size of them and leaves the remainder out; a minibatch
    # larger than a batch is the whole batch
    minibatch_size = min(cfg.algo.minibatch_size, frames_per_batch)
    tracker = EpisodeTracker(groups, cfg.env.num_envs, device)
    logger = make_logger(cfg.logger, out_dir) if ranks.is_main else None
    run.started()
    # no cast cache under a captured step: a cached cast would be a tensor of the capture
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.algo.amp, cache_enabled=not graphed)
    clock = Stopwatch(device)
    gradient_step = GradientStep(agents_by_group, optimizer, cfg.algo, amp, graphed, device, ranks)
    profiler = IterationProfiler(cfg.profile_iteration, run.iteration, device, out_dir)
    limit = TimeLimit(cfg.time_limit_s, ranks, device)
    steps_per_update = cfg.algo.epochs * (frames_per_batch // minibatch_size)
    # the log's console lines (the recipe's, TorchRL's, tensordict's: main()) print above the bar, not into it
    with logging_redirect_tqdm(), tqdm(total=run.total_frames, initial=run.frames_done, unit="frames",
                                       disable=not ranks.is_main) as pbar:
        for batch in collector:
            collect_s = clock.lap()
            limit.check_collection(collect_s)
            run.iteration += 1
            batch_frames = batch.numel() * ranks.world  # every rank's batch
            run.frames_done += batch_frames
            tracker.update(batch)
            with_group_done_flags(batch, groups)  # MPE: its root done flags, per agent for the losses
            with torch.no_grad():
                for g in groups:
                    agents_by_group[g].advantage(batch)
            left = annealed(run.frames_done - batch_frames, run.total_frames) if cfg.algo.anneal_lr else 1.0
            lr_now = cfg.algo.lr * left
            set_lr(optimizer, lr_now)
            for steps_done, minibatch in enumerate(
                    minibatches(without_next_observations(batch, groups), minibatch_size, cfg.algo.epochs), 1):
                losses = gradient_step(minibatch)
                if limit.reached():  # every rank stops at the same step (each waits for all of them)
                    break
            collector.update_policy_weights_()
            update_s = clock.lap()
            profiler.step()

            row = {"frames": run.frames_done, "iteration": run.iteration, "time/collect_s": collect_s,
                   "time/update_s": update_s, "lr": lr_now, **tracker.summary(),
                   **{k: v.item() for k, v in losses.items()}, "agent_steps_per_s": run.agent_steps_per_s()}
            if cfg.env.name == "tag":
                row["tags_per_env_step"] = count_tags(env, batch) / batch.numel()
            run.record(row, logger, pbar, run.frames_done - batch_frames, clocks=(clock, limit))
            if limit.reached(batch_end=True):
                limit.say_stopped(run.iteration, steps_done, steps_per_update)
                break
    collector.shutdown()
    # the recipe's estimate beside the training's peak (before evaluation): what a run needs
    return finish_run(run, limit.hit, {"memory_estimate_gib": needed / 2**30})


def memory_parts(cfg: DictConfig, env, policy, groups, batches_in_place: bool) -> dict:
    """The run's working set by part (:func:`torchrl_warp.memory.training_parts`): ``{what: bytes}``."""
    return training_parts(env, policy, groups, steps_per_batch=cfg.env.steps_per_batch,
                          minibatch_size=cfg.algo.minibatch_size, hidden=list(cfg.algo.hidden),
                          centralised_critic=cfg.algo.name == "mappo",
                          gae_chunk_floats=GroupAgent.advantage.__defaults__[0], batches_in_place=batches_in_place)


def memory_needed(cfg: DictConfig, on_gpu: bool) -> int:
    """Bytes a run of ``cfg`` needs (what the recipe checks before it starts), on a GPU (batches
    in place, with ``env.graphed_rollout``) or on the CPU, without a GPU: the env and networks
    are built on the CPU, only their specs and sizes are read. (Each family has its own:
    ``recipes.train.family(algo).memory_needed``.)"""
    device = torch.device("cpu")
    env = make_env(cfg, device, cfg.env.num_envs, cfg.seed)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    actors = [GroupAgent(env, g, cfg.algo, device).actor for g in groups]
    return sum(memory_parts(cfg, env, collection_policy(actors), groups, on_gpu and cfg.env.graphed_rollout).values())
