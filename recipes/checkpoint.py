"""Checkpoints of the training recipe: tensors and plain data only, checked before any work.

A checkpoint is one dict, written with ``torch.save`` and read with
``torch.load(weights_only=True)`` (so loading one runs no code from the file)::

    {"format": 1,
     "agents": {name: tensor},                           # the networks' state_dict
     "optimizer": {"state": {...}, "param_groups": [...]},  # Adam's state_dict
     "frames": int, "iteration": int,
     "config": {...},                                    # the run's config as plain data
     "family": {...}}                                    # optional: a family's own state (replay: the buffer)

:func:`load_checkpoint` refuses, naming the file and the problem, a file that is not
such a dict (empty, truncated, foreign, or holding other objects), one with a missing
or mistyped entry or a NaN/inf tensor, and one whose networks would not fit the config
(``env.name``, ``env.params``, ``algo.name``, ``algo.hidden``, ``algo.obs_norm`` differ, for MPE
``env.scenario``, and for the off-policy families ``algo.share_params`` and QMIX's
``algo.mixing_embed_dim``).

Example:
    >>> import tempfile
    >>> from omegaconf import OmegaConf
    >>> from torchrl_warp.recipes.config import TrainConfig
    >>> path = os.path.join(tempfile.mkdtemp(), "checkpoint.pt")
    >>> open(path, "wb").close()
    >>> load_checkpoint(path, OmegaConf.structured(TrainConfig))
    Traceback (most recent call last):
    ...
    torchrl_warp.recipes.checkpoint.CheckpointError: resume=...checkpoint.pt: not a readable checkpoint ...
"""
from __future__ import annotations

import os
import pickle
import re

import torch
from omegaconf import OmegaConf

__all__ = ["FORMAT", "MUST_MATCH", "MUST_MATCH_MPE", "MUST_MATCH_FAMILY", "CheckpointError", "plain_config", "save_checkpoint",
           "load_checkpoint", "restore"]

FORMAT = 1
KEYS = ("format", "agents", "optimizer", "frames", "iteration", "config")
# config keys that shape the networks or the env's observations: a resumed run must have the checkpoint's
MUST_MATCH = ("env.name", "env.params", "algo.name", "algo.hidden", "algo.obs_norm")
# and for MPE (both configs env=mpe; checkpoints of the other envs may predate the key)
MUST_MATCH_MPE = ("env.scenario",)
# and where this config's algo family has them (algo.name matches, so the checkpoint's family is this one's)
MUST_MATCH_FAMILY = ("algo.share_params", "algo.mixing_embed_dim")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and the problem."""


def plain_config(cfg) -> dict:
    """``cfg`` as plain data (dicts, lists, str, int, float, bool, None; enums as their values).

    >>> from omegaconf import OmegaConf
    >>> from torchrl_warp.recipes.config import TrainConfig
    >>> plain_config(OmegaConf.structured(TrainConfig))["algo"]["matmul_precision"]
    'high'
    """
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def save_checkpoint(path: str, agents, optimizer, frames: int, iteration: int, cfg, family: dict | None = None) -> None:
    """Write a checkpoint to ``path``, through a temporary file: a run killed while saving
    leaves the previous checkpoint whole. ``family``: the family's own state (tensors and
    plain data: recipes/replay.py's buffer and gradient step count)."""
    ckpt = {"format": FORMAT, "agents": agents.state_dict(), "optimizer": optimizer.state_dict(),
            "frames": int(frames), "iteration": int(iteration), "config": plain_config(cfg)}
    if family is not None:
        ckpt["family"] = family
    tmp = f"{path}.tmp"
    torch.save(ckpt, tmp)
    os.replace(tmp, path)


def _dotted(tree: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            raise KeyError(dotted)
        tree = tree[part]
    return tree


def _unreadable_reason(error: Exception) -> str:
    """What ``torch.load``'s error says went wrong, without its advice.

    >>> _unreadable_reason(RuntimeError("Weights only load failed ... Unsupported global: GLOBAL posix.system was"))
    'it refers to posix.system'
    """
    text = str(error)
    if m := re.search(r"GLOBAL (\S+)", text):
        return f"it refers to {m[1]}"
    if m := re.search(r"Unsupported operand \S+", text):
        return m[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0].split(". ")[0] if lines else "end of file"
    return f"{type(error).__name__}: {first}"


def _problems(ckpt) -> list[str]:
    if not isinstance(ckpt, dict):
        return [f"holds a {type(ckpt).__name__}, not a checkpoint's dict"]
    missing = [k for k in KEYS if k not in ckpt]
    if missing:
        return [f"not a checkpoint of this recipe: no {', '.join(map(repr, missing))} entry"]
    problems = []
    if ckpt["format"] != FORMAT:
        problems.append(f"format {ckpt['format']!r}; this recipe reads format {FORMAT}")
    for k in ("frames", "iteration"):
        if isinstance(ckpt[k], bool) or not isinstance(ckpt[k], int) or ckpt[k] < 0:
            problems.append(f"{k!r} must be an int >= 0, got {ckpt[k]!r}")
    agents, opt = ckpt["agents"], ckpt["optimizer"]
    if not isinstance(agents, dict) or not agents or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in agents.items()):
        problems.append("'agents' must be a non-empty dict of tensors by name")
        agents = {}
    if not (isinstance(opt, dict) and isinstance(opt.get("state"), dict) and isinstance(opt.get("param_groups"), list)
            and all(isinstance(s, dict) for s in opt["state"].values())
            and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in opt["param_groups"])):
        problems.append("'optimizer' must be an optimizer's state_dict ({'state': {...}, 'param_groups': [...]})")
        opt = {"state": {}}
    tensors = [(f"agents[{k!r}]", v) for k, v in agents.items()]
    tensors += [(f"optimizer state {i!r}[{k!r}]", v) for i, s in opt["state"].items() for k, v in s.items()
                if isinstance(v, torch.Tensor)]
    bad = [name for name, t in tensors if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        problems.append(f"NaN or inf in {', '.join(bad[:3])}{' and more' if len(bad) > 3 else ''}")
    if not isinstance(ckpt.get("family", {}), dict):
        problems.append(f"'family' must be a dict, got {type(ckpt['family']).__name__}")
    if not isinstance(ckpt["config"], dict):
        problems.append(f"'config' must be a dict, got {type(ckpt['config']).__name__}")
    return problems


def load_checkpoint(path: str, cfg, env_defaults: dict | None = None) -> dict:
    """The checkpoint at ``path``, checked to be one this recipe wrote and one that fits
    ``cfg``; otherwise :class:`CheckpointError` naming ``path`` and the problem. Tensors
    are loaded on the CPU (:func:`restore` copies them to the networks' device).
    ``env_defaults`` (the env's parameter defaults) makes ``env.params`` compare as the env
    resolves them: a parameter given at its default equals one left out.

    >>> ckpt = load_checkpoint("outputs/2024-01-01/12-00-00/checkpoint.pt", cfg)  # doctest: +SKIP
    """
    where = f"resume={path}"
    if not os.path.isfile(path):
        raise CheckpointError(f"{where}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{where}: refused: not a checkpoint of tensors and plain data ({_unreadable_reason(e)}); "
                              f"a file holding other objects could run code when loaded") from None
    except Exception as e:  # empty, truncated, not a torch.save file
        raise CheckpointError(f"{where}: not a readable checkpoint (empty, truncated or not written by torch.save: "
                              f"{_unreadable_reason(e)})") from None
    problems = _problems(ckpt)
    if not problems:
        ours = plain_config(cfg)
        both_mpe = ours["env"].get("name") == "mpe" and isinstance(ckpt["config"].get("env"), dict) \
            and ckpt["config"]["env"].get("name") == "mpe"
        family = tuple(k for k in MUST_MATCH_FAMILY if k.split(".")[1] in ours["algo"])
        for k in MUST_MATCH + (MUST_MATCH_MPE if both_mpe else ()) + family:
            try:
                theirs = _dotted(ckpt["config"], k)
            except KeyError:
                problems.append(f"its config has no {k}")
                continue
            mine = _dotted(ours, k)
            if k == "env.params" and env_defaults is not None and isinstance(theirs, dict):
                same = {**env_defaults, **theirs} == {**env_defaults, **mine}
            else:
                same = theirs == mine
            if not same:
                problems.append(f"{k} differs: the checkpoint's is {theirs!r}, this config's {mine!r}")
    if problems:
        raise CheckpointError(f"{where}: " + "; ".join(problems))
    return ckpt


def restore(ckpt: dict, path: str, agents, optimizer) -> tuple[int, int]:
    """Load a checked checkpoint into ``agents`` and ``optimizer``; returns (frames, iteration).

    Adam's moments and step counts come from the checkpoint; its options (fused, capturable,
    the lr a tensor or a float) stay ``optimizer``'s: they follow the device and
    ``algo.cudagraph_update``. Networks of other shapes raise :class:`CheckpointError`.
    """
    where = f"resume={path}"
    try:
        agents.load_state_dict(ckpt["agents"])
    except RuntimeError as e:
        raise CheckpointError(f"{where}: its networks do not fit this config's: {e}") from None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved = [i for group in ckpt["optimizer"]["param_groups"] for i in group["params"]]
    shapes_fit = len(saved) == len(params) and all(
        not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape == params[saved.index(i)].shape
        for i, s in ckpt["optimizer"]["state"].items() if i in saved for t in s.values())
    if not shapes_fit or not set(ckpt["optimizer"]["state"]) <= set(saved):
        raise CheckpointError(f"{where}: its optimizer state is for {len(saved)} parameters of other shapes; "
                              f"this run's networks have {len(params)}")
    optimizer.load_state_dict({"state": ckpt["optimizer"]["state"],
                               "param_groups": optimizer.state_dict()["param_groups"]})
    return ckpt["frames"], ckpt["iteration"]
