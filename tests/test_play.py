"""Videos of trained agents: ``python -m torchrl_warp.recipes.play checkpoint=...`` and the
training recipe's ``video`` option (recipes/play.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="training runs on the CPU backend, not in the simulator")

# tests/test_recipes.py's tiny Tag (gridworld) + MAPPO run, 1 batch of 4 envs x 10 steps (its kernels
# compile in seconds on the CPU backend, Tag's in tens of seconds: tests/test_render.py draws Tag)
TINY_RUN = ["env=tag_gridworld", "algo=mappo", "env.num_envs=4", "env.steps_per_batch=10", "env.total_frames=40",
            "env.params.num_taggers=3", "env.params.grid_length=4", "env.params.episode_length=10",
            "algo.hidden=[16,16]", "algo.minibatch_size=20", "eval_envs=4"]


def read_video(path, **kwargs):
    import imageio.v3 as iio

    return iio.imread(path, index=None, **kwargs)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny run with ``video=true`` (on the CPU, where ``auto`` writes none)."""
    run = tmp_path_factory.mktemp("tiny_run")
    proc = subprocess.run([sys.executable, "-m", "torchrl_warp.recipes.train", f"hydra.run.dir={run}", "video=true",
                           *TINY_RUN], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def test_the_training_recipe_writes_video_gif_of_one_episode(tiny_run):
    import imageio.v3 as iio

    video = read_video(tiny_run / "video.gif")
    assert video.shape == (11, 400, 400, 3)   # the reset and 10 steps (episode_length) of env 0
    assert iio.immeta(tiny_run / "video.gif")["duration"] == 200   # 5 fps
    assert "video.gif: 11 frames" in (tiny_run / "train.log").read_text()


def test_play_writes_the_frames_asked_for(tiny_run, tmp_path):
    import imageio.v3 as iio

    from torchrl_warp.recipes.play import main

    out = tmp_path / "sub" / "play.gif"
    result = main([f"checkpoint={tiny_run / 'checkpoint.pt'}", f"out={out}", "steps=4", "env_index=1", "fps=10",
                   "resolution=64", "device=cpu", "actions=sample"])
    assert result == {"out": str(out), "frames": 5, "fps": 10.0, "size": [64, 64]}
    video = read_video(out)
    assert video.shape == (5, 64, 64, 3) and iio.immeta(out)["duration"] == 100
    assert (video != video[:1]).any()   # the agents move (identical frames would be merged into one)
    # the same steps of env 1 as an MP4 (imageio-ffmpeg, optional), padded to even sides
    pytest.importorskip("imageio_ffmpeg")
    mp4 = tmp_path / "play.mp4"
    main([f"checkpoint={tiny_run / 'checkpoint.pt'}", f"out={mp4}", "steps=2", "env_index=1", "resolution=63",
          "device=cpu", "actions=mode"])
    assert read_video(mp4, plugin="FFMPEG").shape == (3, 64, 64, 3)


def test_play_refuses_bad_arguments_and_checkpoints_clearly(tmp_path, monkeypatch):
    from torchrl_warp.recipes import play
    from torchrl_warp.recipes.play import PlayError, main, parse_args

    for argv, message in ((["steps=3"], "checkpoint=PATH is required"),
                          (["checkpoint=c.pt", "frames=3"], "unknown option 'frames'"),
                          (["checkpoint=c.pt", "steps=many"], "steps must be an int, got 'many'"),
                          (["checkpoint=c.pt", "c.pt"], "arguments are key=value")):
        with pytest.raises(PlayError, match=message):
            parse_args(argv)
    missing = tmp_path / "none.pt"
    for argv, message in (([f"checkpoint={missing}"], f"checkpoint={missing}: no such file"),
                          ([f"checkpoint={missing}", "out=x.avi"], "out must end with .gif or .mp4"),
                          ([f"checkpoint={missing}", "steps=-1"], "steps must be >= 0"),
                          ([f"checkpoint={missing}", "fps=0"], r"fps must be in \(0, 1000\]"),
                          ([f"checkpoint={missing}", "actions=greedy"], "actions must be one of auto, mode, sample")):
        with pytest.raises(PlayError, match=message):
            main(argv)
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"")
    with pytest.raises(PlayError, match=f"checkpoint={broken}: not a readable checkpoint"):
        main([f"checkpoint={broken}"])
    # MP4 without imageio-ffmpeg
    real = play.importlib.util.find_spec
    monkeypatch.setattr(play.importlib.util, "find_spec", lambda name: None if name == "imageio_ffmpeg" else real(name))
    with pytest.raises(PlayError, match=r"needs imageio-ffmpeg \(pip install imageio-ffmpeg\)"):
        play.write_video(str(tmp_path / "a.mp4"), [np.zeros((8, 8, 3), np.uint8)], 10)
    assert not (tmp_path / "a.mp4").exists()


def test_an_env_without_render_is_named(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from torchrl_warp.recipes import common
    from torchrl_warp.recipes.config import TrainConfig
    from torchrl_warp.recipes.play import PlayError, record

    monkeypatch.setattr(common, "make_env", lambda *args: SimpleNamespace(params=SimpleNamespace(max_steps=5)))
    with pytest.raises(PlayError, match="env=cartpole: SimpleNamespace has no render"):
        record(OmegaConf.structured(TrainConfig), {}, "cpu", str(tmp_path / "x.gif"))
    assert not (tmp_path / "x.gif").exists()


def test_the_cli_says_what_is_wrong():
    proc = subprocess.run([sys.executable, "-m", "torchrl_warp.recipes.play", "checkpoint=no/such/checkpoint.pt"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "play: error: checkpoint=no/such/checkpoint.pt: no such file" in proc.stderr


@pytest.mark.parametrize("value, ok", [("auto", True), ("true", True), ("false", True), ("yes", False),
                                       ("1", False)])
def test_the_video_option_is_checked_with_the_config(value, ok):
    from hydra import compose, initialize_config_dir

    from torchrl_warp.recipes import train
    from torchrl_warp.recipes.config import ConfigError, check_config

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(train.__file__), "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"video={value}"])
    if ok:
        check_config(cfg)
        assert cfg.video == {"auto": "auto", "true": True, "false": False}[value]
    else:
        got = repr(value) if value == "yes" else value   # "1": Hydra reads an int
        with pytest.raises(ConfigError, match=f"video must be auto, true or false, got {got}"):
            check_config(cfg)
