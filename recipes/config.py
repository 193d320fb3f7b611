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

__all__ = ["EnvConfig", "AlgoConfig", "TrainConfig", "MatmulPrecision", "Interval", "setting",
           "ConfigError", "check_config", "check_scenario", "check_video", "mpe_scenarios", "settings_table",
           "register", "unknown_key", "FAMILIES", "ALGO_NAMES", "SINGLE_AGENT_ALGOS", "command_line_config", "check_env_params", "exit_on_config_error",
           "cpu_batch_warning"]


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
FAMILIES = {"ppo": "on_policy", "mappo": "on_policy", "ippo": "on_policy"}
ALGO_NAMES = tuple(FAMILIES)
#: the algorithms for envs of one agent; the others train agent groups
SINGLE_AGENT_ALGOS = ("ppo",)


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


@dataclass
class AlgoConfig:
    name: str = setting("ppo", "the loss: ppo (single-agent envs), mappo or ippo (multi-agent)",
                        choices=ALGO_NAMES)
    lr: float = setting(3e-4, "Adam's learning rate", "(0, inf)")
    gamma: float = setting(0.99, "discount factor", "[0, 1]")
    lmbda: float = setting(0.95, "GAE's lambda", "[0, 1]")
    clip_epsilon: float = setting(0.2, "PPO's ratio clip", "(0, inf)")
    entropy_coeff: float = setting(0.0, "weight of the entropy bonus (0: none computed)", "[0, inf)")
    critic_coeff: float = setting(0.5, "weight of the critic's loss", "[0, inf)")
    reward_scale: float = setting(1.0, "rewards x this for GAE and the critic (values near 1 learn in fewer "
                                       "steps)", "(0, inf)")
    epochs: int = setting(4, "passes over each batch", "[1, inf)")
    minibatch_size: int = setting(4096, "frames per gradient step (at most a batch; the remainder of a "
                                        "batch is left out)", "[1, inf)")
    max_grad_norm: float = setting(1.0, "gradient clipping norm", "(0, inf)")
    hidden: list[int] = setting(lambda: [64, 64], "hidden layer widths of actors and critics", "[1, inf)")
    amp: bool = setting(False, "bfloat16 autocast for the loss forward passes (CUDA)")
    obs_norm: bool = setting(False, "standardize observations in the networks (stats of a random rollout)")
    anneal_lr: bool = setting(False, "lr falls linearly to 0 at env.total_frames")
    matmul_precision: MatmulPrecision = setting(MatmulPrecision.high, "torch.set_float32_matmul_precision")
    cudagraph_update: bool = setting(False, "each gradient step replayed as one CUDA graph (CUDA only)")


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    device: str = setting("auto", "auto (cuda if available, else cpu), cpu, cuda or cuda:<index>",
                          check=check_device)
    seed: int = setting(0, "seed of torch and the envs (evaluation: seed + 10000)", "[0, inf)")
    logger: str = setting("csv", "where scalars go: csv, tensorboard or none", choices=("csv", "tensorboard", "none"))
    checkpoint_every: int = setting(10, "iterations between checkpoints (one is also written at the end)",
                                    "[1, inf)")
    resume: Optional[str] = setting(None, "a checkpoint.pt to continue from (checked before any work)")
    eval_envs: int = setting(256, "environments of the final evaluation", "[1, inf)")
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


class ConfigError(ValueError):
    """A config value out of its range, or an unknown name: raised before any work.
    ``problems``: one line each.

    >>> ConfigError(["algo.gamma must be in [0, 1], got 2.0"]).problems
    ['algo.gamma must be in [0, 1], got 2.0']
    """

    def __init__(self, problems):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("invalid config:\n  " + "\n  ".join(self.problems))


def _problems(node, schema, prefix: str):
    for f in fields(schema):
        name, value = f"{prefix}{f.name}", node[f.name]
        if _section(f):
            yield from _problems(value, f.default_factory, f"{name}.")
            continue
        meta = f.metadata
        if meta.get("choices") and value not in meta["choices"]:
            yield f"{name} must be one of {', '.join(meta['choices'])}, got {value!r}"
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
    one), every key whose value is out of its declared range or not one of its choices, and
    an algo that does not fit the env (ppo for single-agent
    envs, mappo or ippo for multi-agent ones). ``cfg``: a :class:`TrainConfig` DictConfig.

    >>> from omegaconf import OmegaConf
    >>> check_config(OmegaConf.structured(TrainConfig))  # the defaults are fine
    """
    problems = [unknown_key(k) for k in _extra_keys(cfg, TrainConfig, "")]  # +algo.learning_rate=...
    problems += _problems(cfg, TrainConfig, "")
    if cfg.env.name in ENV_NAMES and cfg.algo.name in ALGO_NAMES and \
            (cfg.env.name in MULTI_AGENT_ENVS) == (cfg.algo.name in SINGLE_AGENT_ALGOS):
        single = ", ".join(SINGLE_AGENT_ALGOS)
        multi = ", ".join(a for a in ALGO_NAMES if a not in SINGLE_AGENT_ALGOS)
        problems.append(f"algo={cfg.algo.name} does not fit env={cfg.env.name}: use {single} for single-agent envs, "
                        f"{multi} for multi-agent ones")
    problems += _mpe_problems(cfg.env)
    if problems:
        raise ConfigError(problems)


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


def _keys(schema=TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of ``schema``, its sections' included (``env``, ``env.name``, ...)."""
    keys = []
    for f in fields(schema):
        keys.append(prefix + f.name)
        if _section(f):
            keys += _keys(f.default_factory, f"{prefix}{f.name}.")
    return keys


def _is_known(key: str) -> bool:
    """Whether the dotted ``key`` is in the schemas; anything under ``env.params`` is (the env's)."""
    schema = TrainConfig
    for part in key.split("."):
        f = {f.name: f for f in fields(schema)}.get(part) if schema else None
        if f is None:
            return False
        if schema is EnvConfig and part == "params":
            return True
        schema = f.default_factory if _section(f) else None
    return True


def _extra_keys(node, schema, prefix: str):
    """The dotted keys of config ``node`` that ``schema`` lacks (Hydra's ``+key=value`` adds any)."""
    known = {f.name: f for f in fields(schema)}
    for k in node.keys():
        f = known.get(k)
        if f is None:
            yield f"{prefix}{k}"
        elif _section(f):
            yield from _extra_keys(node[k], f.default_factory, f"{prefix}{k}.")


def unknown_key(key: str) -> str:
    """The refusal of ``key``, which the schemas lack, naming the closest key they have: the
    same name in another section, another codebase's name for it (:data:`ALIASES`), or a near
    spelling.

    >>> unknown_key("algo.learning_rate")
    'algo.learning_rate is not a config key: did you mean algo.lr?'
    >>> unknown_key("num_envs")
    'num_envs is not a config key: did you mean env.num_envs?'
    >>> unknown_key("algo.gama")
    'algo.gama is not a config key: did you mean algo.gamma?'
    """
    known = _keys()
    section, _, name = key.rpartition(".")
    name = ALIASES.get(name, name)
    same_name = sorted((k for k in known if k.rpartition(".")[2] == name),
                       key=lambda k: k.rpartition(".")[0] != section)  # this section's first
    guess = same_name[:1] or difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if guess:
        return f"{key} is not a config key: did you mean {guess[0]}?"
    return f"{key} is not a config key (python -m torchrl_warp.recipes.train --cfg job prints them all)"


def _override_problems(overrides: list[str]) -> list[str]:
    """The refusal of each command-line override whose key the schemas lack, with or without
    ``+``; config group choices (``env=tag``) and Hydra's own keys (``hydra.run.dir``) pass."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    problems = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key.split(".")[0] == "hydra" or "/" in key or override.package is not None:
            continue
        if not _is_known(key):
            problems.append(unknown_key(key))
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


def settings_table() -> str:
    """Every config key with its default, its allowed values and its doc, as a Markdown table.

    >>> print(settings_table().splitlines()[2])
    | env.name | cartpole | cartpole, acrobot, mountain_car, mountain_car_continuous, pendulum, tag, tag_gridworld, mpe | the environment |
    """
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]

    def walk(schema, prefix):
        for f in fields(schema):
            if _section(f):
                walk(f.default_factory, f"{f.name}.")
                continue
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
            rows.append(f"| {prefix}{f.name} | {default} | {allowed} | {m['doc']} |")

    walk(TrainConfig, "")
    return "\n".join(rows)


def register() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
