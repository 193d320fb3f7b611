"""Value-based training: DQN (single-agent envs), IQL, VDN and QMIX (agent groups), as TorchRL's
examples build them (pytorch/rl, sota-implementations: dqn, multiagent/iql.py and
multiagent/qmix_vdn.py), trained by recipes/replay.py's loop.

Per agent group (one of each per group, as BenchMARL):

- a Q-network over the group's observations (``MultiAgentMLP``, or ``MLP`` for one agent;
  ``algo.share_params``), whose greedy action ``QValueModule`` picks: the actor evaluation and
  recipes/play.py run; it collects through ``EGreedyModule`` (a uniform-random action with a
  chance annealed from ``algo.eps_init`` to ``algo.eps_end``);
- DQN and IQL: ``DQNLoss`` on each agent's own Q-value and its own reward (IQL: independent
  learners sharing a network);
- VDN and QMIX: ``QMixerLoss``: the agents' chosen Q-values mixed into one for the group
  (``VDNMixer``: their sum; ``QMixer``: a monotonic mixing network whose weights come from the
  group's state, here its agents' observations, concatenated), trained on the group's mean
  reward (``("next", "mixed", group, "reward")``, as TorchRL's example averages it);
- TD(0) targets with ``algo.gamma``; ``SoftUpdate`` (``algo.tau``) or ``HardUpdate``
  (``algo.hard_update_interval``) of the target networks after each gradient step.

Example:
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> from torchrl_warp.recipes.config import train_schema
    >>> cfg = train_schema("dqn")
    >>> cfg.algo.hidden = [8]
    >>> agent = build_agents(cfg, CartPoleEnv(num_envs=2), [None], "cpu")["agent"]
    >>> type(agent.loss).__name__, agent.actor(CartPoleEnv(num_envs=2).reset())["action_value"].shape
    ('DQNLoss', torch.Size([2, 2]))
"""
from __future__ import annotations

import torch
from omegaconf import DictConfig
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.data import Categorical, Composite
from torchrl.modules import EGreedyModule, QValueModule, SafeSequential
from torchrl.modules.models.multiagent import QMixer, VDNMixer
from torchrl.objectives import DQNLoss, ValueEstimators
from torchrl.objectives.multiagent import QMixerLoss

from torchrl_warp.recipes import replay
from torchrl_warp.recipes.common import key
from torchrl_warp.recipes.replay import Observing, ReplayAgent, network, target_updater

__all__ = ["ALGOS", "QAgent", "MixerAgent", "mixed_key", "build_agents", "train", "memory_needed"]

#: the algorithms this module trains (``algo.name``)
ALGOS = ("dqn", "iql", "vdn", "qmix")


def mixed_key(group, name: str) -> tuple:
    """Where VDN's and QMIX's group-level entries live: beside the groups, one per group (a
    group's own sub-TensorDict has an agent dim, its mixed value has none).

    >>> mixed_key("agents", "reward")
    ('mixed', 'agents', 'reward')
    """
    return ("mixed", group, name)


def _own_actions(env, group, device):
    """The group's action spec, one env's (no batch dims), as the only entry of a ``Composite``:
    what ``QValueModule`` and ``EGreedyModule`` take (with every group's, a group's Q-network
    would be asked to write the other groups' actions too)."""
    full = env.full_action_spec_unbatched
    if group is None:
        return Composite(action=full["action"]).to(device)
    return Composite({group: Composite(action=full[group, "action"], shape=full[group].shape)}).to(device)


def _q_network(env, group, algo: DictConfig, device, obs_stats) -> SafeSequential:
    """The group's Q-network and its greedy action: ``(group, "action_value")`` for each of its
    ``n`` actions, then ``QValueModule`` writing the argmax ``(group, "action")`` and its value
    ``(group, "chosen_action_value")``."""
    obs_dim = env.layout.observation_shape_of(group)[-1]
    spec = env.full_action_spec[key(group, "action")]
    n = None if group is None else env.layout.groups[group]
    net = network(obs_dim, spec.space.n, n, algo, device)
    values = TensorDictModule(Observing(net, obs_stats), in_keys=[key(group, "observation")],
                              out_keys=[key(group, "action_value")])
    greedy = QValueModule(action_value_key=key(group, "action_value"),
                          out_keys=[key(group, "action"), key(group, "action_value"),
                                    key(group, "chosen_action_value")],
                          spec=_own_actions(env, group, device), action_space=None)
    return SafeSequential(values, greedy)


class _EGreedyAgent(ReplayAgent):
    """What DQN, IQL, VDN and QMIX share: the Q-network as the actor, explored e-greedily."""

    def _explore_with(self, env, group, algo: DictConfig, device):
        self.greedy_random = EGreedyModule(_own_actions(env, group, device), eps_init=float(algo.eps_init),
                                           eps_end=algo.eps_end, action_key=key(group, "action"), device=device)
        self.explorer = TensorDictSequential(self.actor, self.greedy_random)
        self.eps = (algo.eps_init, algo.eps_end, algo.eps_anneal_frames)

    def explore_at(self, frames: int, total_frames: int) -> dict:
        eps = replay.annealed(*self.eps, frames, total_frames)
        self.greedy_random.eps.fill_(eps)  # in place: a captured collection graph reads the same tensor
        return {"eps": eps}


class QAgent(_EGreedyAgent):
    """DQN of one group (``dqn``; ``iql``: each agent learns its own Q-values, the group's
    agents sharing a network with ``algo.share_params``): ``DQNLoss`` with a target network."""

    def __init__(self, env, group, algo: DictConfig, device, obs_stats=None):
        super().__init__()
        self.group, self.reward_scale = group, algo.reward_scale
        self.actor = _q_network(env, group, algo, device, obs_stats)
        self.loss = DQNLoss(self.actor, delay_value=True,
                            action_space=env.full_action_spec_unbatched[key(group, "action")])
        self.loss.set_keys(action_value=key(group, "action_value"), action=key(group, "action"),
                           value=key(group, "chosen_action_value"), reward=key(group, "reward"),
                           done=key(group, "done"), terminated=key(group, "terminated"))
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=algo.gamma)
        self.updater = target_updater(self.loss, algo)
        self._explore_with(env, group, algo, device)

    def loss_value(self, minibatch) -> tuple[torch.Tensor, dict]:
        out = self.loss(self.scaled(minibatch, key(self.group, "reward"), self.reward_scale))
        return out["loss"], {"loss": out["loss"].detach()}


class MixerAgent(_EGreedyAgent):
    """VDN or QMIX of one group: ``QMixerLoss`` over the group's Q-network and its mixer
    (``VDNMixer``, ``QMixer`` on the group's concatenated observations, standardized as the
    Q-network's with ``algo.obs_norm``), both with targets; the
    group's reward and done flags are its mean reward and the env's flags."""

    def __init__(self, env, group, algo: DictConfig, device, obs_stats=None):
        super().__init__()
        self.group, self.reward_scale = group, algo.reward_scale
        n = env.layout.groups[group]
        self.actor = _q_network(env, group, algo, device, obs_stats)
        if algo.name == "qmix":  # its mixing weights come from the group's state: every agent's observation
            obs_shape = (n, env.layout.observation_shape_of(group)[-1])
            mixer = QMixer(state_shape=obs_shape, mixing_embed_dim=algo.mixing_embed_dim, n_agents=n, device=device)
            mixer = Observing(mixer, obs_stats, at=1)  # with algo.obs_norm its state standardized as the Q-network's input
            in_keys = [key(group, "chosen_action_value"), key(group, "observation")]
        else:
            mixer = VDNMixer(n_agents=n, device=device)
            in_keys = [key(group, "chosen_action_value")]
        self.mixer = TensorDictModule(mixer, in_keys=in_keys, out_keys=[mixed_key(group, "chosen_action_value")])
        self.loss = QMixerLoss(self.actor, self.mixer, delay_value=True,
                               action_space=env.full_action_spec_unbatched[key(group, "action")])
        self.loss.set_keys(action_value=key(group, "action_value"), local_value=key(group, "chosen_action_value"),
                           global_value=mixed_key(group, "chosen_action_value"), action=key(group, "action"),
                           reward=mixed_key(group, "reward"), done="done", terminated="terminated")
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=algo.gamma)
        self.updater = target_updater(self.loss, algo)
        self._explore_with(env, group, algo, device)

    def prepare(self, batch) -> None:
        """The group's reward for the mixed value: its agents' mean (TorchRL's example's)."""
        batch.set(("next", *mixed_key(self.group, "reward")), batch.get(("next", self.group, "reward")).mean(-2))

    def loss_value(self, minibatch) -> tuple[torch.Tensor, dict]:
        out = self.loss(self.scaled(minibatch, mixed_key(self.group, "reward"), self.reward_scale))
        return out["loss"], {"loss": out["loss"].detach()}


AGENTS = {"dqn": QAgent, "iql": QAgent, "vdn": MixerAgent, "qmix": MixerAgent}


def build_agents(cfg: DictConfig, env, groups, device, obs_stats=None) -> torch.nn.ModuleDict:
    """One agent of ``cfg.algo.name`` per group (``"agent"`` for a single-agent env), with
    ``obs_stats[group]`` (``(loc, scale)``) in front of its Q-network if given; each group's
    actions must be one categorical per agent (``Categorical``)."""
    agents = {}
    for g in groups:
        spec = env.full_action_spec[key(g, "action")]
        if type(spec) is not Categorical:
            raise TypeError(f"algo={cfg.algo.name} picks one of a discrete set of actions per agent "
                            f"(Categorical); group {g!r} has {type(spec).__name__} actions")
        agents[g or "agent"] = AGENTS[cfg.algo.name](env, g, cfg.algo, device, obs_stats[g] if obs_stats else None)
    return torch.nn.ModuleDict(agents)


def train(cfg: DictConfig, out_dir: str) -> dict:
    """Train DQN, IQL, VDN or QMIX on ``cfg`` into ``out_dir`` (recipes/replay.py's loop);
    returns the run's summary."""
    return replay.train(cfg, out_dir, build_agents)


def memory_needed(cfg: DictConfig, on_gpu: bool) -> int:
    """Bytes a run of ``cfg`` needs (:func:`torchrl_warp.recipes.replay.memory_needed`)."""
    return replay.memory_needed(cfg, on_gpu, build_agents)
