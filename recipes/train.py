"""Train a torchrl-warp environment: the Hydra app over the recipe families.

    python -m torchrl_warp.recipes.train                          # CartPole + PPO (CPU or GPU)
    python -m torchrl_warp.recipes.train env=tag algo=mappo       # Tag: taggers vs runners
    python -m torchrl_warp.recipes.train env=tag algo=ippo device=cuda env.num_envs=1024
    python -m torchrl_warp.recipes.train env=mpe algo=mappo       # MPE simple_spread (env.scenario=...)

Each family is one module that reads top to bottom: recipes/on_policy.py (PPO, MAPPO, IPPO),
over what they share (recipes/common.py: envs, evaluation, checkpoints, the run's summary).
Everything is TorchRL: its collectors, losses, modules and loggers. Written to Hydra's run
directory: ``train/scalars/*.csv`` (or TensorBoard events), ``checkpoint.pt`` (models and
optimizer; ``resume=<path>`` continues from it), ``learning_curve.png``, ``summary.json`` and,
with ``video`` (on CUDA by default), ``video.gif`` of the trained agents (recipes/play.py).

The config (every key and value's range: recipes/config.py) is checked before torch loads and
Hydra makes a run directory (a config error: ``error: ...`` lines, exit status 2), and with the
checkpoint to resume from (recipes/checkpoint.py) again before any env is built.
"""
from __future__ import annotations

import importlib
import logging
import sys

log = logging.getLogger("torchrl_warp.recipes.train")
if __name__ == "__main__":  # the command line's config, checked before torch, TorchRL and Numba load (seconds)
    from torchrl_warp.recipes.config import command_line_config, exit_on_config_error

    _COMMAND_LINE_CONFIG = exit_on_config_error(command_line_config, sys.argv[1:])

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from torchrl_warp.recipes.common import ENVS, to_the_run_log  # noqa: E402
from torchrl_warp.recipes.config import FAMILIES, check_config, check_env_params, exit_on_config_error, register  # noqa: E402
from torchrl_warp.recipes.distributed import Ranks  # noqa: E402

register()


def family(algo: str):
    """The module that trains ``algo`` (``algo.name``): its ``train``, ``build_agents``, ...

    >>> family("mappo").__name__
    'torchrl_warp.recipes.on_policy'
    """
    return importlib.import_module(f"torchrl_warp.recipes.{FAMILIES[algo]}")


def train(cfg: DictConfig, out_dir: str) -> dict:
    """Train ``cfg.algo.name`` on ``cfg`` into ``out_dir`` with its family's ``train``; returns
    the run's summary (``summary.json``). The config is checked first (an unknown ``algo.name``
    lists the known ones)."""
    check_config(cfg)
    return family(cfg.algo.name).train(cfg, out_dir)


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
