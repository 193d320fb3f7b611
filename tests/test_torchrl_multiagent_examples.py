"""TorchRL's multi-agent example scripts (pytorch/rl ``sota-implementations/multiagent``:
``maddpg_iddpg.py``, ``iql.py``, ``qmix_vdn.py``, ``sac.py``, their yaml configs and
``utils/``) on ``MPEEnv``, with only their ``VmasEnv(...)`` line changed.

Each ``build_*`` below is one script's construction code, as it is written there and with
the env class as its one argument (``make_env``: ``MPEEnv`` or ``VmasEnv``, called with
the script's arguments). Every attribute, key, spec and call the script makes on the env
goes through ``Reads`` (``reads.read(name, value)``), so the tests can compare what the
script read off ``MPEEnv`` with what it reads off ``VmasEnv`` for the same scenario and
arguments. ``one_iteration`` is the scripts' loop body for one batch: the collector
(with ``utils/utils.py``'s ``DoneTransform`` as ``postproc`` where the script has one),
QMIX/VDN's reward reshaping, the replay buffer, one loss, backward, optimizer and target
step, the exploration annealing, ``utils/logging.py``'s ``log_training``, then the
evaluation rollout with the rendering callback and ``log_evaluation`` (their non-wandb
branch, into a logger that records what it is given; the wandb branch differs only by
``fps=1 / env_test.world.dt``, checked here too).

Two departures from the scripts, both torchrl 0.14's and VmasEnv's alike, not ours:
``maddpg_iddpg.py`` imports ``SyncDataCollector``, which torchrl 0.14 no longer has (its
``Collector`` is used, as the other three scripts do), and sizes its networks with
``env.action_spec.shape[-1]``, which torchrl 0.14 answers with the number of envs (for a
lone nested action key ``action_spec`` is the whole Composite, for ``VmasEnv`` as for
ours; ``test_maddpg_action_spec_reads_as_on_vmasenv`` pins it); the networks here take
the action size from ``env.full_action_spec_unbatched[env.action_key].shape[-1]``, as
``sac.py`` does.

Where vmas is not importable, the ``VmasEnv`` comparisons skip with that reason, and the
``*_contract`` tests still compare every value with the one derived from ``MPEEnv``'s
documented contract (docs/environments.md: simple_spread's 3 agents, ``observation``
``[3, 14]``, continuous actions ``Bounded(-1, 1, [3, 2])``, discrete ``Categorical(9)`` or
``OneHot(9)``, ``reward_key`` ``("agents", "reward")``, ``done_keys`` ``done`` and
``terminated``); where vmas is importable those contract values are checked against
``VmasEnv`` as well.
"""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import unravel_key
from tensordict.nn import TensorDictModule, TensorDictSequential
from tensordict.nn.distributions import NormalParamExtractor
from torch import nn
from torch.distributions import Categorical as CategoricalDist
from torch.distributions import OneHotCategorical
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, Composite, OneHot, TensorDictReplayBuffer, TensorSpec
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.data.replay_buffers.storages import LazyTensorStorage
from torchrl.envs import RewardSum, Transform, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import (AdditiveGaussianModule, EGreedyModule, ProbabilisticActor, QValueModule, SafeSequential,
                             TanhDelta, TanhNormal, ValueOperator)
from torchrl.modules.models.multiagent import MultiAgentMLP, QMixer, VDNMixer
from torchrl.objectives import DDPGLoss, DiscreteSACLoss, DQNLoss, SACLoss, SoftUpdate, ValueEstimators
from torchrl.objectives.multiagent.qmixer import QMixerLoss

from torchrl_warp.envs import MPEEnv

try:
    import vmas  # noqa: F401
    from torchrl.envs.libs.vmas import VmasEnv
except ImportError:  # the contract tests still run; the comparisons say why they skip
    VmasEnv = None
needs_vmas = pytest.mark.skipif(VmasEnv is None, reason="vmas is not importable: pip install -e '.[test]' brings it; "
                                                        "the *_contract tests check MPEEnv without it")

#: the scripts' hard-coded group is "agents": the MPE scenarios whose agents are one such group
SCENARIOS = ("simple_spread", "simple_reference", "simple")
#: the yamls' ``env.scenario`` (``n_agents: 3``) where the scenario has that parameter
SCENARIO_KWARGS = {"simple_spread": {"n_agents": 3}, "simple_reference": {}, "simple": {}}
MAX_STEPS = 5
N_ENVS = 4  # the scripts' vmas_envs = frames_per_batch // max_steps
#: (script, its config's switches): the yaml defaults, and the other branch each script has
SCRIPTS = {
    "maddpg": ("maddpg_iddpg", dict(centralised_critic=True, shared_parameters=False)),
    "iddpg": ("maddpg_iddpg", dict(centralised_critic=False, shared_parameters=False)),
    "iql": ("iql", dict(shared_parameters=True)),
    "qmix": ("qmix_vdn", dict(shared_parameters=True, mixer_type="qmix")),
    "vdn": ("qmix_vdn", dict(shared_parameters=True, mixer_type="vdn")),
    "masac": ("sac", dict(shared_parameters=True, centralised_critic=True, continuous_actions=True,
                          categorical_actions=False)),
    "isac_discrete_categorical": ("sac", dict(shared_parameters=True, centralised_critic=False,
                                              continuous_actions=False, categorical_actions=True)),
    "masac_discrete_onehot": ("sac", dict(shared_parameters=True, centralised_critic=True,
                                          continuous_actions=False, categorical_actions=False)),
}


def config(name, scenario="simple_spread"):
    """The script's yaml with tiny sizes (and its dynamic values filled in as the script does)."""
    script, switches = SCRIPTS[name]
    frames_per_batch = N_ENVS * MAX_STEPS
    return SimpleNamespace(
        script=script, seed=0, device="cpu", scenario_name=scenario, scenario=SCENARIO_KWARGS[scenario],
        max_steps=MAX_STEPS, vmas_envs=frames_per_batch // MAX_STEPS, frames_per_batch=frames_per_batch,
        total_frames=frames_per_batch * 1, memory_size=frames_per_batch, gamma=0.9, tau=0.005, num_epochs=1,
        minibatch_size=10, lr=5e-5, max_grad_norm=2.0 if script == "sac" else 40.0, evaluation_episodes=2,
        num_cells=16, **{"centralised_critic": False, "mixer_type": None, "continuous_actions": None,
                         "categorical_actions": None, **switches})


class Reads(dict):
    """What a script read off its env, by the expression it used."""

    def read(self, name, value):
        """Record what the script read under its expression, and hand the value on."""
        self[name] = value
        return value


class DoneTransform(Transform):
    """``utils/utils.py``'s postproc: each done entry copied beside the reward, expanded to its shape."""

    def __init__(self, reward_key, done_keys):
        super().__init__()
        self.reward_key, self.done_keys = unravel_key(reward_key), done_keys

    def forward(self, td):
        reward = td.get(("next", self.reward_key))
        for key in self.done_keys:
            key = unravel_key(key)
            last = key if isinstance(key, str) else key[-1]
            beside = last if isinstance(self.reward_key, str) else self.reward_key[:-1] + (last,)
            td.set(("next", beside), td.get(("next", key)).unsqueeze(-1).expand(reward.shape))
        return td


def make_envs(make_env, cfg, reads):
    """The scripts' ``env`` (with RewardSum) and ``env_test``: the one line a user changes."""
    discrete = cfg.script in ("iql", "qmix_vdn") or cfg.continuous_actions is False
    kwargs = dict(scenario=cfg.scenario_name, max_steps=cfg.max_steps, device=cfg.device, seed=cfg.seed,
                  continuous_actions=not discrete, **cfg.scenario)
    # sac.py passes its categorical_actions to env only; iql and qmix_vdn rely on the default (True)
    train_kwargs = dict(kwargs, categorical_actions=cfg.categorical_actions) if cfg.script == "sac" else kwargs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = make_env(num_envs=cfg.vmas_envs, **train_kwargs)
        env_test = make_env(num_envs=cfg.evaluation_episodes, **kwargs)
    env = TransformedEnv(base, RewardSum(in_keys=[reads.read("env.reward_key", base.reward_key)],
                                         out_keys=[("agents", "episode_reward")]))
    return env, env_test


def mlp(cfg, n_in, n_out, n_agents, centralised=False):
    return MultiAgentMLP(n_agent_inputs=n_in, n_agent_outputs=n_out, n_agents=n_agents, centralised=centralised,
                         share_params=cfg.shared_parameters, device=cfg.device, depth=2, num_cells=cfg.num_cells,
                         activation_class=nn.Tanh)


def build_maddpg_iddpg(make_env, cfg):
    r = Reads()
    env, env_test = make_envs(make_env, cfg, r)
    n_obs = r.read("env.observation_spec['agents', 'observation'].shape[-1]",
                   env.observation_spec["agents", "observation"].shape[-1])
    r.read("env.action_spec.shape[-1]", env.action_spec.shape[-1])  # torchrl 0.14: num_envs (module docstring)
    n_act = r.read("env.full_action_spec_unbatched[env.action_key].shape[-1]",
                   env.full_action_spec_unbatched[env.action_key].shape[-1])
    n_agents = r.read("env.n_agents", env.n_agents)
    spec = r.read("env.full_action_spec_unbatched", env.full_action_spec_unbatched)
    action_key = r.read("env.action_key", env.action_key)
    policy = ProbabilisticActor(
        module=TensorDictModule(mlp(cfg, n_obs, n_act, n_agents), in_keys=[("agents", "observation")],
                                out_keys=[("agents", "param")]),
        spec=spec, in_keys=[("agents", "param")], out_keys=[action_key], distribution_class=TanhDelta,
        distribution_kwargs={
            "low": r.read("space.low", env.full_action_spec_unbatched[("agents", "action")].space.low),
            "high": r.read("space.high", env.full_action_spec_unbatched[("agents", "action")].space.high)},
        return_log_prob=False)
    explore = TensorDictSequential(policy, AdditiveGaussianModule(
        spec=spec, annealing_num_steps=int(cfg.total_frames / 2), action_key=action_key, device=cfg.device))
    critic = ValueOperator(module=mlp(cfg, n_obs + n_act, 1, n_agents, cfg.centralised_critic),
                           in_keys=[("agents", "observation"), action_key], out_keys=[("agents", "state_action_value")])
    loss = DDPGLoss(actor_network=policy, value_network=critic, delay_value=True)
    loss.set_keys(state_action_value=("agents", "state_action_value"), reward=env.reward_key,
                  done=("agents", "done"), terminated=("agents", "terminated"))
    postproc = DoneTransform(reward_key=env.reward_key, done_keys=r.read("env.done_keys", env.done_keys))
    return SimpleNamespace(env=env, env_test=env_test, policy=policy, explore=explore, anneal=explore[1], loss=loss,
                           postproc=postproc, loss_terms=("loss_actor", "loss_value"), reads=r)


def build_iql_qmix_vdn(make_env, cfg):
    r = Reads()
    env, env_test = make_envs(make_env, cfg, r)
    n_obs = r.read("env.observation_spec['agents', 'observation'].shape[-1]",
                   env.observation_spec["agents", "observation"].shape[-1])
    n_actions = r.read("env.full_action_spec['agents', 'action'].space.n",
                       env.full_action_spec["agents", "action"].space.n)
    n_agents = r.read("env.n_agents", env.n_agents)
    spec = r.read("env.full_action_spec_unbatched", env.full_action_spec_unbatched)
    action_key = r.read("env.action_key", env.action_key)
    module = TensorDictModule(mlp(cfg, n_obs, n_actions, n_agents), in_keys=[("agents", "observation")],
                              out_keys=[("agents", "action_value")])
    value_module = QValueModule(action_value_key=("agents", "action_value"),
                                out_keys=[action_key, ("agents", "action_value"), ("agents", "chosen_action_value")],
                                spec=spec, action_space=None)
    qnet = SafeSequential(module, value_module)
    explore = TensorDictSequential(qnet, EGreedyModule(eps_init=0.3, eps_end=0,
                                                       annealing_num_steps=int(cfg.total_frames / 2),
                                                       action_key=action_key, spec=spec))
    if cfg.script == "iql":
        loss = DQNLoss(qnet, delay_value=True)
        loss.set_keys(action_value=("agents", "action_value"), action=action_key,
                      value=("agents", "chosen_action_value"), reward=env.reward_key, done=("agents", "done"),
                      terminated=("agents", "terminated"))
        postproc = DoneTransform(reward_key=env.reward_key, done_keys=r.read("env.done_keys", env.done_keys))
    else:
        if cfg.mixer_type == "qmix":
            state_shape = r.read("env.observation_spec_unbatched['agents', 'observation'].shape",
                                 env.observation_spec_unbatched["agents", "observation"].shape)
            mixer = TensorDictModule(QMixer(state_shape=state_shape, mixing_embed_dim=32, n_agents=n_agents,
                                            device=cfg.device),
                                     in_keys=[("agents", "chosen_action_value"), ("agents", "observation")],
                                     out_keys=["chosen_action_value"])
        else:
            mixer = TensorDictModule(VDNMixer(n_agents=n_agents, device=cfg.device),
                                     in_keys=[("agents", "chosen_action_value")], out_keys=["chosen_action_value"])
        loss = QMixerLoss(qnet, mixer, delay_value=True)
        loss.set_keys(action_value=("agents", "action_value"), local_value=("agents", "chosen_action_value"),
                      global_value="chosen_action_value", action=action_key)
        postproc = None  # qmix_vdn.py's collector has none: QMixerLoss reads the root done keys
    return SimpleNamespace(env=env, env_test=env_test, policy=qnet, explore=explore, anneal=explore[1], loss=loss,
                           postproc=postproc, loss_terms=("loss",), reads=r)


def build_sac(make_env, cfg):
    r = Reads()
    env, env_test = make_envs(make_env, cfg, r)
    n_agents = r.read("env.n_agents", env.n_agents)
    action_key = r.read("env.action_key", env.action_key)
    n_obs = r.read("env.observation_spec['agents', 'observation'].shape[-1]",
                   env.observation_spec["agents", "observation"].shape[-1])
    unbatched = r.read("env.full_action_spec_unbatched", env.full_action_spec_unbatched)
    if cfg.continuous_actions:
        n_obs_u = r.read("env.full_observation_spec_unbatched['agents', 'observation'].shape[-1]",
                         env.full_observation_spec_unbatched["agents", "observation"].shape[-1])
        n_act = r.read("env.full_action_spec_unbatched['agents', 'action'].shape[-1]",
                       env.full_action_spec_unbatched["agents", "action"].shape[-1])
        actor = TensorDictModule(nn.Sequential(mlp(cfg, n_obs_u, 2 * n_act, n_agents), NormalParamExtractor()),
                                 in_keys=[("agents", "observation")], out_keys=[("agents", "loc"), ("agents", "scale")])
        policy = ProbabilisticActor(
            module=actor, spec=unbatched, in_keys=[("agents", "loc"), ("agents", "scale")], out_keys=[action_key],
            distribution_class=TanhNormal,
            distribution_kwargs={
                "low": r.read("space.low", env.full_action_spec_unbatched[("agents", "action")].space.low),
                "high": r.read("space.high", env.full_action_spec_unbatched[("agents", "action")].space.high)},
            return_log_prob=True)
        critic = ValueOperator(module=mlp(cfg, n_obs + n_act, 1, n_agents, cfg.centralised_critic),
                               in_keys=[("agents", "observation"), action_key],
                               out_keys=[("agents", "state_action_value")])
        loss = SACLoss(actor_network=policy, qvalue_network=critic, delay_qvalue=True, action_spec=unbatched)
        loss.set_keys(state_action_value=("agents", "state_action_value"), action=action_key, reward=env.reward_key,
                      done=("agents", "done"), terminated=("agents", "terminated"))
    else:
        n_actions = r.read("env.full_action_spec_unbatched['agents', 'action'].space.n",
                           env.full_action_spec_unbatched["agents", "action"].space.n)
        actor = TensorDictModule(nn.Sequential(mlp(cfg, n_obs, n_actions, n_agents)),
                                 in_keys=[("agents", "observation")], out_keys=[("agents", "logits")])
        policy = ProbabilisticActor(
            module=actor, spec=r.read("env.full_action_spec_unbatched['agents', 'action']",
                                      env.full_action_spec_unbatched["agents", "action"]),
            in_keys=[("agents", "logits")], out_keys=[action_key],
            distribution_class=CategoricalDist if cfg.categorical_actions else OneHotCategorical, return_log_prob=True)
        critic = ValueOperator(module=mlp(cfg, n_obs, n_actions, n_agents, cfg.centralised_critic),
                               in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")])
        loss = DiscreteSACLoss(actor_network=policy, qvalue_network=critic, delay_qvalue=True, num_actions=n_actions,
                               action_space=unbatched)
        loss.set_keys(action_value=("agents", "action_value"), action=action_key, reward=env.reward_key,
                      done=("agents", "done"), terminated=("agents", "terminated"))
    postproc = DoneTransform(reward_key=env.reward_key, done_keys=r.read("env.done_keys", env.done_keys))
    return SimpleNamespace(env=env, env_test=env_test, policy=policy, explore=policy, anneal=None, loss=loss,
                           postproc=postproc, loss_terms=("loss_actor", "loss_alpha", "loss_qvalue"), reads=r)


BUILDERS = {"maddpg_iddpg": build_maddpg_iddpg, "iql": build_iql_qmix_vdn, "qmix_vdn": build_iql_qmix_vdn,
            "sac": build_sac}


def build(name, make_env, scenario="simple_spread"):
    cfg = config(name, scenario)
    torch.manual_seed(cfg.seed)
    built = BUILDERS[cfg.script](make_env, cfg)
    built.cfg = cfg
    return built


class RecordingLogger:
    """The non-wandb logger ``utils/logging.py`` writes to: ``log_scalar`` and ``log_video``."""

    def __init__(self):
        self.scalars, self.videos = {}, {}

    def log_scalar(self, name, value, step=None):
        self.scalars[name] = float(value)

    def log_video(self, name, video, step=None):
        self.videos[name] = video


def log_training(logger, training_td, sampling_td, step):
    """``utils/logging.py``'s log_training: what it reads off a collected batch."""
    for key in ("reward", "episode_reward"):  # QMIX/VDN's shared reward, put back beside the agents
        if ("next", "agents", key) not in sampling_td.keys(True, True):
            sampling_td.set(("next", "agents", key),
                            sampling_td.get(("next", key)).expand(sampling_td.get("agents").shape).unsqueeze(-1))
    metrics = {f"train/learner/{k}": v.mean().item() for k, v in training_td.items()}
    if "info" in sampling_td.get("agents").keys():
        metrics.update({f"train/info/{k}": v.mean().item() for k, v in sampling_td.get(("agents", "info")).items()})
    reward = sampling_td.get(("next", "agents", "reward")).mean(-2)
    done = sampling_td.get(("next", "done"))
    if done.ndim > reward.ndim:
        done = done[..., 0, :]
    episode_reward = sampling_td.get(("next", "agents", "episode_reward")).mean(-2)[done]
    metrics.update({"train/reward/reward_mean": reward.mean().item(),
                    "train/reward/episode_reward_min": episode_reward.min().item(),
                    "train/reward/episode_reward_mean": episode_reward.mean().item(),
                    "train/reward/episode_reward_max": episode_reward.max().item()})
    for k, v in metrics.items():
        logger.log_scalar(k.replace("/", "_"), v, step=step)
    return metrics


def log_evaluation(logger, rollouts, env_test, step):
    """``utils/logging.py``'s log_evaluation: each env's rollout cut at its first done, the
    mean episode reward and length, and the frames as a video."""
    rollouts = list(rollouts.unbind(0))
    for k, r in enumerate(rollouts):
        done = r.get(("next", "done"))
        next_done = done.sum(tuple(range(r.batch_dims, done.ndim)), dtype=torch.bool)
        rollouts[k] = r[: next_done.nonzero(as_tuple=True)[0][0] + 1]
    rewards = [td.get(("next", "agents", "reward")).sum(0).mean() for td in rollouts]
    metrics = {"eval/episode_reward_min": min(rewards), "eval/episode_reward_max": max(rewards),
               "eval/episode_reward_mean": sum(rewards) / len(rollouts),
               "eval/episode_len_mean": sum(td.batch_size[0] for td in rollouts) / len(rollouts)}
    vid = torch.tensor(np.transpose(env_test.frames[: rollouts[0].batch_size[0]], (0, 3, 1, 2)),
                       dtype=torch.uint8).unsqueeze(0)
    for k, v in metrics.items():
        logger.log_scalar(k.replace("/", "_"), v, step=step)
    logger.log_video("eval_video", vid, step=step)
    return metrics, 1 / env_test.world.dt  # the wandb branch's video fps


def rendering_callback(env, td):
    env.frames.append(env.render(mode="rgb_array", agent_index_focus=None))


def one_iteration(b):
    """The scripts' loop body for their first batch, evaluation included; then their clean-up."""
    cfg, env, env_test = b.cfg, b.env, b.env_test
    collector = Collector(env, b.explore, device=cfg.device, storing_device=cfg.device,
                          frames_per_batch=cfg.frames_per_batch, total_frames=cfg.total_frames, postproc=b.postproc)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.memory_size, device=cfg.device),
                                    sampler=SamplerWithoutReplacement(), batch_size=cfg.minibatch_size)
    b.loss.make_value_estimator(ValueEstimators.TD0, gamma=cfg.gamma)
    target_updater = SoftUpdate(b.loss, eps=1 - cfg.tau)
    optim = torch.optim.Adam(b.loss.parameters(), cfg.lr)
    before = {k: v.detach().clone() for k, v in b.loss.named_parameters()}
    out = SimpleNamespace(logger=RecordingLogger())
    data = next(iter(collector))
    out.raw = data.clone()
    if cfg.script == "qmix_vdn":  # the reward is shared: its mean over the agents, at the root
        data.set(("next", "reward"), data.get(("next", env.reward_key)).mean(-2))
        del data["next", env.reward_key]
        data.set(("next", "episode_reward"), data.get(("next", "agents", "episode_reward")).mean(-2))
        del data["next", "agents", "episode_reward"]
    buffer.extend(data.reshape(-1))
    losses = []
    for _ in range(cfg.num_epochs):
        for _ in range(cfg.frames_per_batch // cfg.minibatch_size):
            loss_vals = b.loss(buffer.sample())
            losses.append(loss_vals.detach())
            sum(loss_vals[k] for k in b.loss_terms).backward()
            losses[-1].set("grad_norm", torch.nn.utils.clip_grad_norm_(b.loss.parameters(), cfg.max_grad_norm).mean())
            optim.step()
            optim.zero_grad()
            target_updater.step()
    if b.anneal is not None:
        b.anneal.step(frames=data.numel())
    collector.update_policy_weights_()
    out.data, out.losses = data, torch.stack(losses)
    out.moved = {k for k, v in b.loss.named_parameters() if not torch.equal(v.detach(), before[k])}
    out.params = set(before)
    out.train_metrics = log_training(out.logger, out.losses, data, step=0)
    out.eval_error = None
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        env_test.frames = []
        try:
            out.rollouts = env_test.rollout(max_steps=cfg.max_steps, policy=b.policy, callback=rendering_callback,
                                            auto_cast_to_device=True, break_when_any_done=False)
        except (ValueError, AssertionError, RuntimeError) as error:  # sac.py's one-hot policy on env_test
            out.eval_error = error
        else:
            out.eval_metrics, out.fps = log_evaluation(out.logger, out.rollouts, env_test, step=0)
    out.frames = list(env_test.frames)
    collector.shutdown()
    for e in (env, env_test):
        if not e.is_closed:
            e.close()
    out.closed = (env.is_closed, env_test.is_closed)
    return out


# --------------------------------------------------------------------------- comparisons

def describe(value):
    """A value, comparable with ``==`` across the two envs (specs by class, shape, dtype, bounds)."""
    if isinstance(value, TensorSpec):
        out = [type(value).__name__, tuple(value.shape), str(value.dtype), str(value.device)]
        if hasattr(value, "keys"):
            out.append(sorted((str(k), describe(value[k])) for k in value.keys(True, True)))
        elif hasattr(value.space, "n"):
            out.append(("n", value.space.n))
        else:
            out.append((value.space.low.tolist(), value.space.high.tolist()))
        return tuple(out)
    if isinstance(value, torch.Tensor):
        return ("Tensor", tuple(value.shape), str(value.dtype), value.tolist())
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, (list, tuple)):
        return type(value)(describe(v) for v in value)
    return value


def layout(td):
    """Every key of a tensordict with its shape and dtype."""
    return {k: (tuple(v.shape), v.dtype) for k, v in td.items(True, True)}


@pytest.fixture(scope="module")
def vmas_runs():
    """The scripts' first iteration on VmasEnv, once per script (tests compare ours with it)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = one_iteration(build(name, VmasEnv))
        return cache[name]
    return get


def contract(name):
    """What each script reads off simple_spread (3 agents, ``N_ENVS`` envs), from MPEEnv's
    documented contract (docs/environments.md), without VmasEnv."""
    script, s = SCRIPTS[name]
    continuous = script == "maddpg_iddpg" or (script == "sac" and s["continuous_actions"])
    one_hot = script == "sac" and s["categorical_actions"] is False
    if continuous:
        action = Bounded(low=-1.0, high=1.0, shape=(3, 2), dtype=torch.float32)
    elif one_hot:
        action = OneHot(9, shape=(3, 9), dtype=torch.long)
    else:
        action = Categorical(9, shape=(3,), dtype=torch.long)
    unbatched = Composite(agents=Composite(action=action, shape=(3,)), device="cpu")
    reads = {"env.reward_key": ("agents", "reward"), "env.n_agents": 3, "env.action_key": ("agents", "action"),
             "env.observation_spec['agents', 'observation'].shape[-1]": 14, "env.done_keys": ["done", "terminated"],
             "env.full_action_spec_unbatched": unbatched}
    if continuous:
        reads.update({"space.low": -torch.ones(3, 2), "space.high": torch.ones(3, 2)})
    if script == "maddpg_iddpg":
        reads.update({"env.action_spec.shape[-1]": N_ENVS,  # torchrl 0.14: the Composite's batch size
                      "env.full_action_spec_unbatched[env.action_key].shape[-1]": 2})
    elif script in ("iql", "qmix_vdn"):
        reads["env.full_action_spec['agents', 'action'].space.n"] = 9
        if script == "qmix_vdn":
            del reads["env.done_keys"]  # no DoneTransform there
            if s["mixer_type"] == "qmix":
                reads["env.observation_spec_unbatched['agents', 'observation'].shape"] = torch.Size([3, 14])
    elif continuous:
        reads.update({"env.full_observation_spec_unbatched['agents', 'observation'].shape[-1]": 14,
                      "env.full_action_spec_unbatched['agents', 'action'].shape[-1]": 2})
    else:
        reads.update({"env.full_action_spec_unbatched['agents', 'action'].space.n": 9,
                      "env.full_action_spec_unbatched['agents', 'action']": action})
    return reads


def described(reads):
    return {k: describe(v) for k, v in reads.items()}


# --------------------------------------------------------------------------- what the scripts read

@needs_vmas
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", SCRIPTS)
def test_what_each_script_reads_is_vmasenvs(name, scenario):
    ours, theirs = build(name, MPEEnv, scenario), build(name, VmasEnv, scenario)
    assert list(ours.reads) == list(theirs.reads) and len(ours.reads) >= 6
    assert described(ours.reads) == described(theirs.reads)
    for env in (ours.env, theirs.env):  # nothing else the scripts touch on a TransformedEnv differs either
        assert not hasattr(env, "unbatched_action_spec")  # older scripts' name, gone from VmasEnv 0.14
    assert described({"spec": ours.env.full_action_spec, "obs": ours.env.full_observation_spec,
                      "done": ours.env.full_done_spec, "reward": ours.env.full_reward_spec}) == \
        described({"spec": theirs.env.full_action_spec, "obs": theirs.env.full_observation_spec,
                   "done": theirs.env.full_done_spec, "reward": theirs.env.full_reward_spec})


@pytest.mark.parametrize("name", SCRIPTS)
def test_what_each_script_reads_contract(name):
    """Without VmasEnv: the values from docs/environments.md's contract for simple_spread."""
    built = build(name, MPEEnv)
    assert described(built.reads) == described(contract(name))


def test_maddpg_action_spec_reads_as_on_vmasenv():
    """maddpg_iddpg.py sizes its networks with ``env.action_spec.shape[-1]``; on torchrl 0.14
    that is the number of envs (for VmasEnv too: ``test_what_each_script_reads_is_vmasenvs``),
    and ``SyncDataCollector``, which it imports, is gone: the module docstring's two departures."""
    env = build("maddpg", MPEEnv).env
    assert isinstance(env.action_spec, Composite) and env.action_spec.shape == (N_ENVS,)
    assert env.full_action_spec_unbatched[env.action_key].shape[-1] == 2
    with pytest.raises(ImportError):
        from torchrl.collectors import SyncDataCollector  # noqa: F401


# --------------------------------------------------------------------------- one iteration, end to end

def episode_sums(raw):
    """Each env's summed reward per agent over its first episode (which ends at ``MAX_STEPS``)."""
    return raw["next", "agents", "reward"][:, :MAX_STEPS].sum(1)


@pytest.mark.parametrize("name", SCRIPTS)
def test_one_iteration_on_mpeenv(name):
    b = build(name, MPEEnv)
    out = one_iteration(b)
    raw, data = out.raw, out.data
    assert raw.batch_size == (N_ENVS, MAX_STEPS)
    # every env's episode ends at max_steps, not before; RewardSum's sum is that episode's
    done = raw["next", "done"].squeeze(-1)
    assert done[:, -1].all() and not done[:, :-1].any()
    assert raw["next", "terminated"].squeeze(-1).equal(done)
    assert torch.allclose(raw["next", "agents", "episode_reward"][:, -1], episode_sums(raw), atol=1e-5)
    assert not torch.equal(raw["next", "agents", "observation"][:, 0], raw["agents", "observation"][:, 0])  # it moved
    # the actions the explored policy took are the env's
    actions = raw["agents", "action"]
    spec = b.env.full_action_spec_unbatched["agents", "action"]
    assert actions.shape == (N_ENVS, MAX_STEPS, *spec.shape)
    assert spec.is_in(actions.to(spec.dtype))  # (sac.py's one-hot policy writes floats)
    if b.postproc is not None:  # utils/utils.py's DoneTransform: the done keys beside the agents' reward
        for key in ("done", "terminated"):
            assert data["next", "agents", key].shape == (N_ENVS, MAX_STEPS, 3, 1)
            assert data["next", "agents", key].equal(data["next", key].unsqueeze(-1).expand(N_ENVS, MAX_STEPS, 3, 1))
    if b.cfg.script == "qmix_vdn":  # the shared reward: the agents' mean, at the root
        assert torch.allclose(data["next", "reward"], raw["next", "agents", "reward"].mean(-2))
        assert ("next", "agents", "reward") in data.keys(True) and data["next", "agents", "reward"].shape[-2] == 3
    # one gradient step moved every parameter; the losses are finite
    assert out.moved == out.params and len(out.params) >= 6
    for key in b.loss_terms:
        assert torch.isfinite(out.losses[key]).all(), key
    # log_training saw each env's first episode end
    assert out.train_metrics["train/reward/episode_reward_mean"] == pytest.approx(
        episode_sums(raw).mean(-2).mean().item(), abs=1e-5)
    assert out.closed == (True, True)
    if name == "masac_discrete_onehot":
        # sac.py's env_test takes the default categorical_actions (True): its one-hot policy cannot
        # step it, VmasEnv's neither (test_one_iteration_matches_vmasenv); collection above did
        assert isinstance(out.eval_error, ValueError)
        assert "has shape (2, 3, 9), expected (2, 3) (spec: Categorical)" in str(out.eval_error)
        assert actions.dtype == torch.float32  # OneHotCategorical's floats, as the policy wrote them
        return
    assert out.eval_error is None, repr(out.eval_error)
    m = out.eval_metrics
    assert m["eval/episode_len_mean"] == MAX_STEPS
    assert out.rollouts.batch_size == (b.cfg.evaluation_episodes, MAX_STEPS)
    assert float(m["eval/episode_reward_mean"]) == pytest.approx(
        out.rollouts["next", "agents", "reward"].sum(1).mean((-2, -1)).mean().item(), abs=1e-5)
    assert len(out.frames) == MAX_STEPS - 1  # TorchRL's rollout calls back after all steps but the last
    assert out.logger.videos["eval_video"].shape == (1, MAX_STEPS - 1, 3, 400, 400)
    assert out.logger.videos["eval_video"].dtype == torch.uint8 and out.logger.videos["eval_video"].any()
    assert out.fps == 10.0
    assert set(out.logger.scalars) == {k.replace("/", "_") for k in {**out.train_metrics, **m}}


@needs_vmas
@pytest.mark.parametrize("name", SCRIPTS)
def test_one_iteration_matches_vmasenv(name, vmas_runs):
    ours, theirs = one_iteration(build(name, MPEEnv)), vmas_runs(name)
    assert layout(ours.raw) == layout(theirs.raw)
    assert layout(ours.data) == layout(theirs.data)
    assert layout(ours.losses) == layout(theirs.losses)
    assert ours.moved == ours.params and theirs.moved == theirs.params and ours.params == theirs.params
    assert sorted(ours.train_metrics) == sorted(theirs.train_metrics)
    assert (ours.eval_error is None) == (theirs.eval_error is None)
    if ours.eval_error is None:
        assert sorted(ours.eval_metrics) == sorted(theirs.eval_metrics)
        assert ours.eval_metrics["eval/episode_len_mean"] == theirs.eval_metrics["eval/episode_len_mean"]
        assert layout(ours.rollouts) == layout(theirs.rollouts)
        assert len(ours.frames) == len(theirs.frames)
        assert ours.logger.videos["eval_video"].shape[:3] == theirs.logger.videos["eval_video"].shape[:3]
        assert ours.fps == theirs.fps
    assert ours.closed == theirs.closed == (True, True)


# --------------------------------------------------------------------------- what envs/mpe.py changed for them

def test_float_one_hot_actions_are_read_as_vmasenv_reads_them():
    """sac.py's discrete policy (torch's OneHotCategorical) writes one-hot floats; VmasEnv
    reads them through its spec's ``to_categorical`` and so do we; the caller's floats stay."""
    def env(**kw):
        return MPEEnv("simple_spread", num_envs=2, continuous_actions=False, categorical_actions=False, seed=3, **kw)
    ints, floats = env(), env()
    td = ints.reset()
    floats.reset()
    index = torch.tensor([[1, 4, 8], [0, 2, 7]])
    one_hot = torch.nn.functional.one_hot(index, 9)
    a = ints.step(td.clone().set(("agents", "action"), one_hot))
    given = td.clone().set(("agents", "action"), one_hot.float())
    b = floats.step(given)
    assert torch.equal(a["next", "agents", "observation"], b["next", "agents", "observation"])
    assert torch.equal(ints.state["pos"], floats.state["pos"]) and ints.state["vel"].abs().sum() > 0  # it moved
    assert given["agents", "action"].dtype == torch.float32 and b["agents", "action"].dtype == torch.float32
    with pytest.raises(ValueError, match=r"one-hot action \('agents', 'action'\) of dtype torch.float32 has values "
                                         r"other than 0 and 1"):
        floats.step(td.clone().set(("agents", "action"), one_hot.float() * 0.5))
    unchecked = env(check_actions=False)
    unchecked.reset()
    unchecked.step(td.clone().set(("agents", "action"), one_hot.float()))
    assert torch.equal(unchecked.state["pos"], ints.state["pos"])
    # indices stay ints: a Categorical env still refuses floats
    categorical = MPEEnv("simple_spread", num_envs=2, continuous_actions=False, seed=3)
    with pytest.raises(TypeError, match="has dtype torch.float32, expected torch.int64"):
        categorical.step(categorical.reset().set(("agents", "action"), index.float()))
    if VmasEnv is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = VmasEnv("simple_spread", num_envs=2, continuous_actions=False, categorical_actions=False, seed=3)
        out = theirs.step(theirs.reset().set(("agents", "action"), one_hot.float()))  # VmasEnv takes them too
        assert out["next", "agents", "observation"].shape == b["next", "agents", "observation"].shape


def test_scenario_kwargs_a_scenario_lacks():
    """The yamls' ``env.scenario`` (``n_agents: 3``) on a scenario without ``n_agents``: VmasEnv
    warns and drops it, we refuse it by name (drop it from the config: ``~env.scenario.n_agents``)."""
    with pytest.raises(TypeError, match=r"MPEEnv\('simple'\) got unknown parameter\(s\) 'n_agents'"):
        MPEEnv(scenario="simple", num_envs=2, continuous_actions=True, max_steps=5, device="cpu", seed=0, n_agents=3)
    if VmasEnv is not None:
        with pytest.warns(UserWarning, match="n_agents.*passed but not used"):
            assert VmasEnv(scenario="simple", num_envs=2, max_steps=5, seed=0, n_agents=3).n_agents == 1
