"""Dataclass schemas of the recipe configs, each value's allowed range declared next to it.

Hydra rejects wrong types; :func:`check_config` rejects keys the schemas lack (Hydra's ``+key=``
adds any), values out of range, unknown names and an algo that does not fit the env, before any
work starts. :func:`command_line_config` runs those checks on a command line before the recipe
imports torch (a config error is told in about a second, before Hydra makes a run directory).

Examples:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.structured(TrainConfig)
    >>> cfg.algo.lr
    0.0003
    >>> cfg.algo.gamma = 2.0
    >>> check_config(cfg)
    Traceback (most recent call last):
    ...
    torchrl_warp.recipes.config.ConfigError: invalid config:
      algo.gamma must be in [0, 1], got 2.0
"""
from __future__ import annotations

import difflib
import math
import os
import re
import sys
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Callable, Optional

from hydra.core.config_store import ConfigStore

__all__ = ["EnvConfig", "AlgoBase", "AlgoConfig", "OnPolicyConfig", "ReplayConfig", "OffPolicyConfig",
           "ValueDecompositionConfig", "TrainConfig", "MatmulPrecision", "Interval", "setting",
           "ConfigError", "check_config", "check_scenario", "check_video", "mpe_scenarios", "settings_table",
           "register", "unknown_key", "FAMILIES", "ALGO_NAMES", "SINGLE_AGENT_ALGOS", "SCHEMAS", "algo_schema",
           "train_schema", "command_line_config", "check_env_params", "exit_on_config_error", "cpu_batch_warning"]


class MatmulPrecision(Enum):
    """``torch.set_float32_matmul_precision``'s values (torch only warns on any other)."""
    highest = "highest"
    high = "high"                       # TF32 on GPUs that have it
    medium = "medium"


@dataclass(frozen=True)
class Interval:
    """A range of numbers written as in maths: ``[`` / ``]`` include the end, ``(`` / ``)``
    leave it out; ``inf`` ends are always left out, so values in range are finite (NaN never is).

    >>> Interval.parse("(0, inf)").contains(3e-4), Interval.parse("[0, 1]").contains(float("nan"))
    (True, False)
    """
    text: str
    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    @classmethod
    def parse(cls, text: str) -> "Interval":
        m = re.fullmatch(r"\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*", text)
        if not m:
            raise ValueError(f"not an interval: {text!r} (write e.g. '[0, 1]' or '(0, inf)')")
        lo, hi = float(m[2]), float(m[3])
        if (m[1] == "[" and math.isinf(lo)) or (m[4] == "]" and math.isinf(hi)) or not lo <= hi:
            raise ValueError(f"bad interval {text!r}: infinite ends are open, lo <= hi")
        return cls(text.strip(), lo, hi, m[1] == "[", m[4] == "]")

    def contains(self, x) -> bool:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return False
        above = x >= self.lo if self.lo_closed else x > self.lo
        below = x <= self.hi if self.hi_closed else x < self.hi
        return above and below

    def __str__(self) -> str:
        return self.text


def setting(default, doc: str, range: Optional[str] = None, choices: tuple = (),
            check: Optional[Callable[[Any], Optional[str]]] = None):
    """A dataclass field with a one-line ``doc`` and what values it takes, for :func:`check_config`:
    ``range`` an :class:`Interval` (for a list: each item's, and the list is non-empty),
    ``choices`` the valid strings, ``check`` a function returning a problem or None.
    A callable ``default`` is a default factory.

    >>> f = setting(0.99, "discount factor", "[0, 1]")
    >>> f.default, str(f.metadata["range"]), f.metadata["doc"]
    (0.99, '[0, 1]', 'discount factor')
    """
    meta = {"doc": doc, "range": Interval.parse(range) if range else None, "choices": tuple(choices),
            "check": check}
    if callable(default) and not isinstance(default, Enum):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


def check_run_name(name) -> Optional[str]:
    """The problem with a name a file keys a run by (``marl_eval_algorithm``), or None.

    >>> check_run_name(" "), check_run_name("masac_ours")
    ("must be a non-empty name, got ' '", None)
    """
    if name is not None and (not isinstance(name, str) or not name.strip()):
        return f"must be a non-empty name, got {name!r}"
    return None


def check_device(name: str) -> Optional[str]:
    """The problem with a ``device`` value, or None: ``auto``, ``cpu``, ``cuda`` or ``cuda:<index>``
    of a CUDA device this machine has.

    >>> check_device("gpu")
    "must be one of auto, cpu, cuda, cuda:<index>, got 'gpu'"
    """
    if name in ("auto", "cpu"):
        return None
    m = re.fullmatch(r"cuda(?::(\d+))?", name)
    if not m:
        return f"must be one of auto, cpu, cuda, cuda:<index>, got {name!r}"
    import torch

    if not torch.cuda.is_available():
        return f"is {name!r} but this machine has no usable CUDA device (use device=cpu or device=auto)"
    if m[1] is not None and int(m[1]) >= torch.cuda.device_count():
        return f"is {name!r} but this machine has {torch.cuda.device_count()} CUDA device(s)"
    return None


def check_video(value) -> Optional[str]:
    """The problem with a ``video`` value, or None: ``auto`` (a video on CUDA, none on the
    CPU), ``true`` or ``false``.

    >>> check_video("yes")
    "must be auto, true or false, got 'yes'"
    """
    if value == "auto" or isinstance(value, bool):
        return None
    return f"must be auto, true or false, got {value!r}"


ENV_NAMES = ("cartpole", "acrobot", "mountain_car", "mountain_car_continuous", "pendulum", "tag", "tag_gridworld",
             "mpe")
MULTI_AGENT_ENVS = ("tag", "tag_gridworld", "mpe")       # envs with agent groups; the others have one agent
#: each algorithm's family: the module that trains it, recipes/<family>.py
FAMILIES = {"ppo": "on_policy", "mappo": "on_policy", "ippo": "on_policy",
            "ddpg": "off_policy", "sac": "off_policy", "iddpg": "off_policy", "maddpg": "off_policy",
            "isac": "off_policy", "masac": "off_policy",
            "dqn": "value_decomposition", "iql": "value_decomposition", "vdn": "value_decomposition",
            "qmix": "value_decomposition"}
ALGO_NAMES = tuple(FAMILIES)
#: the algorithms for envs of one agent; the others train agent groups
SINGLE_AGENT_ALGOS = ("ppo", "ddpg", "sac", "dqn")
#: the algorithms that act in continuous action spaces (DDPG, SAC), and those that pick among
#: discrete actions (the Q-learners); PPO's family takes both
CONTINUOUS_ALGOS = ("ddpg", "sac", "iddpg", "maddpg", "isac", "masac")
DISCRETE_ALGOS = ("dqn", "iql", "vdn", "qmix")
#: envs whose actions are continuous (MPE: ``env.params.continuous_actions``), and those whose
#: actions are several categoricals per agent (no Q-learner here picks among those)
CONTINUOUS_ENVS = ("pendulum", "mountain_car_continuous")
MULTI_DISCRETE_ENVS = ("tag",)


def mpe_scenarios() -> tuple[str, ...]:
    """The MPE scenarios this installation has (``torchrl_warp.envs.<name>`` exists), in
    ``SCENARIO_NAMES``'s order: the names ``env.scenario`` takes with ``env=mpe``.

    >>> "simple_spread" in mpe_scenarios()
    True

    The modules are looked for, not imported (importing ``torchrl_warp.envs`` loads torch).
    """
    import importlib.util

    from torchrl_warp.names import SCENARIO_NAMES

    envs = importlib.util.find_spec("torchrl_warp.envs")  # imports torchrl_warp only (standard library)
    where = list(envs.submodule_search_locations or []) if envs else []
    return tuple(n for n in SCENARIO_NAMES if any(os.path.isfile(os.path.join(d, f"{n}.py")) for d in where))


def check_scenario(name: str) -> Optional[str]:
    """The problem with an ``env.scenario`` value, or None: empty (envs other than mpe) or an
    MPE scenario this installation has.

    >>> check_scenario("simple_sprad")
    "must be one of ...simple_spread, ..., got 'simple_sprad'"
    """
    if name == "":
        return None
    from torchrl_warp.names import SCENARIO_NAMES

    available = mpe_scenarios()
    if name in available:
        return None
    if name in SCENARIO_NAMES:
        return f"is {name!r}, a VMAS scenario torchrl-warp does not have yet (available: {', '.join(available)})"
    return f"must be one of {', '.join(available)}, got {name!r}"


@dataclass
class EnvConfig:
    name: str = setting("cartpole", "the environment", choices=ENV_NAMES)
    scenario: str = setting("", "the MPE scenario (env=mpe; empty for the other envs)", check=check_scenario)
    num_envs: int = setting(512, "environments stepped in parallel", "[1, inf)")
    steps_per_batch: int = setting(32, "steps per env per batch: a batch is num_envs x steps_per_batch frames",
                                   "[1, inf)")
    total_frames: int = setting(1_000_000, "frames to train for (a resumed run counts the checkpoint's)",
                                "[1, inf)")
    params: dict[str, Any] = setting(dict, "the env's parameters (checked by the env's constructor)")
    graphed_rollout: bool = setting(True, "collect with a GraphedCollector: each batch one CUDA graph replay "
                                          "(CUDA; elsewhere TorchRL's Collector, the same batches)")
    cudagraph_policy: bool = setting(False, "TorchRL's Collector replays the policy as a CUDA graph (CUDA, "
                                            "graphed_rollout=false)")


def _names(family: str) -> tuple:
    return tuple(a for a, f in FAMILIES.items() if f == family)


def check_anneal_frames(value) -> Optional[str]:
    """The problem with an exploration schedule's length, or None: null (half of
    ``env.total_frames``, as TorchRL's examples) or an int >= 1.

    >>> check_anneal_frames(0)
    'must be null (half of env.total_frames) or an int >= 1, got 0'
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"must be null (half of env.total_frames) or an int >= 1, got {value!r}"


def check_train_groups(value) -> Optional[str]:
    """The problem with ``algo.train_groups``, or None: null (every group) or a non-empty list of
    group names (checked against the env's groups when it is built).

    >>> check_train_groups([])
    'must be null (every group) or a non-empty list of group names, got []'
    """
    if value is None or (len(value) > 0 and all(isinstance(v, str) and v for v in value)):
        return None
    return f"must be null (every group) or a non-empty list of group names, got {list(value)!r}"


@dataclass
class AlgoBase:
    """What every algorithm family's ``algo`` section has; each family's schema adds its own
    keys (:data:`SCHEMAS`), so a key of another family is refused by name."""
    name: str = setting("ppo", "the algorithm: algo=<name> picks its config (recipes/conf/algo/<name>.yaml) and "
                               "its family's schema", choices=ALGO_NAMES)
    lr: float = setting(3e-4, "Adam's learning rate", "(0, inf)")
    gamma: float = setting(0.99, "discount factor", "[0, 1]")
    reward_scale: float = setting(1.0, "rewards x this for the critic's targets (values near 1 learn in fewer "
                                       "steps)", "(0, inf)")
    minibatch_size: int = setting(4096, "frames per gradient step: on-policy, drawn from the batch (at most a "
                                        "batch; the remainder of a batch is left out); off-policy, sampled from "
                                        "the replay buffer", "[1, inf)")
    max_grad_norm: float = setting(1.0, "gradient clipping norm", "(0, inf)")
    hidden: list[int] = setting(lambda: [64, 64], "hidden layer widths of actors and critics", "[1, inf)")
    amp: bool = setting(False, "bfloat16 autocast for the loss forward passes (CUDA)")
    obs_norm: bool = setting(False, "standardize observations in the networks (stats of a random rollout)")
    matmul_precision: MatmulPrecision = setting(MatmulPrecision.high, "torch.set_float32_matmul_precision")
    cudagraph_update: bool = setting(False, "each gradient step replayed as one CUDA graph (CUDA only)")


@dataclass
class AlgoConfig(AlgoBase):
    """On-policy (recipes/on_policy.py): PPO, MAPPO, IPPO."""
    name: str = setting("ppo", "the loss: ppo (single-agent envs), mappo or ippo (multi-agent)",
                        choices=_names("on_policy"))
    lmbda: float = setting(0.95, "GAE's lambda", "[0, 1]")
    clip_epsilon: float = setting(0.2, "PPO's ratio clip", "(0, inf)")
    entropy_coeff: float = setting(0.0, "weight of the entropy bonus (0: none computed)", "[0, inf)")
    critic_coeff: float = setting(0.5, "weight of the critic's loss", "[0, inf)")
    epochs: int = setting(4, "passes over each batch", "[1, inf)")
    anneal_lr: bool = setting(False, "lr falls linearly to 0 at env.total_frames")


#: the on-policy family's schema (:class:`AlgoConfig`, its name since it was the only one)
OnPolicyConfig = AlgoConfig


@dataclass
class ReplayConfig(AlgoBase):
    """What the off-policy families share (recipes/replay.py): the replay buffer, the
    update-to-data ratio, target networks, parameter sharing, which groups train."""
    buffer_size: int = setting(1_000_000, "frames the replay buffer holds (on the env's device; the oldest "
                                          "are overwritten)", "[1, inf)")
    frames_per_gradient_step: int = setting(256, "frames collected per gradient step (the update-to-data "
                                                 "ratio's inverse): a batch of F frames is followed by F / this "
                                                 "gradient steps, each frame drawn minibatch_size / this times "
                                                 "on average over its stay in the buffer", "[1, inf)")
    init_random_frames: int = setting(0, "frames collected with uniform-random actions before the policy acts "
                                         "(whole batches; a resumed run collects none)", "[0, inf)")
    tau: float = setting(0.005, "SoftUpdate's rate: target <- (1 - tau) target + tau online, every gradient step "
                                "(with hard_update_interval=0)", "(0, 1]")
    hard_update_interval: int = setting(0, "copy the online networks into the targets every this many gradient "
                                           "steps (HardUpdate; 0: SoftUpdate with tau)", "[0, inf)")
    share_params: bool = setting(True, "one network shared by a group's agents (False: one per agent; "
                                       "MultiAgentMLP's share_params)")
    checkpoint_buffer: bool = setting(True, "checkpoints hold the replay buffer (buffer_size frames: the memory "
                                            "table's replay row, on disk), so a resumed run continues with it; "
                                            "false: a resumed run starts from an empty buffer")
    train_groups: Optional[list[str]] = setting(None, "the groups trained (null: all); the others act with "
                                                      "their initial (or resumed) networks and are not updated",
                                                check=check_train_groups)


@dataclass
class OffPolicyConfig(ReplayConfig):
    """Off-policy actor-critic (recipes/off_policy.py): DDPG, SAC and their multi-agent forms."""
    name: str = setting("ddpg", "ddpg or sac (single-agent envs); iddpg, maddpg, isac, masac (multi-agent: "
                                "the ma- forms' critics see every agent of the group)",
                        choices=_names("off_policy"))
    sigma_init: float = setting(1.0, "DDPG: the standard deviation of AdditiveGaussianModule's noise (in action "
                                     "units, the sum clamped to the action's bounds) at the start", "[0, inf)")
    sigma_end: float = setting(0.1, "DDPG: the noise scale at the end of its schedule (at most sigma_init)",
                               "[0, inf)")
    sigma_anneal_frames: Optional[int] = setting(None, "DDPG: frames over which the noise falls linearly from "
                                                       "sigma_init to sigma_end", check=check_anneal_frames)
    alpha_init: float = setting(1.0, "SAC: the entropy coefficient's initial value", "(0, inf)")
    fixed_alpha: bool = setting(False, "SAC: keep alpha at alpha_init (False: tuned towards the target "
                                       "entropy -action dims)")


@dataclass
class ValueDecompositionConfig(ReplayConfig):
    """Value-based and value decomposition (recipes/value_decomposition.py): DQN, IQL, VDN, QMIX."""
    name: str = setting("dqn", "dqn (single-agent envs); iql, vdn, qmix (multi-agent: vdn and qmix mix the "
                               "group's Q-values into one)", choices=_names("value_decomposition"))
    eps_init: float = setting(1.0, "EGreedyModule's chance of a uniform-random action at the start", "[0, 1]")
    eps_end: float = setting(0.05, "its chance at the end of its schedule (at most eps_init)", "[0, 1]")
    eps_anneal_frames: Optional[int] = setting(None, "frames over which it falls linearly from eps_init to "
                                                     "eps_end", check=check_anneal_frames)
    mixing_embed_dim: int = setting(32, "QMIX: the width of its mixing network (QMixer's mixing_embed_dim)",
                                    "[1, inf)")


#: each family's ``algo`` schema (Hydra types the ``algo`` node with it: :func:`register`)
SCHEMAS = {"on_policy": AlgoConfig, "off_policy": OffPolicyConfig, "value_decomposition": ValueDecompositionConfig}


def algo_schema(name) -> type:
    """The ``algo`` schema of algorithm ``name`` (its family's); :class:`AlgoBase` for a name
    no family has.

    >>> algo_schema("masac").__name__, algo_schema("ppo").__name__, algo_schema("a2c").__name__
    ('OffPolicyConfig', 'AlgoConfig', 'AlgoBase')
    """
    return SCHEMAS[FAMILIES[name]] if name in FAMILIES else AlgoBase


def train_schema(algo_name: str = "ppo"):
    """The structured :class:`TrainConfig` whose ``algo`` section has algorithm ``algo_name``'s
    family schema (its defaults), for merging a saved config into.

    >>> train_schema("qmix").algo.mixing_embed_dim
    32
    """
    from omegaconf import OmegaConf

    return OmegaConf.structured(TrainConfig(algo=algo_schema(algo_name)(name=algo_name)))


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoBase = field(default_factory=AlgoConfig)
    device: str = setting("auto", "auto (cuda if available, else cpu), cpu, cuda or cuda:<index>",
                          check=check_device)
    seed: int = setting(0, "seed of torch and the envs (evaluation: seed + 10000)", "[0, inf)")
    logger: str = setting("csv", "where scalars go: csv, tensorboard or none", choices=("csv", "tensorboard", "none"))
    checkpoint_every: int = setting(10, "iterations between checkpoints (one is also written at the end)",
                                    "[1, inf)")
    resume: Optional[str] = setting(None, "a checkpoint.pt to continue from (checked before any work)")
    eval_envs: int = setting(256, "environments of each evaluation (one episode each)", "[1, inf)")
    eval_interval_frames: int = setting(0, "evaluate every this many frames during training too (each one's "
                                           "seconds kept off the training clocks; 0: the final evaluation only); "
                                           "every evaluation goes into marl_eval.json", "[0, inf)")
    marl_eval_algorithm: Optional[str] = setting(None, "the algorithm's name in marl_eval.json (null: algo.name)",
                                                  check=check_run_name)
    time_limit_s: float = setting(0.0, "seconds of training (setup and evaluation not counted), checked after each "
                                       "gradient step: a batch's collection is not cut short (0: no limit)",
                                  "[0, inf)")
    profile_iteration: int = setting(0, "profile this iteration (collection + update) into profile.txt (0: off)",
                                     "[0, inf)")
    video: Any = setting("auto", "write video.gif of the trained agents at the end (auto: on CUDA only)",
                         check=check_video)


def _section(f) -> bool:
    """Whether dataclass field ``f`` is a nested section (``env``, ``algo``)."""
    return callable(f.default_factory) and is_dataclass(f.default_factory)


def _section_schema(f, algo=None):
    """The schema of section field ``f``: ``algo``'s is the given one (the run's family's), the
    others their default's."""
    return algo if f.name == "algo" and algo is not None else f.default_factory


def _algo_schema_of(cfg) -> type:
    """The schema of a config's ``algo`` section: its node's type where Hydra typed it (a
    composed config), else the one of its ``algo.name``."""
    from omegaconf import OmegaConf

    node = cfg.get("algo") if hasattr(cfg, "get") else None
    kind = OmegaConf.get_type(node) if node is not None and OmegaConf.is_config(node) else None
    if isinstance(kind, type) and issubclass(kind, AlgoBase) and kind is not AlgoBase:
        return kind
    name = node.get("name", "ppo") if node is not None else "ppo"
    return algo_schema(name) if name in FAMILIES else AlgoConfig


class ConfigError(ValueError):
    """A config value out of its range, or an unknown name: raised before any work.
    ``problems``: one line each.

    >>> ConfigError(["algo.gamma must be in [0, 1], got 2.0"]).problems
    ['algo.gamma must be in [0, 1], got 2.0']
    """

    def __init__(self, problems):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("invalid config:\n  " + "\n  ".join(self.problems))


def _problems(node, schema, prefix: str, algo=None):
    for f in fields(schema):
        name, value = f"{prefix}{f.name}", node[f.name]
        if _section(f):
            yield from _problems(value, _section_schema(f, algo), f"{name}.")
            continue
        meta = f.metadata
        if meta.get("choices") and value not in meta["choices"]:
            hint = f" (algo={value} picks {value}'s config)" if name == "algo.name" and value in FAMILIES else ""
            yield f"{name} must be one of {', '.join(meta['choices'])}, got {value!r}{hint}"
        if meta.get("check") and (problem := meta["check"](value)):
            yield f"{name} {problem}"
        interval = meta.get("range")
        if interval is None:
            continue
        if isinstance(value, (int, float, str, bool)) or value is None:
            if not interval.contains(value):
                yield f"{name} must be in {interval}, got {value!r}"
        elif len(value) == 0 or not all(interval.contains(v) for v in value):
            yield f"{name} must be a non-empty list of numbers in {interval}, got {list(value)!r}"


def check_config(cfg) -> None:
    """Raise :class:`ConfigError` naming every key the schemas lack (with the closest known
    one), every key whose value is out of its declared range or not one of its choices, an
    algo that does not fit the env (:data:`SINGLE_AGENT_ALGOS` for single-agent envs, the
    others for multi-agent ones; DDPG and SAC need continuous actions, the Q-learners discrete
    ones), and a replay buffer smaller than a collected batch or a minibatch. ``cfg``: a :class:`TrainConfig` DictConfig.

    >>> from omegaconf import OmegaConf
    >>> check_config(OmegaConf.structured(TrainConfig))  # the defaults are fine
    >>> check_config(train_schema("qmix"))  # the defaults' env (cartpole) has one agent
    Traceback (most recent call last):
    ...
    torchrl_warp.recipes.config.ConfigError: invalid config:
      algo=qmix does not fit env=cartpole: use ppo, ddpg, sac, dqn for single-agent envs, ...
    """
    algo = _algo_schema_of(cfg)
    problems = [unknown_key(k, algo) for k in _extra_keys(cfg, TrainConfig, "", algo)]  # +algo.learning_rate=...
    problems += _problems(cfg, TrainConfig, "", algo)
    if cfg.env.name in ENV_NAMES and cfg.algo.name in ALGO_NAMES and \
            (cfg.env.name in MULTI_AGENT_ENVS) == (cfg.algo.name in SINGLE_AGENT_ALGOS):
        single = ", ".join(SINGLE_AGENT_ALGOS)
        multi = ", ".join(a for a in ALGO_NAMES if a not in SINGLE_AGENT_ALGOS)
        problems.append(f"algo={cfg.algo.name} does not fit env={cfg.env.name}: use {single} for single-agent envs, "
                        f"{multi} for multi-agent ones")
    problems += _mpe_problems(cfg.env)
    problems += _action_problems(cfg)
    for start, end in (("sigma_init", "sigma_end"), ("eps_init", "eps_end")):  # TorchRL's modules refuse a rise
        if start in cfg.algo and cfg.algo[end] > cfg.algo[start]:
            problems.append(f"algo.{end}={cfg.algo[end]} is above algo.{start}={cfg.algo[start]}: the exploration "
                            f"falls from {start} to {end}")
    if issubclass(algo, ReplayConfig):
        batch = cfg.env.num_envs * cfg.env.steps_per_batch
        need = max(batch, cfg.algo.minibatch_size)
        if cfg.algo.buffer_size < need:
            problems.append(f"algo.buffer_size={cfg.algo.buffer_size} is smaller than a collected batch "
                            f"(env.num_envs={cfg.env.num_envs} x env.steps_per_batch={cfg.env.steps_per_batch} = "
                            f"{batch} frames) or a minibatch (algo.minibatch_size={cfg.algo.minibatch_size}): raise "
                            f"algo.buffer_size to at least {need}")
    if problems:
        raise ConfigError(problems)


def _action_kind(env) -> str:
    """``continuous``, ``discrete`` or ``multi-discrete``: the actions of the env of config
    section ``env`` (MPE: its ``env.params``)."""
    if env.name == "mpe":
        params = env.params
        if params.get("continuous_actions", True) is not False:
            return "continuous"
        return "multi-discrete" if params.get("multidiscrete_actions", False) else "discrete"
    if env.name in CONTINUOUS_ENVS:
        return "continuous"
    return "multi-discrete" if env.name in MULTI_DISCRETE_ENVS else "discrete"


def _action_problems(cfg) -> list[str]:
    """DDPG and SAC act in continuous action spaces; the Q-learners pick one of a discrete set
    per agent: each refused elsewhere, naming the fix."""
    algo, env = cfg.algo.name, cfg.env
    if env.name not in ENV_NAMES or algo not in CONTINUOUS_ALGOS + DISCRETE_ALGOS:
        return []
    kind = _action_kind(env)
    if algo in CONTINUOUS_ALGOS and kind != "continuous":
        fix = "set env.params.continuous_actions=true" if env.name == "mpe" else \
            f"use env={' or env='.join(CONTINUOUS_ENVS)}" if algo in SINGLE_AGENT_ALGOS else \
            "use env=mpe (continuous actions)"
        q = "algo=dqn" if algo in SINGLE_AGENT_ALGOS else "algo=iql, vdn or qmix"
        return [f"algo={algo} acts in continuous action spaces; env={env.name}'s actions are {kind}: {fix}, "
                f"or {q}"]
    if algo in DISCRETE_ALGOS and kind != "discrete":
        if env.name == "mpe":
            fix = "set env.params.continuous_actions=false" + \
                  (" env.params.multidiscrete_actions=false" if kind == "multi-discrete" else "")
        else:
            fix = "use env=cartpole, env=acrobot or env=mountain_car" if algo in SINGLE_AGENT_ALGOS else \
                "use env=mpe with env.params.continuous_actions=false, or env=tag_gridworld"
        return [f"algo={algo} picks one of a discrete set of actions per agent; env={env.name}'s actions are {kind}: "
                f"{fix}"]
    return []


def _mpe_problems(env) -> list[str]:
    """What ``env=mpe`` needs of ``env.scenario`` and ``env.params``, and that the other envs
    have no scenario (the scenario's own parameters are checked by its constructor)."""
    if env.name != "mpe":
        return [f"env.scenario applies to env=mpe only, got {env.scenario!r} with env={env.name}"] \
            if env.scenario else []
    problems = []
    if not env.scenario:
        problems.append(f"env.scenario must name an MPE scenario with env=mpe: one of {', '.join(mpe_scenarios())}")
    params = env.params
    max_steps = params.get("max_steps", None)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        problems.append(f"env.params.max_steps must be an int >= 1 with env=mpe (the evaluation plays one "
                        f"episode), got {max_steps!r}")
    if params.get("continuous_actions", True) is False and params.get("categorical_actions", True) is False:
        problems.append("env.params.categorical_actions=false (one-hot actions) is not trained by the recipe: "
                        "its discrete policies sample indices (categorical_actions=true)")
    return problems


#: other codebases' names (cleanrl, Stable-Baselines3, TorchRL's examples) -> ours, for refusals
ALIASES = {"learning_rate": "lr", "lambda": "lmbda", "gae_lambda": "lmbda", "clip": "clip_epsilon",
           "clip_coef": "clip_epsilon", "clip_range": "clip_epsilon", "ent_coef": "entropy_coeff",
           "entropy_coef": "entropy_coeff", "vf_coef": "critic_coeff", "critic_coef": "critic_coeff",
           "n_epochs": "epochs", "num_epochs": "epochs", "update_epochs": "epochs", "ppo_epochs": "epochs",
           "batch_size": "minibatch_size", "mini_batch_size": "minibatch_size", "n_envs": "num_envs",
           "n_steps": "steps_per_batch", "num_steps": "steps_per_batch", "total_timesteps": "total_frames",
           "hidden_sizes": "hidden", "num_cells": "hidden", "grad_clip": "max_grad_norm",
           "clip_grad_norm": "max_grad_norm", "time_limit": "time_limit_s"}


def _keys(schema=TrainConfig, prefix: str = "", algo=None) -> list[str]:
    """Every dotted key of ``schema``, its sections' included (``env``, ``env.name``, ...);
    ``algo``: the ``algo`` section's schema (default: on-policy's)."""
    keys = []
    for f in fields(schema):
        keys.append(prefix + f.name)
        if _section(f):
            keys += _keys(_section_schema(f, algo), f"{prefix}{f.name}.")
    return keys


def _is_known(key: str, algo=None) -> bool:
    """Whether the dotted ``key`` is in the schemas (``algo``: the ``algo`` section's, default
    on-policy's); anything under ``env.params`` is (the env's)."""
    schema = TrainConfig
    for part in key.split("."):
        f = {f.name: f for f in fields(schema)}.get(part) if schema else None
        if f is None:
            return False
        if schema is EnvConfig and part == "params":
            return True
        schema = _section_schema(f, algo) if _section(f) else None
    return True


def _extra_keys(node, schema, prefix: str, algo=None):
    """The dotted keys of config ``node`` that ``schema`` lacks (Hydra's ``+key=value`` adds any)."""
    known = {f.name: f for f in fields(schema)}
    for k in node.keys():
        f = known.get(k)
        if f is None:
            yield f"{prefix}{k}"
        elif _section(f):
            yield from _extra_keys(node[k], _section_schema(f, algo), f"{prefix}{k}.")


def unknown_key(key: str, algo=None) -> str:
    """The refusal of ``key``, which the schemas lack (``algo``: the ``algo`` section's schema,
    default on-policy's), naming the closest key they have: the same name in another section,
    another codebase's name for it (:data:`ALIASES`), or a near spelling; and a key of another
    algorithm family, the algorithms that take it.

    >>> unknown_key("algo.learning_rate")
    'algo.learning_rate is not a config key: did you mean algo.lr?'
    >>> unknown_key("num_envs")
    'num_envs is not a config key: did you mean env.num_envs?'
    >>> unknown_key("algo.gama")
    'algo.gama is not a config key: did you mean algo.gamma?'
    >>> unknown_key("algo.tau")
    'algo.tau is not a config key of algo=ppo, mappo, ippo (algo.tau is one of algo=ddpg, sac, ..., qmix)'
    >>> unknown_key("algo.num_epochs", OffPolicyConfig)
    'algo.num_epochs is not a config key of algo=ddpg, ..., masac (algo.epochs is one of algo=ppo, mappo, ippo)'
    """
    algo = AlgoConfig if algo is None else algo
    known = _keys(algo=algo)
    section, _, name = key.rpartition(".")
    name = ALIASES.get(name, name)
    same_name = sorted((k for k in known if k.rpartition(".")[2] == name),
                       key=lambda k: k.rpartition(".")[0] != section)  # this section's first
    guess = same_name[:1] or difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    aliased = f"{section}.{name}"
    takers = [a for a in ALGO_NAMES if _is_known(aliased, algo_schema(a))] \
        if section == "algo" and not _is_known(aliased, algo) else []
    if takers:  # a key of another family's schema: which algorithms take it, and a close key only if very close
        mine = ", ".join(a for a, f in FAMILIES.items() if SCHEMAS[f] is algo) or "?"
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        did_you_mean = f": did you mean {close[0]}?" if close else ""
        return f"{key} is not a config key of algo={mine}{did_you_mean} ({aliased} is one of algo={', '.join(takers)})"
    if guess:
        return f"{key} is not a config key: did you mean {guess[0]}?"
    return f"{key} is not a config key (python -m torchrl_warp.recipes.train --cfg job prints them all)"


def _chosen_algo(overrides) -> str:
    """The ``algo=...`` group choice of parsed command-line ``overrides`` (the last one), or the
    default of recipes/conf/config.yaml's defaults list."""
    chosen = [o.value() for o in overrides if o.key_or_group == "algo" and o.package is None
              and isinstance(o.value(), str)]
    if chosen:
        return chosen[-1]
    from omegaconf import OmegaConf

    for entry in OmegaConf.load(os.path.join(CONF_DIR, "config.yaml")).defaults:
        if not isinstance(entry, str) and "algo" in entry:
            return entry["algo"]
    return "ppo"


def _override_problems(overrides: list[str]) -> list[str]:
    """The refusal of each command-line override whose key the schemas lack (the ``algo``
    section's: the family's of ``algo=...``), with or without ``+``; config group choices
    (``env=tag``) and Hydra's own keys (``hydra.run.dir``) pass."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    chosen = _chosen_algo(parsed)
    algo = algo_schema(chosen)
    problems = []
    for override in parsed:
        key = override.key_or_group
        if key.split(".")[0] == "hydra" or "/" in key or override.package is not None:
            continue
        if key.startswith("algo.") and chosen not in FAMILIES:  # algo=<unknown>: Hydra lists the algos
            continue
        if not _is_known(key, algo):
            problems.append(unknown_key(key, algo))
    return problems


def _one_line(error: BaseException) -> str:
    """Hydra's or OmegaConf's error and its cause as one line, without the search path and the
    node's types."""
    parts = []
    while error is not None and len(parts) < 3:
        text, options = [], []
        for line in str(error).split("Config search path:")[0].splitlines():
            if line.startswith("\t"):
                options.append(line.strip())
            elif line.strip() and not line.strip().startswith(("full_key:", "reference_type=", "object_type=",
                                                               "See https://")):
                text.append(line.strip())
        text = [line.rstrip(".") for line in text[:-1]] + text[-1:]
        parts.append("; ".join(text) + (" " + ", ".join(options) if options else ""))
        error = error.__cause__
    return ": ".join(p for p in parts if p)


CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf")
#: flags with which Hydra still runs the recipe on the command line's config
_RUN_FLAGS = {"-m", "--multirun", "-r", "--run"}


def command_line_config(argv: list[str]):
    """The config ``python -m torchrl_warp.recipes.train <argv>`` trains with, checked as
    :func:`check_config` checks it (with Hydra's own errors, such as a wrong type, as
    :class:`ConfigError`), without importing torch (unless ``device=cuda...``). Returns
    None where Hydra is asked for something else (``--help``, ``--cfg``, ``--config-dir``...:
    Hydra answers), and with ``--multirun`` once the keys are checked (a sweep's values are
    checked job by job).

    >>> command_line_config(["env=tag", "algo=mappo", "+algo.learning_rate=1e-3"])
    Traceback (most recent call last):
    ...
    torchrl_warp.recipes.config.ConfigError: invalid config:
      algo.learning_rate is not a config key: did you mean algo.lr?
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    flags = {a for a in argv if a.startswith("-")}
    if flags - _RUN_FLAGS:
        return None
    overrides = [a for a in argv if not a.startswith("-")]
    try:
        problems = _override_problems(overrides)
        if problems:
            raise ConfigError(problems)
        if flags & {"-m", "--multirun"}:
            return None
        register()
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError([_one_line(error)]) from None
    check_config(cfg)
    return cfg


#: the env constructor's arguments that the recipe sets itself, and where a run sets them
_SET_BY_RECIPE = {"num_envs": "env.num_envs", "device": "device", "seed": "seed", "scenario": "env.scenario",
                  "check_actions": None}


def check_env_params(env, classes: dict) -> None:
    """Raise :class:`ConfigError` for each name in ``env.params`` (``env``: the config's ``env``
    section) that the env does not take, with the closest one it does, and for the arguments
    the recipe sets itself: what the env's constructor refuses, told before a run starts.
    ``classes``: the recipe's envs by name (MPE's: its scenario's class). Imports the env's
    module (torch, TorchRL, Numba: seconds).

    >>> from omegaconf import OmegaConf
    >>> from torchrl_warp.envs import TagEnv
    >>> check_env_params(OmegaConf.create({"name": "tag", "params": {"num_runner": 3}}), {"tag": TagEnv})
    Traceback (most recent call last):
    ...
    torchrl_warp.recipes.config.ConfigError: invalid config:
      env.params: TagEnv got unknown parameter(s) 'num_runner' (did you mean 'num_runners'?); valid parameters: ...
    """
    import importlib
    import inspect

    from torchrl_warp.env import WarpEnv

    extra = set()
    if env.name == "mpe":
        mpe = importlib.import_module("torchrl_warp.envs.mpe")
        importlib.import_module(f"torchrl_warp.envs.{env.scenario}")  # registers it in SCENARIOS
        cls = mpe.SCENARIOS[env.scenario]
        extra = set(inspect.signature(mpe.MPEEnv).parameters) | set(getattr(mpe, "_UNSUPPORTED", {}))
    else:
        cls = classes[env.name]
    for klass in cls.__mro__[:cls.__mro__.index(WarpEnv) + 1]:  # the keyword arguments of its constructors
        if "__init__" in vars(klass):
            extra |= {p.name for p in inspect.signature(vars(klass)["__init__"]).parameters.values()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and not p.name.startswith("_")}
    taken = set(cls.parameters) | extra
    problems = [f"env.params.{name} is set by the recipe" + (f": use {where}=..." if where else "")
                for name, where in _SET_BY_RECIPE.items() if name in env.params]
    unknown = sorted(n for n in env.params if n not in taken and n not in _SET_BY_RECIPE)
    if unknown:
        guesses = [g for n in unknown for g in difflib.get_close_matches(n, sorted(taken - {"self"}), n=1)]
        hint = f" (did you mean {', '.join(map(repr, guesses))}?)" if guesses else ""
        problems.append(f"env.params: {cls.__name__} got unknown parameter(s) {', '.join(map(repr, unknown))}{hint}; "
                        f"valid parameters: {', '.join(sorted(cls.parameters))}")
    if problems:
        raise ConfigError(problems)


def exit_on_config_error(check: Callable, *args):
    """``check(*args)``'s result; on a :class:`ConfigError`, its problems printed to stderr as
    ``error: ...`` lines (by rank 0 alone under torchrun), and exit status 2 (a bad command line's)."""
    try:
        return check(*args)
    except ConfigError as error:
        if os.environ.get("RANK", "0") == "0":
            print("\n".join(f"error: {p}" for p in error.problems), file=sys.stderr)
        sys.exit(2)


#: agent-steps per batch beyond which a CPU run is told its batch is sized for a GPU
#: (CartPole's default 2048 x 32 is at the bound; env/mpe.yaml's 4096 x 25 x 3 beyond it)
CPU_BATCH_AGENT_STEPS = 65536


def cpu_batch_warning(num_envs: int, steps_per_batch: int, num_agents: int, minibatch_size: int) -> Optional[str]:
    """What a run on the CPU is told at launch when its batch is sized for a GPU, with a CPU size
    of the same shape (as many gradient steps a batch), or None. (One CPU, env=mpe's defaults:
    a batch's collection took 0.9 s, its 32 gradient steps 0.8 s each.)

    >>> print(cpu_batch_warning(4096, 25, 3, 12800))  # env=mpe's defaults
    a batch of env.num_envs=4096 x env.steps_per_batch=25 x 3 agents (307200 agent-steps) is sized for a GPU: \
on a CPU a batch (its collection and update) takes tens of seconds; for the CPU try env.num_envs=512 \
algo.minibatch_size=1600
    >>> cpu_batch_warning(2048, 32, 1, 16384) is None
    True
    """
    agent_steps = num_envs * steps_per_batch * num_agents
    if agent_steps <= CPU_BATCH_AGENT_STEPS:
        return None
    fits = max(1, CPU_BATCH_AGENT_STEPS // (steps_per_batch * num_agents))
    envs = 1 << (fits.bit_length() - 1)  # a power of 2
    advice = f"env.num_envs={envs}"
    if minibatch_size < num_envs * steps_per_batch:
        advice += f" algo.minibatch_size={max(1, minibatch_size * envs // num_envs)}"
    return (f"a batch of env.num_envs={num_envs} x env.steps_per_batch={steps_per_batch} x {num_agents} agents "
            f"({agent_steps} agent-steps) is sized for a GPU: on a CPU a batch (its collection and update) takes "
            f"tens of seconds; for the CPU try {advice}")


def _declared_by(schema) -> list:
    """The fields ``schema`` declares itself (not its base classes'), ``name`` left out of the
    families' (the base's row lists every algorithm)."""
    own = schema.__dict__.get("__annotations__", {})
    return [f for f in fields(schema) if f.name in own and (schema is AlgoBase or f.name != "name")]


def _family_algos(schema) -> str:
    """The algorithms whose ``algo`` schema is ``schema`` or derives from it, as ``algo=a, b``."""
    return "algo=" + ", ".join(a for a in ALGO_NAMES if issubclass(algo_schema(a), schema))


def settings_table() -> str:
    """Every config key with its default, its allowed values and its doc, as a Markdown table;
    the ``algo`` keys of one family (:data:`SCHEMAS`) say which algorithms take them.

    >>> print(settings_table().splitlines()[2])
    | env.name | cartpole | cartpole, acrobot, mountain_car, mountain_car_continuous, pendulum, tag, tag_gridworld, mpe | the environment |
    >>> print(*[row for row in settings_table().splitlines() if row.startswith("| algo.tau ")])
    | algo.tau | 0.005 | (0, 1] | algo=ddpg, sac, iddpg, maddpg, isac, masac, dqn, iql, vdn, qmix: SoftUpdate's rate: ...
    """
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]

    def row(f, prefix, note=""):
        default = f.default_factory() if callable(f.default_factory) else f.default
        default = default.value if isinstance(default, Enum) else default
        m = f.metadata
        allowed = ", ".join(m["choices"]) or str(m["range"] or "")
        if isinstance(f.default, Enum):
            allowed = ", ".join(e.value for e in type(f.default))
        elif isinstance(default, list):
            allowed = f"non-empty list, each in {m['range']}"
        elif isinstance(default, bool):
            allowed = "true, false"
        elif m["check"] is check_device:
            allowed = "auto, cpu, cuda, cuda:<index> (of a CUDA device this machine has)"
        elif m["check"] is check_video:
            allowed = "auto, true, false"
        elif m["check"] is check_scenario:
            allowed = f"empty, or with env=mpe one of {', '.join(mpe_scenarios())}"
        elif m["check"] is check_anneal_frames:
            allowed = "null, or an int >= 1"
        elif m["check"] is check_train_groups:
            allowed = "null, or a non-empty list of the env's group names"
        default = "null" if default is None else default
        rows.append(f"| {prefix}{f.name} | {default} | {allowed} | {note}{m['doc']} |")

    for f in fields(TrainConfig):
        if f.name == "algo":
            for schema in (AlgoBase, AlgoConfig, ReplayConfig, OffPolicyConfig, ValueDecompositionConfig):
                note = "" if schema is AlgoBase else f"{_family_algos(schema)}: "
                for g in _declared_by(schema):
                    row(g, "algo.", note)
        elif _section(f):
            for g in fields(f.default_factory):
                row(g, f"{f.name}.")
        else:
            row(f, "")
    return "\n".join(rows)


def register() -> None:
    """Store the recipe's schemas in Hydra's ConfigStore: ``train_schema`` (its ``algo`` node
    typed by the base, :class:`AlgoBase`) and, in the group ``schema/algo``, each family's
    ``algo`` schema (:data:`SCHEMAS`), which recipes/conf/algo/<name>.yaml names in its defaults
    list (``- /schema/algo@_here_: off_policy``): Hydra then types the ``algo`` node per family,
    and a key of another family (``algo.tau`` with ``algo=ppo``) is refused."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig(algo=AlgoBase()))
    for family, schema in SCHEMAS.items():
        store.store(group="schema/algo", name=family, node=schema)
