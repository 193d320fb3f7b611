"""Dataclass schemas of the recipe configs: Hydra rejects unknown keys and wrong types.

Examples:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.structured(TrainConfig)
    >>> cfg.algo.lr
    0.0003
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

__all__ = ["EnvConfig", "AlgoConfig", "TrainConfig", "MatmulPrecision", "register"]


class MatmulPrecision(Enum):
    """``torch.set_float32_matmul_precision``'s values (torch only warns on any other)."""
    highest = "highest"
    high = "high"                       # TF32 on GPUs that have it
    medium = "medium"


@dataclass
class EnvConfig:
    name: str = "cartpole"              # tag | cartpole
    num_envs: int = 512
    steps_per_batch: int = 32           # a batch is num_envs x steps_per_batch frames
    total_frames: int = 1_000_000
    params: dict[str, Any] = field(default_factory=dict)  # the env's parameters
    cudagraph_policy: bool = False      # the collector replays the policy as a CUDA graph (CUDA only)


@dataclass
class AlgoConfig:
    name: str = "ppo"                   # ppo | mappo | ippo
    lr: float = 3e-4
    gamma: float = 0.99
    lmbda: float = 0.95
    clip_epsilon: float = 0.2
    entropy_coeff: float = 0.0
    critic_coeff: float = 0.5
    reward_scale: float = 1.0           # rewards x this for GAE and the critic (values near 1 learn in fewer steps)
    epochs: int = 4
    minibatch_size: int = 4096
    max_grad_norm: float = 1.0
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    amp: bool = False                   # bfloat16 autocast for the loss forward passes (CUDA)
    obs_norm: bool = False              # standardize observations in the networks (stats of a random rollout)
    anneal_lr: bool = False             # lr falls linearly to 0 at env.total_frames
    matmul_precision: MatmulPrecision = MatmulPrecision.high  # torch.set_float32_matmul_precision
    cudagraph_update: bool = False      # each gradient step replayed as one CUDA graph (CUDA only)


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    device: str = "auto"
    seed: int = 0
    logger: str = "csv"                 # csv | tensorboard | none
    checkpoint_every: int = 10          # iterations
    resume: Optional[str] = None
    eval_envs: int = 256
    time_limit_s: float = 0.0           # stop collecting after this long (0: no limit)
    profile_iteration: int = 0          # profile this iteration (collection + update) into profile.txt (0: off)


def register() -> None:
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
