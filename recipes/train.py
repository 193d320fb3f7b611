"""Train PPO, MAPPO or IPPO on a torchrl-warp environment: the whole loop in one file.

    python -m torchrl_warp.recipes.train                          # CartPole + PPO (CPU or GPU)
    python -m torchrl_warp.recipes.train env=tag algo=mappo       # Tag: taggers vs runners
    python -m torchrl_warp.recipes.train env=tag algo=ippo device=cuda env.num_envs=1024
    python -m torchrl_warp.recipes.train env=mpe algo=mappo       # MPE simple_spread (env.scenario=...)

Everything is TorchRL: a ``Collector`` with env and policy on one device, ``MultiAgentMLP``
actors and critics (one set per agent group), ``ProbabilisticActor`` (categorical, or for
continuous MPE actions ``TanhNormal`` within the spec's bounds), ``ClipPPOLoss`` /
``MAPPOLoss`` / ``IPPOLoss`` with (multi-agent) GAE, minibatches gathered on the device from
the batch in place, a TorchRL logger. Written to Hydra's run directory: ``train/scalars/*.csv`` (or TensorBoard
events), ``checkpoint.pt`` (models and optimizer; ``resume=<path>`` continues from it),
``learning_curve.png``, ``summary.json`` and, with ``video`` (on CUDA by default),
``video.gif`` of the trained agents (recipes/play.py).

The config (every key and value's range: recipes/config.py) is checked before torch loads and
Hydra makes a run directory (a config error: ``error: ...`` lines, exit status 2), and with the
checkpoint to resume from (recipes/checkpoint.py) again before any env is built.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time

_IMPORTED = time.perf_counter()  # where /proc is missing, wall time is reported from here
log = logging.getLogger("torchrl_warp.recipes.train")
if __name__ == "__main__":  # the command line's config, checked before torch, TorchRL and Numba load (seconds)
    from torchrl_warp.recipes.config import command_line_config, exit_on_config_error

    _COMMAND_LINE_CONFIG = exit_on_config_error(command_line_config, sys.argv[1:])

import hydra  # noqa: E402
import torch  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from tensordict import TensorDict, unravel_key  # noqa: E402
from tensordict.nn import TensorDictModule, TensorDictSequential  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402
from tensordict.nn import NormalParamExtractor  # noqa: E402
from torchrl.data import Bounded, Categorical, MultiCategorical  # noqa: E402
from torchrl.modules import MLP, MultiAgentMLP, ProbabilisticActor, TanhNormal  # noqa: E402
from tqdm import tqdm  # noqa: E402
from tqdm.contrib.logging import logging_redirect_tqdm  # noqa: E402

from torchrl_warp.capture import numba_frees_deferred  # noqa: E402
from torchrl_warp.distributions import MultiCategoricalLogits  # noqa: E402
from torchrl_warp.memory import check_fits, gib, training_parts  # noqa: E402
from torchrl_warp.graphed_collector import GraphedCollector  # noqa: E402
from torchrl_warp.envs import AcrobotEnv, CartPoleEnv, MountainCarContinuousEnv, MountainCarEnv, MPEEnv, PendulumEnv, \
    TagEnv, TagGridWorldEnv  # noqa: E402
from torchrl_warp.recipes.checkpoint import load_checkpoint, restore, save_checkpoint  # noqa: E402
from torchrl_warp.recipes.distributed import Ranks  # noqa: E402
from torchrl_warp.recipes.config import (  # noqa: E402
    check_config, check_env_params, cpu_batch_warning, exit_on_config_error, register,
)
from torchrl_warp.recipes.losses import LOSSES  # noqa: E402
from torchrl_warp.recipes.metrics import (  # noqa: E402
    EpisodeTracker, count_tags, make_logger, plot_learning_curve, tags_per_episode,
)
from torchrl_warp.recipes.mpe_scripted import UniformRandom, gap_closed, mean_episode_returns  # noqa: E402
from torchrl_warp.recipes.scripted import Steer  # noqa: E402

register()


def mpe_env(num_envs: int = 1, device="cpu", *, scenario: str = "simple_spread", **kwargs):
    """``MPEEnv(scenario, ...)`` called as the other envs are (``scenario`` a keyword)."""
    return MPEEnv(scenario, num_envs=num_envs, device=device, **kwargs)


ENVS = {"tag": TagEnv, "tag_gridworld": TagGridWorldEnv, "cartpole": CartPoleEnv, "acrobot": AcrobotEnv,
        "mountain_car": MountainCarEnv, "mountain_car_continuous": MountainCarContinuousEnv, "pendulum": PendulumEnv,
        "mpe": mpe_env}


def env_defaults(cfg) -> dict:
    """The env's parameters as its constructor defaults them, for comparing ``env.params`` with a
    checkpoint's: MPE's are its scenario's, with ``MPEEnv``'s own defaults (``max_steps=None``:
    no limit, 0) over the class's.

    >>> from omegaconf import OmegaConf
    >>> env_defaults(OmegaConf.create({"env": {"name": "mpe", "scenario": "simple_spread"}}))["max_steps"]
    0
    """
    if cfg.env.name != "mpe":
        return ENVS[cfg.env.name].defaults
    import importlib
    import inspect

    from torchrl_warp.envs.mpe import SCENARIOS

    importlib.import_module(f"torchrl_warp.envs.{cfg.env.scenario}")  # registers it in SCENARIOS
    signature = inspect.signature(MPEEnv).parameters
    defaults = dict(SCENARIOS[cfg.env.scenario].defaults)
    for name in ("continuous_actions", "categorical_actions"):
        defaults[name] = signature[name].default
    defaults["max_steps"] = signature["max_steps"].default or 0
    return defaults


def key(group, name):
    """TensorDict key of ``name`` for an agent group (``None``: a single-agent env's root)."""
    return name if group is None else (group, name)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def make_env(cfg: DictConfig, device, num_envs: int, seed: int):
    """``num_envs`` envs of ``cfg.env.name`` with ``cfg.env.params`` (MPE: ``cfg.env.scenario``) on
    ``device``, seeded with ``seed``; actions unchecked (``check_actions=False``)."""
    if cfg.env.name not in ENVS:
        raise ValueError(f"unknown env {cfg.env.name!r}; expected one of {sorted(ENVS)}")
    params = OmegaConf.to_container(cfg.env.params)
    if cfg.env.name == "mpe":  # out-of-range continuous actions are clamped in the kernel (check_actions=False)
        params["scenario"] = cfg.env.scenario
    return ENVS[cfg.env.name](num_envs=num_envs, device=device, seed=seed, check_actions=False, **params)


class Standardize(torch.nn.Module):
    """``(x - loc) / scale`` over the last dim, with fixed buffers (saved with the model),
    as one ``x * (1 / scale) + (-loc / scale)``: a single pass over the observations
    (they are the largest tensors of an update: 1.4 GB per minibatch of 32768 Tag frames).

    >>> Standardize(torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0]))(torch.tensor([3.0, 5.0]))
    tensor([1., 5.])
    """

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.register_buffer("inv_scale", 1.0 / scale)
        self.register_buffer("shift", -loc / scale)

    def forward(self, x):
        return torch.addcmul(self.shift, x, self.inv_scale)


def observation_stats(env, groups, steps: int, ranks: Ranks = Ranks()) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and scale of the observations of ``steps`` random-action steps,
    accumulated step by step (a stored rollout of a large batch of envs would not fit
    in memory).

    The scale is the standard deviation, or 1 for features that do not vary in the
    rollout (flags that are constant at the start of an episode): dividing by a tiny
    deviation would blow them up when they do change.
    """
    dim = env.layout.observation_shape[-1]
    total = total_sq = 0.0
    count = 0
    with torch.no_grad():
        td = env.reset()
        for _ in range(steps):
            out, td = env.step_and_maybe_reset(env.rand_action(td))
            obs = torch.cat([out["next", key(g, "observation")].reshape(-1, dim) for g in groups])
            obs = obs.double()
            total, total_sq, count = total + obs.sum(0), total_sq + obs.square().sum(0), count + obs.shape[0]
    return _loc_and_scale(total, total_sq, count, ranks)


def _loc_and_scale(total, total_sq, count: int, ranks: Ranks) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and scale (1 where the deviation is tiny) from float64 sums over ``count`` rows,
    summed over every rank's rollout first (torchrun: every rank normalises alike)."""
    if ranks.distributed:
        counts = torch.tensor(float(count), dtype=torch.float64, device=total.device)
        ranks.sum_(total, total_sq, counts)
        count = counts.item()
    loc = total / count
    std = (total_sq / count - loc.square()).clamp_min(0).mul(count / max(count - 1, 1)).sqrt()
    loc, std = loc.float(), std.float()
    return loc, torch.where(std > 1e-3, std, torch.ones_like(std))


def observation_stats_by_group(env, groups, steps: int, ranks: Ranks = Ranks()) -> dict:
    """:func:`observation_stats` of each group's own observations (MPE: groups whose
    observations differ in size and meaning, simple_tag's adversaries and good agents):
    ``{group: (loc, scale)}``, from one random-action rollout."""
    total = {g: 0.0 for g in groups}
    total_sq = {g: 0.0 for g in groups}
    count = {g: 0 for g in groups}
    with torch.no_grad():
        td = env.reset()
        for _ in range(steps):
            out, td = env.step_and_maybe_reset(env.rand_action(td))
            for g in groups:
                obs = out["next", key(g, "observation")]
                obs = obs.reshape(-1, obs.shape[-1]).double()
                total[g], total_sq[g] = total[g] + obs.sum(0), total_sq[g] + obs.square().sum(0)
                count[g] += obs.shape[0]
    return {g: _loc_and_scale(total[g], total_sq[g], count[g], ranks) for g in groups}


def with_group_done_flags(batch, groups):
    """``batch`` with ``("next", group, "done" / "terminated")`` for groups that lack them: MPE's
    done flags are the env's (``VmasEnv``'s, at the root), the multi-agent losses read one per
    agent, so the root's are expanded over the group's agents (a view, no copy). Envs with
    their own per-group flags (Tag) are left as they are.

    >>> from tensordict import TensorDict
    >>> td = TensorDict({"next": {"done": torch.zeros(2, 5, 1, dtype=torch.bool),
    ...                           "agents": TensorDict({"reward": torch.zeros(2, 5, 3, 1)}, [2, 5, 3])}}, [2, 5])
    >>> with_group_done_flags(td, ["agents"])["next", "agents", "done"].shape
    torch.Size([2, 5, 3, 1])
    """
    for g in groups:
        if g is None:
            continue
        shape = batch.get(("next", g, "reward")).shape
        for flag in ("done", "terminated"):
            root = batch.get(("next", flag), None)
            if root is not None and batch.get(("next", g, flag), None) is None:
                batch.set(("next", g, flag), root.unsqueeze(-1).expand(shape))
    return batch


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

    >>> from torchrl_warp.envs import CartPoleEnv
    >>> env = CartPoleEnv(num_envs=2)
    >>> agent = GroupAgent(env, None, OmegaConf.create(dict(name="ppo", hidden=[8], reward_scale=1.0,
    ...     clip_epsilon=0.2, entropy_coeff=0.0, critic_coeff=1.0, gamma=0.99, lmbda=0.95)), "cpu")
    >>> sorted(collection_policy([agent.actor])(env.reset()).keys())
    ['action', 'action_log_prob', 'done', 'observation', 'terminated', 'truncated']
    """
    keep = [k for actor in actors for k in actor.out_keys if k not in actor.module[0].out_keys]
    return TensorDictSequential(*actors, selected_out_keys=keep)


def first_episode(td) -> torch.Tensor:
    """``[num_envs, T]``: True at the steps of each env's first episode in a rollout ``td``.

    >>> done = torch.tensor([[False, True, False], [False, False, False]]).unsqueeze(-1)
    >>> first_episode(TensorDict({"next": {"done": done}}, [2, 3]))
    tensor([[ True,  True, False],
            [ True,  True,  True]])
    """
    done = td["next", "done"].squeeze(-1)
    return (done.cumsum(1) - done.long()) == 0


def tag_rate_and_steps(td) -> tuple[float, float]:
    """Of each env's first episode in a rollout ``td``: the fraction that ended in a tag
    (``terminated``, not at the time limit), and the mean number of steps.

    >>> done = torch.tensor([[False, True, True], [False, False, True]]).unsqueeze(-1)
    >>> terminated = torch.tensor([[False, True, False], [False, False, False]]).unsqueeze(-1)
    >>> tag_rate_and_steps(TensorDict({"next": {"done": done, "terminated": terminated}}, [2, 3]))
    (0.5, 2.5)
    """
    first = first_episode(td)
    tagged = (td["next", "terminated"].squeeze(-1) & first).any(1)
    return tagged.float().mean().item(), first.sum(1).float().mean().item()


@torch.no_grad()
def evaluate(cfg, agents, device) -> dict:
    """Evaluation on fresh envs: mean return of one episode per env, and for Tag tags per episode.

    The single-agent envs' policies act greedily; Tag's policies sample (a greedy Tag policy is a
    different, worse strategy than the one trained). MPE: :func:`evaluate_mpe`.
    """
    if cfg.env.name == "mpe":
        return evaluate_mpe(cfg, agents, device)
    env = make_env(cfg, device, cfg.eval_envs, seed=cfg.seed + 10_000)
    groups = list(agents)
    tag_like = cfg.env.name in ("tag", "tag_gridworld")
    steps = env.params.episode_length if tag_like else env.params.max_steps
    trained = TensorDictSequential(*[agents[g].actor for g in groups])
    mode = ExplorationType.RANDOM if tag_like else ExplorationType.DETERMINISTIC
    with set_exploration_type(mode):
        td = env.rollout(steps, trained, break_when_any_done=False)
    result = {}
    first = first_episode(td)  # one episode per env: count rewards up to the first done
    for g in groups:
        reward = td["next", key(g, "reward")]
        mask = first.reshape(first.shape + (1,) * (reward.dim() - 2))
        result[f"eval_return/{g or 'agent'}"] = ((reward * mask).sum(1).mean()).item()

    def random_taggers(tensordict):  # the baseline of both Tags: uniform-random taggers
        return tensordict.set(("taggers", "action"), env.full_action_spec["taggers", "action"].rand())

    if cfg.env.name == "tag_gridworld":
        # how often and how fast the taggers tag in each env's first episode: the trained
        # taggers against the trained runner, and uniform-random taggers against it
        result["eval_tag_rate"], result["eval_steps_to_tag"] = tag_rate_and_steps(td)
        env.set_seed(cfg.seed + 10_000)
        with set_exploration_type(mode):
            td = env.rollout(steps, TensorDictSequential(agents["runners"].actor, random_taggers),
                             break_when_any_done=False)
        result["eval_tag_rate_random_taggers"], result["eval_steps_to_tag_random_taggers"] = tag_rate_and_steps(td)
    if cfg.env.name == "tag":
        result["eval_tags_per_episode"] = tags_per_episode(env, td)

        # the baseline, uniform-random taggers against the trained runners, and yardsticks
        # (recipes/scripted.py): a scripted chaser against the trained runners, the trained
        # taggers against scripted fleeing runners
        for name, trained_group, other in (("random_taggers", "runners", random_taggers),
                                           ("chasing_taggers", "runners", Steer(env, "taggers", "runners")),
                                           ("vs_fleeing_runners", "taggers",
                                            Steer(env, "runners", "taggers", away=True))):
            env.set_seed(cfg.seed + 10_000)
            with set_exploration_type(mode):
                td = env.rollout(steps, TensorDictSequential(agents[trained_group].actor, other),
                                 break_when_any_done=False)
            result[f"eval_tags_per_episode_{name}"] = tags_per_episode(env, td)
        result["eval_tag_ratio"] = result["eval_tags_per_episode"] / max(result["eval_tags_per_episode_random_taggers"], 1e-9)
    return result


@torch.no_grad()
def evaluate_mpe(cfg, agents, device) -> dict:
    """MPE evaluation on ``eval_envs`` fresh envs, one episode (``max_steps``) each, every
    rollout from the same seed (the same initial positions): each group's mean episode
    return (mean over its agents and the envs)

    - ``eval_return/<group>``: the trained policies, sampling (as trained);
    - ``eval_return_deterministic/<group>``: the trained policies' means (TanhNormal: the
      tanh of its location; categorical: the most likely action);
    - with several groups, ``eval_return_random_<g>/<group>``: group ``g`` uniform-random
      against the others' trained policies (simple_tag: do the trained adversaries tag more
      than random ones, against the same trained good agents?);
    - simple_spread: ``eval_return_random/<group>`` (uniform-random agents) and
      ``eval_return_scripted/<group>`` (``GoToLandmark``: agent i straight to landmark i),
      and ``eval_gap_closed[_deterministic]/<group>``: the fraction of the random ->
      scripted gap the trained policy closes.
    """
    env = make_env(cfg, device, cfg.eval_envs, seed=cfg.seed + 10_000)
    groups = list(agents)
    steps = env.params.max_steps

    def returns(policy, mode=ExplorationType.RANDOM):
        env.set_seed(cfg.seed + 10_000)
        with set_exploration_type(mode):
            return mean_episode_returns(env, policy, steps)

    trained = TensorDictSequential(*[agents[g].actor for g in groups])
    result = {}
    for suffix, mode in (("", ExplorationType.RANDOM), ("_deterministic", ExplorationType.DETERMINISTIC)):
        for g, value in returns(trained, mode).items():
            result[f"eval_return{suffix}/{g}"] = value
    if len(groups) > 1:
        for g in groups:  # (in a TensorDictSequential: rollout would read a lambda's argument names as keys)
            mixed = TensorDictSequential(UniformRandom(env, [g]), *[agents[h].actor for h in groups if h != g])
            result.update({f"eval_return_random_{g}/{h}": value for h, value in returns(mixed).items()})
    if cfg.env.scenario == "simple_spread":
        from torchrl_warp.envs.simple_spread import GoToLandmark

        torch.manual_seed(cfg.seed + 10_000)
        for name, policy in (("random", UniformRandom(env)), ("scripted", GoToLandmark(env))):
            result.update({f"eval_return_{name}/{g}": value for g, value in returns(policy).items()})
        for suffix in ("", "_deterministic"):
            for g in groups:
                result[f"eval_gap_closed{suffix}/{g}"] = gap_closed(
                    result[f"eval_return{suffix}/{g}"], result[f"eval_return_random/{g}"],
                    result[f"eval_return_scripted/{g}"])
    return result


def train(cfg: DictConfig, out_dir: str) -> dict:
    """Train on ``cfg`` and write the run to ``out_dir``: the logger's scalars, ``checkpoint.pt``,
    ``learning_curve.png``, ``summary.json`` and, with ``cfg.video``, ``video.gif``; returns the
    summary.

    The config, and the checkpoint ``cfg.resume`` names if any, are checked before any env
    is built (:func:`~torchrl_warp.recipes.config.check_config`,
    :func:`~torchrl_warp.recipes.checkpoint.load_checkpoint`).
    """
    imports_seconds = seconds_since_launch()  # Python, torch, TorchRL, Numba, Hydra's config
    ranks = Ranks.from_environment()  # torchrun's ranks (recipes/distributed.py), or this process alone
    if not ranks.is_main:
        log.setLevel(logging.WARNING)  # rank 0 reports the run
    log.info("run directory: %s", out_dir)
    check_config(cfg)  # every key known, every value in its range, the algo fits the env
    check_env_params(cfg.env, ENVS)  # env.params: names the env takes
    # tensors and plain data, fitting cfg (env.params compared as the env resolves them)
    ckpt = load_checkpoint(cfg.resume, cfg, env_defaults(cfg)) if cfg.resume else None
    frames_per_batch = cfg.env.num_envs * cfg.env.steps_per_batch  # of each rank
    total_frames = whole_batches(cfg.env.total_frames, frames_per_batch * ranks.world)  # of all ranks
    if total_frames != cfg.env.total_frames:
        log.info("env.total_frames=%d rounded up to %d: whole batches of %d frames (env.num_envs x "
                 "env.steps_per_batch%s)", cfg.env.total_frames, total_frames, frames_per_batch * ranks.world,
                 f" x {ranks.world} ranks" if ranks.distributed else "")
    if ckpt is not None and ckpt["frames"] >= total_frames:
        log.info("nothing to do: %s has already trained %d of %d frames (raise env.total_frames to "
                 "train on)", cfg.resume, ckpt["frames"], total_frames)
        return {"frames": ckpt["frames"], "frames_this_run": 0, "finished_before": True}
    device = ranks.start(pick_device(cfg.device))  # a rank's own GPU (cuda:<local rank>) under torchrun
    if ranks.distributed:
        log.info("%d ranks (torchrun): %d envs each, gradients averaged over the ranks every step",
                 ranks.world, cfg.env.num_envs)
    torch.manual_seed(cfg.seed)
    torch.set_float32_matmul_precision(cfg.algo.matmul_precision.value)
    env = make_env(cfg, device, cfg.env.num_envs, cfg.seed + ranks.rank)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    if device.type == "cpu" and (advice := cpu_batch_warning(cfg.env.num_envs, cfg.env.steps_per_batch,
                                                             env.num_agents, cfg.algo.minibatch_size)):
        log.warning(advice)
    # with obs_norm the stats are buffers of the networks: a resumed run loads them from the checkpoint
    # (MPE: each group's own, its observations its own kind; Tag: one set for both groups)
    per_group = cfg.env.name == "mpe"
    stats_of = observation_stats_by_group if per_group else observation_stats
    obs_stats = stats_of(env, groups, cfg.env.steps_per_batch, ranks) if cfg.algo.obs_norm else None
    agents = torch.nn.ModuleDict({
        g or "agent": GroupAgent(env, g, cfg.algo, device, obs_stats[g] if per_group and obs_stats else obs_stats)
        for g in groups})
    agents_by_group = {g: agents[g or "agent"] for g in groups}
    # fused: one kernel for every parameter's update (CartPole, H200: 7.7 -> 6.4 ms of host
    # time per gradient step, docs/benchmarks.md); a graph-captured step needs a capturable
    # optimizer, its lr a tensor (changed in place: a captured float would stay fixed)
    # several ranks: an eager update (its all-reduce of the gradients is not captured in a graph)
    graphed = cfg.algo.cudagraph_update and device.type == "cuda" and not ranks.distributed
    lr = torch.tensor(cfg.algo.lr, device=device) if graphed else cfg.algo.lr
    optimizer = torch.optim.Adam(agents.parameters(), lr=lr, fused=device.type == "cuda", capturable=graphed)
    frames_done, iteration = 0, 0
    if ckpt is not None:  # Adam's moments from the checkpoint, its options this run's (device, graphs)
        frames_done, iteration = restore(ckpt, cfg.resume, agents, optimizer)
    ranks.broadcast_(agents)  # every rank starts from rank 0's parameters
    frames_at_start = frames_done  # the figures count this process's frames (all ranks')

    policy = collection_policy([agents_by_group[g].actor for g in groups])
    # the batches, advantages and an update's temporaries, before any is allocated
    in_place = cfg.env.graphed_rollout and device.type == "cuda"  # GraphedCollector(copy_batches=False)
    needed = check_fits(
        f"training {cfg.env.name} with env.num_envs={cfg.env.num_envs} x env.steps_per_batch="
        f"{cfg.env.steps_per_batch} (frames per batch: {frames_per_batch})",
        memory_parts(cfg, env, policy, groups, in_place), device,
        "lower env.num_envs or env.steps_per_batch (a batch is their product), or algo.minibatch_size")
    log.info("memory: about %s on %s for batches, advantages and updates", gib(needed), device)
    if in_place:  # each batch one CUDA graph replay
        # each batch views the graph's memory (no copy): the update is done with it before the next
        collector = GraphedCollector(env, policy, frames_per_batch=frames_per_batch,
                                     total_frames=(total_frames - frames_done) // ranks.world, track_traj_ids=False,
                                     copy_batches=False)
    else:
        collector = Collector(env, policy, frames_per_batch=frames_per_batch,
                              total_frames=(total_frames - frames_done) // ranks.world,
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
    checkpoint_path = os.path.join(out_dir, "checkpoint.pt")
    history = []
    agent_steps_per_frame = env.num_agents
    train_start = time.perf_counter()
    setup_seconds = seconds_since_launch() - imports_seconds  # envs, kernels compiled, obs stats, networks
    # no cast cache under a captured step: a cached cast would be a tensor of the capture
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.algo.amp, cache_enabled=not graphed)
    clock = Stopwatch(device)
    gradient_step = GradientStep(agents, agents_by_group, optimizer, cfg.algo, amp, graphed, device, ranks)
    profiler = IterationProfiler(cfg.profile_iteration, iteration, device, out_dir)
    limit = TimeLimit(cfg.time_limit_s, ranks, device)
    steps_per_update = cfg.algo.epochs * (frames_per_batch // minibatch_size)
    # the log's console lines (the recipe's, TorchRL's, tensordict's: main()) print above the bar, not into it
    with logging_redirect_tqdm(), tqdm(total=total_frames, initial=frames_done, unit="frames",
                                       disable=not ranks.is_main) as pbar:
        for batch in collector:
            collect_s = clock.lap()
            limit.check_collection(collect_s)
            iteration += 1
            batch_frames = batch.numel() * ranks.world  # every rank's batch
            frames_done += batch_frames
            tracker.update(batch)
            with_group_done_flags(batch, groups)  # MPE: its root done flags, per agent for the losses
            with torch.no_grad():
                for g in groups:
                    agents_by_group[g].advantage(batch)
            left = annealed(frames_done - batch_frames, total_frames) if cfg.algo.anneal_lr else 1.0
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

            row = {"frames": frames_done, "iteration": iteration, "time/collect_s": collect_s,
                   "time/update_s": update_s, "lr": lr_now, **tracker.summary(),
                   **{k: v.item() for k, v in losses.items()},
                   "agent_steps_per_s": ((frames_done - frames_at_start) * agent_steps_per_frame
                                         / (time.perf_counter() - train_start))}
            if cfg.env.name == "tag":
                row["tags_per_env_step"] = count_tags(env, batch) / batch.numel()
            history.append(row)
            for name, value in row.items():
                if logger is not None and name != "frames":
                    logger.log_scalar(name, value, step=frames_done)
            pbar.update(batch_frames)
            pbar.set_postfix({k: f"{v:.3g}" for k, v in row.items() if k.startswith("return/")})
            if iteration % cfg.checkpoint_every == 0 and ranks.is_main:
                save_checkpoint(checkpoint_path, agents, optimizer, frames_done, iteration, cfg)
            if limit.reached(batch_end=True):
                limit.say_stopped(iteration, steps_done, steps_per_update)
                break
    collector.shutdown()
    train_seconds = time.perf_counter() - train_start
    training_peak_gib = peak_memory_gib(device)
    frames_this_run = frames_done - frames_at_start
    ranks_agree = ranks.parameters_agree(agents)  # averaged gradients kept every rank's parameters equal
    if not ranks.is_main:  # rank 0 evaluates and writes the run
        ranks.stop()
        return {"rank": ranks.rank, "frames": frames_done, "ranks_agree": ranks_agree}
    save_checkpoint(checkpoint_path, agents, optimizer, frames_done, iteration, cfg)
    eval_start = time.perf_counter()
    evaluation = evaluate(cfg, agents_by_group, device)
    summary = {
        "env": cfg.env.name, **({"scenario": cfg.env.scenario} if cfg.env.name == "mpe" else {}),
        "algo": cfg.algo.name, "device": str(device), "frames": frames_done, "frames_this_run": frames_this_run,
        "agent_steps": frames_this_run * agent_steps_per_frame, "train_seconds": train_seconds,
        "time_limit_reached": limit.hit,
        "agent_steps_per_s": frames_this_run * agent_steps_per_frame / train_seconds,
        # the recipe's estimate beside the training's peak (before evaluation): what a run needs
        "memory_estimate_gib": needed / 2**30, "peak_memory_gib": training_peak_gib,
        "final": history[-1] if history else {}, **evaluation,
        **({"ranks": ranks.world, "ranks_agree": ranks_agree} if ranks.distributed else {}),
        # where the wall time went: launch -> imports -> setup -> training -> evaluation
        "imports_seconds": imports_seconds, "setup_seconds": setup_seconds,
        "eval_seconds": time.perf_counter() - eval_start, "wall_seconds_since_launch": seconds_since_launch(),
    }
    env_title = f"mpe {cfg.env.scenario}" if cfg.env.name == "mpe" else cfg.env.name
    plot_learning_curve(history, os.path.join(out_dir, "learning_curve.png"), title=f"{env_title} / {cfg.algo.name}")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "final"}, indent=1))
    log.info("run directory: %s (checkpoint.pt, summary.json, learning_curve.png, %s logs)", out_dir, cfg.logger)
    if cfg.video is True or (cfg.video == "auto" and device.type == "cuda"):  # recipes/play.py's video
        from torchrl_warp.recipes.play import record

        video = record(cfg, agents_by_group, device, os.path.join(out_dir, "video.gif"))
        log.info("video.gif: %d frames of env 0 (python -m torchrl_warp.recipes.play checkpoint=%s for more)",
                 video["frames"], checkpoint_path)
    ranks.stop()
    return summary


def memory_parts(cfg: DictConfig, env, policy, groups, batches_in_place: bool) -> dict:
    """The run's working set by part (:func:`torchrl_warp.memory.training_parts`): ``{what: bytes}``."""
    return training_parts(env, policy, groups, steps_per_batch=cfg.env.steps_per_batch,
                          minibatch_size=cfg.algo.minibatch_size, hidden=list(cfg.algo.hidden),
                          centralised_critic=cfg.algo.name == "mappo",
                          gae_chunk_floats=GroupAgent.advantage.__defaults__[0], batches_in_place=batches_in_place)


def memory_needed(cfg: DictConfig, on_gpu: bool) -> int:
    """Bytes a run of ``cfg`` needs (what the recipe checks before it starts), on a GPU (batches
    in place, with ``env.graphed_rollout``) or on the CPU, without a GPU: the env and networks
    are built on the CPU, only their specs and sizes are read."""
    device = torch.device("cpu")
    env = make_env(cfg, device, cfg.env.num_envs, cfg.seed)
    groups = list(env.layout.groups) if env.layout.groups else [None]
    actors = [GroupAgent(env, g, cfg.algo, device).actor for g in groups]
    return sum(memory_parts(cfg, env, collection_policy(actors), groups, on_gpu and cfg.env.graphed_rollout).values())


def peak_memory_gib(device) -> float:
    """The most memory this process has held: on a GPU, what torch's allocator gave out
    (``torch.cuda.max_memory_allocated``); on the CPU, the peak resident set (``ru_maxrss``).

    >>> peak_memory_gib(torch.device("cpu")) > 0
    True
    """
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def whole_batches(frames: int, frames_per_batch: int) -> int:
    """``frames`` rounded up to whole batches: what the collector gathers for it.

    >>> whole_batches(3_000_000, 32_768), whole_batches(512, 256)
    (3014656, 512)
    """
    return -(-frames // frames_per_batch) * frames_per_batch


def _process_start() -> float:
    """The ``time.perf_counter()`` reading at this process's start (Linux: ``/proc/self/stat``,
    to the kernel's clock tick), so the package's imports (torch, TorchRL: seconds) count
    too; elsewhere this module's import."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return min(time.perf_counter() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK")), _IMPORTED)
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_LAUNCHED = _process_start()


def seconds_since_launch() -> float:
    """Wall seconds since this Python process started (see :func:`_process_start`); one
    clock (``perf_counter``) for every reading, so time spans add up.

    >>> 0.0 < seconds_since_launch() < 24 * 3600
    True
    """
    return time.perf_counter() - _LAUNCHED


def annealed(frames_before: int, total_frames: int) -> float:
    """The fraction of the initial lr left after ``frames_before`` frames: linear to 0.

    >>> annealed(0, 100), annealed(75, 100), annealed(120, 100)
    (1.0, 0.25, 0.0)
    """
    return max(0.0, 1.0 - frames_before / total_frames)


def set_lr(optimizer, lr: float) -> None:
    """Set every group's lr; a tensor lr (a graph-captured step's) is filled in place."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


class GradientStep:
    """One gradient step on a minibatch: every group's loss (summed), backward, gradient
    clipping, the optimizer's step. Returns the losses' parts, detached, by name
    (``loss_objective/<group>``, ...).

    ``graphed`` (``algo.cudagraph_update``, CUDA): the step is captured once as a CUDA graph
    (tensordict's ``CudaGraphModule``, after two eager steps on a side stream) and replayed: the
    host then queues one graph per step instead of the hundreds of kernels of a loss, its
    backward and the optimizer, each with its Python overhead. The minibatch is copied into
    the graph's input buffers, so it must have the same keys and shapes every step. The
    recipe runs it eagerly under torchrun with several ranks (tests/nccl_graphed_update.py
    checks a captured NCCL all-reduce on one GPU; it has not been run on several).
    """

    def __init__(self, agents, agents_by_group, optimizer, algo, amp, graphed: bool, device, ranks: Ranks = Ranks()):
        self.agents, self.agents_by_group, self.optimizer = agents, agents_by_group, optimizer
        self.ranks = ranks
        self.max_grad_norm, self.amp = algo.max_grad_norm, amp
        self._step, self._device = self._eager, torch.device(device)
        self.graphed = graphed
        if graphed:
            from tensordict.nn import CudaGraphModule

            self._step = CudaGraphModule(self._eager, in_keys=[], out_keys=[], warmup=2, device=device)

    def __call__(self, minibatch) -> TensorDict:
        if not self.graphed:
            return self._step(minibatch)
        with numba_frees_deferred(self._device):  # the call that captures must not meet a Numba free
            return self._step(minibatch)

    def _eager(self, minibatch) -> TensorDict:
        total = 0.0
        losses = {}
        with self.amp:
            for g, agent in self.agents_by_group.items():
                loss, parts = agent.loss_value(minibatch)
                total = total + loss
                losses.update({f"{k}/{g or 'agent'}": v for k, v in parts.items()})
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.ranks.average_gradients_(self.agents.parameters())  # torchrun: the mean of the ranks' gradients
        torch.nn.utils.clip_grad_norm_(self.agents.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return TensorDict(losses, batch_size=[])


class Stopwatch:
    """Seconds between laps, with the device's queued work finished at each lap."""

    def __init__(self, device):
        self.device = device
        self.last = time.perf_counter()

    def lap(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds


class TimeLimit:
    """``time_limit_s`` seconds of training (0: none) from its creation, checked after every
    gradient step: a run stops within one step of the limit (under torchrun with several
    ranks, at the end of the batch, every rank at the same one). A batch's collection is not
    cut short.

    >>> limit = TimeLimit(0.0)
    >>> limit.reached(), limit.hit
    (False, False)
    """

    def __init__(self, seconds: float, ranks: Ranks = Ranks(), device=None):
        self.seconds, self.ranks, self.device = seconds, ranks, device
        self.start = time.perf_counter()
        self.hit, self.batches = False, 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def reached(self, batch_end: bool = False) -> bool:
        """Whether the limit has passed (on any rank): the run stops after this gradient step.
        With several ranks it is asked at a batch's end only: agreeing is an all-reduce and a
        host sync, which after every gradient step would stall each rank's queue of work."""
        if self.seconds and not self.hit and (batch_end or not self.ranks.distributed):
            self.hit = self.ranks.any(self.elapsed() > self.seconds, self.device)
        return self.hit

    def check_collection(self, collect_s: float) -> None:
        """Call after each collection: says so when the first one alone outlasted the limit."""
        self.batches += 1
        if self.batches == 1 and self.seconds and self.elapsed() > self.seconds:
            log.warning("time limit of %g s passed while collecting the first batch (%.1f s; a collection is not "
                        "cut short): one gradient step, then the run stops; for shorter batches lower env.num_envs "
                        "or env.steps_per_batch", self.seconds, collect_s)

    def say_stopped(self, iteration: int, steps_done: int, steps_per_update: int) -> None:
        log.info("time limit of %g s reached after %.1f s of training, at gradient step %d of %d of iteration %d: "
                 "stopping", self.seconds, self.elapsed(), steps_done, steps_per_update, iteration)


class IterationProfiler:
    """Profiles one training iteration (its collection, then its update) with torch.profiler.

    Writes the ops that took the most device time and host time to ``profile.txt``.
    ``iteration`` is 1-based; 0 profiles nothing. Call :meth:`step` after each iteration.
    """

    def __init__(self, iteration: int, done_iterations: int, device, out_dir: str):
        self.device, self.out_dir, self.prof = device, out_dir, None
        self.wait = iteration - done_iterations - 1 if iteration > done_iterations else -1
        if self.wait == 0:
            self._start()

    def step(self) -> None:
        if self.prof is not None:
            self._stop()
        self.wait -= 1
        if self.wait == 0:
            self._start()

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.prof = profile(activities=activities)
        self.prof.__enter__()

    def _stop(self) -> None:
        self.prof.__exit__(None, None, None)
        averages = self.prof.key_averages()
        device_sort = "cuda_time_total" if self.device.type == "cuda" else "cpu_time_total"
        with open(os.path.join(self.out_dir, "profile.txt"), "w") as f:
            f.write(averages.table(sort_by=device_sort, row_limit=30) + "\n")
            f.write(averages.table(sort_by="self_cpu_time_total", row_limit=30) + "\n")
        self.prof = None


def to_the_run_log(*names: str) -> None:
    """Libraries' loggers (TorchRL's and tensordict's have console handlers of their own, TorchRL's
    in colour codes) through the run's handlers instead: Hydra's console line format and
    ``train.log``, and above the progress bar while it runs (``logging_redirect_tqdm``). Each
    keeps the level its handlers let through (``RL_LOGGING_LEVEL`` still applies)."""
    for name in names:
        library = logging.getLogger(name)
        levels = [library.level] + [h.level for h in library.handlers]
        for handler in list(library.handlers):
            library.removeHandler(handler)
        library.setLevel(max(levels))
        library.propagate = True


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """The Hydra app, ``python -m torchrl_warp.recipes.train [overrides]``: :func:`train` into
    Hydra's run directory (a failure is logged to its ``train.log``, then raised)."""
    logging.getLogger("numba").setLevel(logging.WARNING)  # its CUDA driver's INFO lines are not ours
    to_the_run_log("torchrl", "tensordict")  # their own handlers print coloured lines into the progress bar
    try:
        train(cfg, HydraConfig.get().runtime.output_dir)
    except Exception as error:  # the run directory's train.log says why it stopped
        log.error("run failed: %s: %s", type(error).__name__, error)
        raise


if __name__ == "__main__":
    if _COMMAND_LINE_CONFIG is not None:  # and its env.params, before Hydra makes the run directory
        exit_on_config_error(check_env_params, _COMMAND_LINE_CONFIG.env, ENVS)
    sys.argv += Ranks.from_environment().hydra_overrides()  # under torchrun, rank 0 alone makes the run directory
    main()
