"""Dataclass schemas of the recipe configs, each value's allowed range declared next to it.

Hydra rejects unknown keys and wrong types; :func:`check_config` rejects values out of
range, unknown names and an algo that does not fit the env, before any work starts.

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

import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Callable, Optional

from hydra.core.config_store import ConfigStore

__all__ = ["EnvConfig", "AlgoConfig", "TrainConfig", "MatmulPrecision", "Interval", "setting",
           "ConfigError", "check_config", "check_scenario", "check_video", "mpe_scenarios", "settings_table",
           "register"]


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
MULTI_AGENT_ENVS = ("tag", "tag_gridworld", "mpe")       # envs with agent groups: mappo or ippo; the others: ppo
ALGO_NAMES = ("ppo", "mappo", "ippo")


def mpe_scenarios() -> tuple[str, ...]:
    """The MPE scenarios this installation has (``torchrl_warp.envs.<name>`` exists), in
    ``SCENARIO_NAMES``'s order: the names ``env.scenario`` takes with ``env=mpe``.

    >>> "simple_spread" in mpe_scenarios()
    True
    """
    import importlib.util

    from torchrl_warp.envs.mpe import SCENARIO_NAMES

    return tuple(n for n in SCENARIO_NAMES if importlib.util.find_spec(f"torchrl_warp.envs.{n}") is not None)


def check_scenario(name: str) -> Optional[str]:
    """The problem with an ``env.scenario`` value, or None: empty (envs other than mpe) or an
    MPE scenario this installation has.

    >>> check_scenario("simple_sprad")
    "must be one of ...simple_spread, ..., got 'simple_sprad'"
    """
    if name == "":
        return None
    from torchrl_warp.envs.mpe import SCENARIO_NAMES

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
    time_limit_s: float = setting(0.0, "stop collecting after this long (0: no limit)", "[0, inf)")
    profile_iteration: int = setting(0, "profile this iteration (collection + update) into profile.txt (0: off)",
                                     "[0, inf)")
    video: Any = setting("auto", "write video.gif of the trained agents at the end (auto: on CUDA only)",
                         check=check_video)


def _section(f) -> bool:
    """Whether dataclass field ``f`` is a nested section (``env``, ``algo``)."""
    return callable(f.default_factory) and is_dataclass(f.default_factory)


class ConfigError(ValueError):
    """A config value out of its range, or an unknown name: raised before any work."""


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
    """Raise :class:`ConfigError` naming every key whose value is out of its declared range
    or not one of its choices, and an algo that does not fit the env (ppo for single-agent
    envs, mappo or ippo for multi-agent ones). ``cfg``: a :class:`TrainConfig` DictConfig.

    >>> from omegaconf import OmegaConf
    >>> check_config(OmegaConf.structured(TrainConfig))  # the defaults are fine
    """
    problems = list(_problems(cfg, TrainConfig, ""))
    if cfg.env.name in ENV_NAMES and cfg.algo.name in ALGO_NAMES and \
            (cfg.env.name in MULTI_AGENT_ENVS) == (cfg.algo.name == "ppo"):
        problems.append(f"algo={cfg.algo.name} does not fit env={cfg.env.name}: use ppo for single-agent envs, "
                        f"mappo or ippo for multi-agent ones")
    problems += _mpe_problems(cfg.env)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


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
