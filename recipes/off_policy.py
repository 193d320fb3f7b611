"""Off-policy actor-critic training: DDPG and SAC (single-agent envs), IDDPG, MADDPG, ISAC and
MASAC (agent groups), as TorchRL's multi-agent examples build them (pytorch/rl,
sota-implementations/multiagent: maddpg_iddpg.py and sac.py), trained by recipes/replay.py's loop.

Per agent group (heterogeneous groups, simple_tag's adversaries and good agents: one of each
per group, as BenchMARL):

- DDPG: a deterministic actor (``MultiAgentMLP``, or ``MLP`` for one agent, then TorchRL's
  ``TanhModule`` into the action spec's bounds), explored with ``AdditiveGaussianModule`` (its
  scale annealed from ``algo.sigma_init`` to ``algo.sigma_end``); a Q critic over the
  observation and action (``ValueOperator``); ``DDPGLoss`` with target actor and critic;
- SAC: a ``TanhNormal`` actor within the bounds (``ProbabilisticActor``, sampling is its
  exploration); two Q critics; ``SACLoss`` with target critics and the entropy coefficient
  tuned towards ``-action dims`` (``algo.alpha_init``, ``algo.fixed_alpha``);
- the critics of ``maddpg`` and ``masac`` are centralised (each agent's Q-value reads every
  agent's observation and action of its group), those of ``iddpg`` and ``isac`` decentralised;
  ``algo.share_params`` shares one network among a group's agents;
- TD(0) targets with ``algo.gamma``; ``SoftUpdate`` (``algo.tau``) or ``HardUpdate``
  (``algo.hard_update_interval``) of the targets after each gradient step.

Example:
    >>> from omegaconf import OmegaConf
    >>> from torchrl_warp.envs import PendulumEnv
    >>> from torchrl_warp.recipes.config import train_schema
    >>> cfg = train_schema("sac")
    >>> cfg.algo.hidden = [8]
    >>> agent = build_agents(cfg, PendulumEnv(num_envs=2), [None], "cpu")["agent"]
    >>> type(agent.loss).__name__, agent.actor(PendulumEnv(num_envs=2).reset())["action"].shape
    ('SACLoss', torch.Size([2, 1]))
"""
from __future__ import annotations

import torch
from omegaconf import DictConfig
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.data import Bounded
from torchrl.modules import AdditiveGaussianModule, ProbabilisticActor, TanhModule, ValueOperator
from torchrl.objectives import DDPGLoss, SACLoss, ValueEstimators

from torchrl_warp.recipes import replay
from torchrl_warp.recipes.common import key
from torchrl_warp.recipes.on_policy import tanh_normal_policy
from torchrl_warp.recipes.replay import Observing, ReplayAgent, network, target_updater

__all__ = ["ALGOS", "AdditiveGaussianNoSync", "DDPGAgent", "SACAgent", "build_agents", "train", "memory_needed"]

#: the algorithms this module trains (``algo.name``): DDPG's and SAC's forms
ALGOS = ("ddpg", "iddpg", "maddpg", "sac", "isac", "masac")
#: those with a centralised critic
CENTRALISED = ("maddpg", "masac")


class AdditiveGaussianNoSync(AdditiveGaussianModule):
    """TorchRL's ``AdditiveGaussianModule``, its noisy action clamped into the spec's bounds
    without asking first whether it is out of them (``spec.project`` does: a host sync per
    step, which a CUDA graph of the collection cannot hold); the same actions.

    >>> from tensordict import TensorDict
    >>> noise = AdditiveGaussianNoSync(spec=Bounded(-1.0, 1.0, shape=(3,)), sigma_init=10.0)
    >>> noise(TensorDict({"action": torch.zeros(3)}, []))["action"].abs().max() <= 1
    tensor(True)
    """

    def _add_noise(self, action: torch.Tensor) -> torch.Tensor:
        noise = torch.randn_like(action) * self.std + self.mean
        return self.spec[self.action_key]._project(action + noise * self.sigma)


def _critic(env, group, algo: DictConfig, device, obs_stats, spec) -> ValueOperator:
    """A Q critic ``Q(observation, action)`` of ``group`` (``maddpg``, ``masac``: centralised)."""
    obs_dim = env.layout.observation_shape_of(group)[-1]
    n = None if group is None else env.layout.groups[group]
    net = network(obs_dim + spec.shape[-1], 1, n, algo, device, centralized=algo.name in CENTRALISED)
    return ValueOperator(Observing(net, obs_stats), in_keys=[key(group, "observation"), key(group, "action")],
                         out_keys=[key(group, "state_action_value")])


def _loss_keys(group) -> dict:
    """The keys of a group's batch that TorchRL's losses read."""
    return dict(state_action_value=key(group, "state_action_value"), reward=key(group, "reward"),
                done=key(group, "done"), terminated=key(group, "terminated"))


class DDPGAgent(ReplayAgent):
    """DDPG of one group (``ddpg``, ``iddpg``, ``maddpg``): deterministic actor, Q critic,
    ``DDPGLoss`` with targets of both, ``AdditiveGaussianModule`` exploration."""

    def __init__(self, env, group, algo: DictConfig, device, obs_stats=None):
        super().__init__()
        obs_dim = env.layout.observation_shape_of(group)[-1]  # groups' may differ (MPE's simple_tag)
        spec = env.full_action_spec_unbatched[key(group, "action")]
        n = None if group is None else env.layout.groups[group]
        self.group, self.reward_scale = group, algo.reward_scale
        # the actor: observation -> its network -> tanh into the action's bounds
        net = network(obs_dim, spec.shape[-1], n, algo, device)
        self.actor = TensorDictSequential(
            TensorDictModule(Observing(net, obs_stats), in_keys=[key(group, "observation")],
                             out_keys=[key(group, "param")]),
            TanhModule(in_keys=[key(group, "param")], out_keys=[key(group, "action")], spec=spec.to(device)))
        self.critic = _critic(env, group, algo, device, obs_stats, spec)
        self.loss = DDPGLoss(self.actor, self.critic, delay_actor=True, delay_value=True)
        self.loss.set_keys(**_loss_keys(group))
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=algo.gamma)
        self.updater = target_updater(self.loss, algo)
        # exploration: the actor's action plus Gaussian noise, clamped into the bounds
        self.noise = AdditiveGaussianNoSync(spec=spec.to(device), sigma_init=algo.sigma_init,
                                            sigma_end=algo.sigma_end, action_key=key(group, "action"), device=device)
        self.explorer = TensorDictSequential(self.actor, self.noise)
        self.sigma = (algo.sigma_init, algo.sigma_end, algo.sigma_anneal_frames)

    def loss_value(self, minibatch) -> tuple[torch.Tensor, dict]:
        out = self.loss(self.scaled(minibatch, key(self.group, "reward"), self.reward_scale))
        return out["loss_actor"] + out["loss_value"], {k: out[k].detach() for k in ("loss_actor", "loss_value")}

    def explore_at(self, frames: int, total_frames: int) -> dict:
        sigma = replay.annealed(*self.sigma, frames, total_frames)
        self.noise.sigma.fill_(sigma)  # in place: a captured collection graph reads the same tensor
        return {"sigma": sigma}


class SACAgent(ReplayAgent):
    """SAC of one group (``sac``, ``isac``, ``masac``): ``TanhNormal`` actor, two Q critics with
    targets, tuned entropy coefficient, ``SACLoss``; the actor's sampling explores."""

    def __init__(self, env, group, algo: DictConfig, device, obs_stats=None):
        super().__init__()
        obs_dim = env.layout.observation_shape_of(group)[-1]
        spec = env.full_action_spec[key(group, "action")]
        n = None if group is None else env.layout.groups[group]
        self.group, self.reward_scale = group, algo.reward_scale
        # the actor: observation -> loc and scale -> TanhNormal within the action's bounds
        net = network(obs_dim, 2 * spec.shape[-1], n, algo, device)
        actor_net, dist, dist_kwargs, params = tanh_normal_policy(Observing(net, obs_stats), spec,
                                                                  () if group is None else (n,), device)
        self.actor = ProbabilisticActor(
            TensorDictModule(actor_net, in_keys=[key(group, "observation")], out_keys=[key(group, p) for p in params]),
            in_keys={p: key(group, p) for p in params}, out_keys=[key(group, "action")],
            distribution_class=dist, distribution_kwargs=dist_kwargs, return_log_prob=False)
        # the critics: SACLoss stacks two copies of this one (its own parameters, not this module's)
        critic = _critic(env, group, algo, device, obs_stats, spec)
        self.loss = SACLoss(self.actor, critic, num_qvalue_nets=2, alpha_init=algo.alpha_init,
                            fixed_alpha=algo.fixed_alpha, action_spec=env.full_action_spec_unbatched,
                            delay_qvalue=True)
        self.loss.set_keys(action=key(group, "action"), **_loss_keys(group))
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=algo.gamma)
        self.loss.target_entropy  # noqa: B018  (SACLoss makes this buffer on first use: now, so checkpoints have it)
        self.updater = target_updater(self.loss, algo)
        self.explorer = self.actor

    def loss_value(self, minibatch) -> tuple[torch.Tensor, dict]:
        out = self.loss(self.scaled(minibatch, key(self.group, "reward"), self.reward_scale))
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        return total, {k: out[k].detach() for k in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy")}


AGENTS = {"ddpg": DDPGAgent, "iddpg": DDPGAgent, "maddpg": DDPGAgent,
          "sac": SACAgent, "isac": SACAgent, "masac": SACAgent}


def build_agents(cfg: DictConfig, env, groups, device, obs_stats=None) -> torch.nn.ModuleDict:
    """One agent of ``cfg.algo.name`` per group (``"agent"`` for a single-agent env), with
    ``obs_stats[group]`` (``(loc, scale)``) in front of its networks if given; each group's
    actions must be continuous (``Bounded``)."""
    agents = {}
    for g in groups:
        spec = env.full_action_spec[key(g, "action")]
        if not isinstance(spec, Bounded):
            raise TypeError(f"algo={cfg.algo.name} acts in continuous (Bounded) action spaces; group {g!r} has "
                            f"{type(spec).__name__} actions")
        agents[g or "agent"] = AGENTS[cfg.algo.name](env, g, cfg.algo, device, obs_stats[g] if obs_stats else None)
    return torch.nn.ModuleDict(agents)


def train(cfg: DictConfig, out_dir: str) -> dict:
    """Train DDPG, SAC or a multi-agent form of them on ``cfg`` into ``out_dir`` (recipes/replay.py's
    loop); returns the run's summary."""
    return replay.train(cfg, out_dir, build_agents)


def memory_needed(cfg: DictConfig, on_gpu: bool) -> int:
    """Bytes a run of ``cfg`` needs (:func:`torchrl_warp.recipes.replay.memory_needed`)."""
    return replay.memory_needed(cfg, on_gpu, build_agents)
