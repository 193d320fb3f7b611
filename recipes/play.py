"""Play a trained checkpoint and write a GIF (or an MP4) of one env.

    python -m torchrl_warp.recipes.play checkpoint=outputs/<date>/<time>/checkpoint.pt
    python -m torchrl_warp.recipes.play checkpoint=PATH out=tag.gif steps=100 env_index=0 fps=20
    python -m torchrl_warp.recipes.play checkpoint=PATH out=cartpole.mp4   # needs imageio-ffmpeg

The checkpoint holds the run's config (recipes/checkpoint.py): the same env (with
``env_index + 1`` envs, at least 2) and the same networks are built from it, the
networks loaded, and the trained policy plays ``steps`` steps (one episode by default);
env ``env_index`` is drawn (its ``render(mode="rgb_array")``) after the reset and after
every step, ``steps + 1`` frames. The training recipe writes ``video.gif`` the same way
at the end of a run (``video`` in recipes/conf/config.yaml).

Options (``key=value``): ``checkpoint`` (required), ``out`` (``.gif`` or ``.mp4``;
default ``play.gif`` beside the checkpoint), ``steps``, ``env_index``, ``fps``,
``resolution`` (the frame's width; each env has its own default), ``device`` (``auto``,
``cpu``, ``cuda``...), ``seed`` (default: the evaluation's, the run's seed + 10000) and
``actions``: ``auto`` (as the recipe's evaluation: the Tags sample, as trained, the
other envs take the most likely action), ``mode`` (the most likely action) or
``sample``.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import torch
from omegaconf import OmegaConf

__all__ = ["PlayError", "FPS", "parse_args", "load_policy", "record", "write_video", "main"]

#: frames per second of a video by env (``fps=`` overrides): gymnasium's ``render_fps``
#: for the classic-control envs
FPS = {"cartpole": 50, "acrobot": 15, "mountain_car": 30, "mountain_car_continuous": 30, "pendulum": 30,
       "tag": 20, "tag_gridworld": 5, "mpe": 10}
#: the command's options and their types
OPTIONS = {"checkpoint": str, "out": str, "steps": int, "env_index": int, "fps": float, "resolution": int,
           "device": str, "seed": int, "actions": str}
ACTIONS = ("auto", "mode", "sample")
VIDEO_FORMATS = (".gif", ".mp4")


class PlayError(ValueError):
    """A play command that cannot run: the message says which option and why."""


def parse_args(argv: list[str]) -> dict:
    """``key=value`` arguments as a dict of typed options (``+key=value`` is taken too, as Hydra
    writes it); an unknown key, a bad value or a missing ``checkpoint`` raise :class:`PlayError`.

    >>> parse_args(["checkpoint=run/checkpoint.pt", "steps=50", "fps=12.5"])
    {'checkpoint': 'run/checkpoint.pt', 'steps': 50, 'fps': 12.5}
    >>> parse_args(["checkpoint=c.pt", "step=5"])
    Traceback (most recent call last):
    ...
    torchrl_warp.recipes.play.PlayError: unknown option 'step'; options: checkpoint, out, steps, ...
    """
    options = {}
    for arg in argv:
        name, sep, value = arg.lstrip("+").partition("=")
        if not sep:
            raise PlayError(f"arguments are key=value, got {arg!r} (options: {', '.join(OPTIONS)})")
        if name not in OPTIONS:
            raise PlayError(f"unknown option {name!r}; options: {', '.join(OPTIONS)}")
        try:
            options[name] = OPTIONS[name](value)
        except ValueError:
            raise PlayError(f"{name} must be {'an int' if OPTIONS[name] is int else 'a number'}, "
                            f"got {value!r}") from None
    if "checkpoint" not in options:
        raise PlayError("checkpoint=PATH is required: the checkpoint.pt of a training run")
    return options


def _check_options(options: dict) -> None:
    for name, low in (("steps", 0), ("env_index", 0), ("seed", 0), ("fps", None)):
        value = options.get(name)
        if value is None:
            continue
        if name == "fps" and not (np.isfinite(value) and 0 < value <= 1000):
            raise PlayError(f"fps must be in (0, 1000], got {value!r}")
        if low is not None and value < low:
            raise PlayError(f"{name} must be >= {low}, got {value!r}")
    if options.get("actions", "auto") not in ACTIONS:
        raise PlayError(f"actions must be one of {', '.join(ACTIONS)}, got {options['actions']!r}")
    out = options.get("out")
    if out is not None and os.path.splitext(out)[1].lower() not in VIDEO_FORMATS:
        raise PlayError(f"out must end with {' or '.join(VIDEO_FORMATS)}, got {out!r}")


def _checkpoint_error(error, path: str) -> PlayError:
    """The checkpoint module's error (``resume=PATH: ...``), as this command's option."""
    return PlayError(str(error).replace(f"resume={path}", f"checkpoint={path}", 1))


def build_agents(cfg, env, device) -> torch.nn.ModuleDict:
    """The networks ``train()`` builds for ``cfg`` and ``env`` (its algorithm family's
    ``build_agents``), with placeholder observation statistics: the checkpoint's replace them."""
    from torchrl_warp.recipes.train import family

    groups = list(env.layout.groups) if env.layout.groups else [None]

    def stats(group):
        dim = env.layout.observation_shape_of(group)[-1]
        return torch.zeros(dim, device=device), torch.ones(dim, device=device)

    obs_stats = {g: stats(g) for g in groups} if cfg.algo.obs_norm else None
    return family(cfg.algo.name).build_agents(cfg, env, groups, device, obs_stats)


def load_policy(path: str, device) -> tuple:
    """``(cfg, agents_by_group)`` of the checkpoint at ``path``: the run's config (as
    :func:`~torchrl_warp.recipes.config.train_schema`) and its trained networks on ``device``.
    :class:`PlayError` naming the file when it is missing or not a checkpoint of the recipe."""
    from torchrl_warp.recipes.checkpoint import CheckpointError, load_checkpoint, restore
    from torchrl_warp.recipes.config import train_schema
    from torchrl_warp.recipes.common import env_defaults, make_env

    if not os.path.isfile(path):
        raise PlayError(f"checkpoint={path}: no such file")
    try:  # the run's config, to check the checkpoint against (a broken file: load_checkpoint says why)
        saved = torch.load(path, map_location="cpu", weights_only=True)["config"]
    except Exception:
        saved = None
    algo = saved.get("algo") if isinstance(saved, dict) else None
    cfg = train_schema(algo.get("name", "ppo") if isinstance(algo, dict) else "ppo")  # its family's schema
    if isinstance(saved, dict):
        try:
            cfg = OmegaConf.merge(cfg, saved)
        except Exception as e:
            raise PlayError(f"checkpoint={path}: its config does not fit this recipe's: {e}") from None
    try:
        ckpt = load_checkpoint(path, cfg, env_defaults(cfg))
    except CheckpointError as e:
        raise _checkpoint_error(e, path) from None
    env = make_env(cfg, device, 1, cfg.seed)
    agents = build_agents(cfg, env, device)
    try:
        restore(ckpt, path, agents, torch.optim.Adam(agents.parameters()))
    except CheckpointError as e:
        raise _checkpoint_error(e, path) from None
    agents.eval()
    groups = list(env.layout.groups) if env.layout.groups else [None]
    return cfg, {g: agents[g or "agent"] for g in groups}


def write_video(path: str, frames: list, fps: float) -> None:
    """Write ``frames`` (uint8 ``[H, W, 3]`` each) to ``path``: a looping GIF (imageio with
    pillow; identical consecutive frames are merged into one shown longer) or, for ``.mp4``,
    H.264 (imageio-ffmpeg, optional: :class:`PlayError` when it is missing; frames padded to
    even sides, which H.264 needs)."""
    import imageio.v3 as iio

    ext = os.path.splitext(path)[1].lower()
    if ext not in VIDEO_FORMATS:
        raise PlayError(f"out must end with {' or '.join(VIDEO_FORMATS)}, got {path!r}")
    if ext == ".mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise PlayError(f"out={path}: writing .mp4 needs imageio-ffmpeg (pip install imageio-ffmpeg), "
                        f"or write a .gif")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    video = np.stack(frames)
    if ext == ".gif":
        iio.imwrite(path, video, extension=".gif", duration=1000.0 / fps, loop=0)
    else:
        pad = [(0, 0), (0, video.shape[1] % 2), (0, video.shape[2] % 2), (0, 0)]
        video = np.pad(video, pad, mode="edge")
        iio.imwrite(path, video, extension=".mp4", plugin="FFMPEG", fps=fps, codec="libx264",
                    macro_block_size=1, ffmpeg_log_level="error")


@torch.no_grad()
def record(cfg, agents, device, out: str, steps: int | None = None, env_index: int = 0, fps: float | None = None,
           resolution: int | None = None, seed: int | None = None, actions: str = "auto") -> dict:
    """Play ``agents`` (``{group: GroupAgent}``) on a fresh env of ``cfg`` (``env_index + 1``
    envs, at least 2; seeded ``seed``, by default the evaluation's) for ``steps`` steps (default: one
    episode, ``episode_length`` or ``max_steps``), drawing env ``env_index`` after the reset
    and each step, and write the frames to ``out`` (:func:`write_video`). Returns
    ``{"out", "frames", "fps", "size"}``."""
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from tensordict.nn import TensorDictSequential

    from torchrl_warp.recipes.common import make_env

    _check_options({"steps": steps, "env_index": env_index, "fps": fps, "seed": seed, "actions": actions,
                    "out": out})
    seed = cfg.seed + 10_000 if seed is None else seed
    # at least 2 envs: with 1, Numba types some arrays differently and compiles the kernels again
    env = make_env(cfg, device, max(env_index + 1, 2), seed)
    if not callable(getattr(env, "render", None)):
        raise PlayError(f"env={cfg.env.name}: {type(env).__name__} has no render(mode='rgb_array') to draw it with")
    if steps is None:
        steps = env.params.episode_length if cfg.env.name in ("tag", "tag_gridworld") else env.params.max_steps
    fps = FPS.get(cfg.env.name, 20) if fps is None else fps
    if actions == "auto":  # as evaluate(): a greedy Tag policy is another (worse) strategy than the one trained
        actions = "sample" if cfg.env.name in ("tag", "tag_gridworld") else "mode"
    size = {} if resolution is None else {"resolution": resolution}
    policy = TensorDictSequential(*[agent.actor for agent in agents.values()])
    torch.manual_seed(seed)
    mode = ExplorationType.DETERMINISTIC if actions == "mode" else ExplorationType.RANDOM
    with set_exploration_type(mode):
        td = env.reset()
        frames = [env.render(mode="rgb_array", env_index=env_index, **size)]
        for _ in range(steps):
            td = env.step(policy(td))
            frames.append(env.render(mode="rgb_array", env_index=env_index, **size))
            td = env.maybe_reset(td["next"])  # the envs that are done start their next episode
    write_video(out, frames, fps)
    return {"out": out, "frames": len(frames), "fps": fps, "size": list(frames[0].shape[:2])}


def main(argv: list[str] | None = None) -> dict:
    """The command: parse ``argv`` (default ``sys.argv[1:]``), load the checkpoint, record.
    Returns :func:`record`'s dict; :class:`PlayError` for a bad option or checkpoint."""
    from torchrl_warp.recipes.common import pick_device

    options = parse_args(sys.argv[1:] if argv is None else argv)
    _check_options(options)
    path = options.pop("checkpoint")
    device = options.pop("device", "auto")
    try:
        device = pick_device(device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("this machine has no usable CUDA device")
    except RuntimeError as e:
        raise PlayError(f"device={device}: {e}") from None
    cfg, agents = load_policy(path, device)
    out = options.pop("out", os.path.join(os.path.dirname(os.path.abspath(path)), "play.gif"))
    return record(cfg, agents, device, out, **options)


if __name__ == "__main__":
    import logging

    logging.getLogger("numba").setLevel(logging.WARNING)
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    try:
        result = main()
    except PlayError as error:
        print(f"play: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {result['out']}: {result['frames']} frames of {result['size'][1]} x {result['size'][0]} "
          f"at {result['fps']:g} fps")
