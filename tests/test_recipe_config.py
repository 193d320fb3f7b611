"""The recipe's config is checked whole before any work: ranges, choices, algo vs env."""
import math
import os

import pytest
import torch
from omegaconf import OmegaConf

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="the recipe runs on the CPU backend, not in the simulator")


def compose(*overrides):
    """The recipe's config as ``python -m torchrl_warp.recipes.train <overrides>`` composes it."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from torchrl_warp.recipes import train

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(train.__file__), "conf"), version_base=None):
        return hydra_compose(config_name="config", overrides=list(overrides))


@pytest.fixture
def no_work(monkeypatch):
    """Fail if the recipe builds an env (the first piece of work of a run)."""
    from torchrl_warp.recipes import common, on_policy

    def make_env(*args, **kwargs):
        raise AssertionError("an env was built before the config was checked")

    monkeypatch.setattr(common, "make_env", make_env)
    monkeypatch.setattr(on_policy, "Collector", make_env)


BAD = [
    # (override, the message's start): every one named the key, before any env was built
    ("algo.epochs=0", "algo.epochs must be in [1, inf), got 0"),
    ("algo.epochs=-1", "algo.epochs must be in [1, inf), got -1"),
    ("algo.minibatch_size=0", "algo.minibatch_size must be in [1, inf), got 0"),
    ("checkpoint_every=0", "checkpoint_every must be in [1, inf), got 0"),
    ("env.steps_per_batch=0", "env.steps_per_batch must be in [1, inf), got 0"),
    ("env.num_envs=0", "env.num_envs must be in [1, inf), got 0"),
    ("eval_envs=0", "eval_envs must be in [1, inf), got 0"),
    ("env.total_frames=-5", "env.total_frames must be in [1, inf), got -5"),
    ("time_limit_s=-1", "time_limit_s must be in [0, inf), got -1.0"),
    ("time_limit_s=inf", "time_limit_s must be in [0, inf), got inf"),
    ("algo.gamma=2.0", "algo.gamma must be in [0, 1], got 2.0"),
    ("algo.lmbda=-0.1", "algo.lmbda must be in [0, 1], got -0.1"),
    ("algo.clip_epsilon=-0.2", "algo.clip_epsilon must be in (0, inf), got -0.2"),
    ("algo.clip_epsilon=0", "algo.clip_epsilon must be in (0, inf), got 0.0"),
    ("algo.lr=0", "algo.lr must be in (0, inf), got 0.0"),
    ("algo.lr=inf", "algo.lr must be in (0, inf), got inf"),
    ("algo.lr=nan", "algo.lr must be in (0, inf), got nan"),
    ("algo.max_grad_norm=0", "algo.max_grad_norm must be in (0, inf), got 0.0"),
    ("algo.entropy_coeff=-0.01", "algo.entropy_coeff must be in [0, inf), got -0.01"),
    ("algo.critic_coeff=nan", "algo.critic_coeff must be in [0, inf), got nan"),
    ("algo.reward_scale=-1", "algo.reward_scale must be in (0, inf), got -1.0"),
    ("algo.reward_scale=inf", "algo.reward_scale must be in (0, inf), got inf"),
    ("algo.hidden=[]", "algo.hidden must be a non-empty list of numbers in [1, inf), got []"),
    ("algo.hidden=[64,0]", "algo.hidden must be a non-empty list of numbers in [1, inf), got [64, 0]"),
    ("seed=-1", "seed must be in [0, inf), got -1"),
    ("profile_iteration=-1", "profile_iteration must be in [0, inf), got -1"),
    ("env.name=pong", "env.name must be one of cartpole, acrobot, mountain_car, mountain_car_continuous, pendulum, "
                      "tag, tag_gridworld, mpe, got 'pong'"),
    ("algo.name=a2c", "algo.name must be one of ppo, mappo, ippo, got 'a2c'"),
    ("logger=wandb", "logger must be one of csv, tensorboard, none, got 'wandb'"),
    ("device=gpu", "device must be one of auto, cpu, cuda, cuda:<index>, got 'gpu'"),
    ("device=cuda:x", "device must be one of auto, cpu, cuda, cuda:<index>, got 'cuda:x'"),
    ("algo=mappo", "algo=mappo does not fit env=cartpole"),
]


@pytest.mark.parametrize("override, message", BAD, ids=[o for o, _ in BAD])
def test_a_bad_value_is_refused_naming_its_key_before_any_work(tmp_path, no_work, override, message):
    from torchrl_warp.recipes.config import ConfigError
    from torchrl_warp.recipes.train import train

    cfg = compose("env.num_envs=4", "env.total_frames=64", override)  # the override last: it wins
    with pytest.raises(ConfigError) as raised:
        train(cfg, str(tmp_path))
    assert message in str(raised.value)
    assert os.listdir(tmp_path) == []  # no logs, no checkpoint


def test_every_problem_is_reported_at_once(no_work):
    from torchrl_warp.recipes.config import ConfigError, check_config

    with pytest.raises(ConfigError) as raised:
        check_config(compose("algo.gamma=2.0", "eval_envs=0", "logger=wandb"))
    assert [line.split()[0] for line in str(raised.value).splitlines()[1:]] == ["algo.gamma", "logger", "eval_envs"]


def test_cuda_without_a_cuda_device_is_refused_clearly(monkeypatch):
    from torchrl_warp.recipes.config import ConfigError, check_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=f"device is '{device}' but this machine has no usable CUDA device"):
            check_config(compose(f"device={device}"))
    check_config(compose("device=cpu"))
    check_config(compose("device=auto"))


def test_a_cuda_index_the_machine_lacks_is_refused(monkeypatch):
    from torchrl_warp.recipes.config import ConfigError, check_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_config(compose("device=cuda:1"))
    with pytest.raises(ConfigError, match="device is 'cuda:2' but this machine has 2 CUDA device"):
        check_config(compose("device=cuda:2"))


@pytest.mark.parametrize("overrides", [[], ["env=tag", "algo=mappo"], ["env=tag", "algo=ippo"], ["env=tag_gridworld", "algo=mappo"],
                                       ["env=mpe", "algo=mappo"], ["env=mpe", "algo=ippo"],
                                       ["time_limit_s=0", "profile_iteration=0", "algo.gamma=1", "algo.lmbda=0",
                                        "algo.entropy_coeff=0", "seed=0", "algo.hidden=[1]"]])
def test_the_shipped_configs_and_the_range_ends_pass(overrides):
    from torchrl_warp.recipes.config import check_config

    check_config(compose(*overrides))


def test_every_setting_has_a_doc_and_what_it_takes():
    """A key added without a range fails here: each takes a range, choices, a check, or is
    a bool / enum / the env's params / a path (checked where it is used)."""
    from dataclasses import fields

    from torchrl_warp.recipes.config import AlgoConfig, EnvConfig, TrainConfig, settings_table

    unchecked = {"params", "resume"}
    for schema in (EnvConfig, AlgoConfig, TrainConfig):
        for f in fields(schema):
            if f.name in ("env", "algo"):
                continue
            m = f.metadata
            assert m.get("doc"), f.name
            default = f.default_factory() if callable(f.default_factory) else f.default
            typed = isinstance(default, bool) or f.name == "matmul_precision" or f.name in unchecked
            assert typed or m["range"] or m["choices"] or m["check"], f"{f.name} has no declared range"
    table = settings_table()
    assert "| algo.gamma | 0.99 | [0, 1] |" in table and "| algo.hidden | [64, 64] | non-empty list" in table


def test_the_env_names_are_the_recipes_envs_and_their_kinds():
    from torchrl_warp.recipes.config import ENV_NAMES, MULTI_AGENT_ENVS
    from torchrl_warp.recipes.common import ENVS

    assert set(ENV_NAMES) == set(ENVS)
    params = {"tag": dict(num_taggers=2, num_runners=3, num_other_agents_observed=2),
              "mpe": dict(max_steps=25, terminated_truncated=True)}  # env/mpe.yaml's: kernels compiled once
    for name, cls in ENVS.items():
        env = cls(num_envs=2, seed=0, **params.get(name, {}))
        assert bool(env.layout.groups) == (name in MULTI_AGENT_ENVS), name


def test_intervals():
    from torchrl_warp.recipes.config import Interval

    unit, positive = Interval.parse("[0, 1]"), Interval.parse("(0, inf)")
    assert unit.contains(0) and unit.contains(1) and not unit.contains(1.0000001)
    assert positive.contains(1e300) and not positive.contains(0.0) and not positive.contains(math.inf)
    assert not any(i.contains(v) for i in (unit, positive) for v in (math.nan, True, "1", None))
    for text in ("[0, inf]", "[-inf, 0)", "(1, 0)", "0..1"):
        with pytest.raises(ValueError):
            Interval.parse(text)


def run_cli(tmp_path, *overrides):
    """``python -X importtime -m torchrl_warp.recipes.train hydra.run.dir=<tmp_path>/run <overrides>``:
    (the process, its wall seconds, its stderr without the import times, the modules it imported)."""
    import subprocess
    import sys
    import time

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "torchrl_warp.recipes.train",
                           f"hydra.run.dir={tmp_path / 'run'}", *overrides], capture_output=True, text=True,
                          timeout=300)
    seconds = time.perf_counter() - start
    lines = proc.stderr.splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    return proc, seconds, "\n".join(line for line in lines if not line.startswith("import time:")), imported


CLI_BAD = [
    # (overrides, stderr: all of it): Hydra's own "+" accepted an unknown key, which then did nothing
    (["+algo.learning_rate=1e-3"], "error: algo.learning_rate is not a config key: did you mean algo.lr?"),
    (["algo.learning_rate=1e-3"], "error: algo.learning_rate is not a config key: did you mean algo.lr?"),
    (["env=mpe", "algo=mappo", "++env.num_env=64"],
     "error: env.num_env is not a config key: did you mean env.num_envs?"),
    (["+num_envs=64"], "error: num_envs is not a config key: did you mean env.num_envs?"),
    (["algo.epochs=0", "eval_envs=0"],
     "error: algo.epochs must be in [1, inf), got 0\nerror: eval_envs must be in [1, inf), got 0"),
    (["env.num_envs=many"], "error: Error merging override env.num_envs=many: Value 'many' of type 'str' could not be "
                            "converted to Integer"),
    (["env=pong"], "error: In 'config': Could not find 'env/pong'; Available options in 'env': acrobot, cartpole, "
                   "mountain_car, mountain_car_continuous, mpe, pendulum, tag, tag_gridworld"),
]


@pytest.mark.parametrize("overrides, stderr", CLI_BAD, ids=[" ".join(o) for o, _ in CLI_BAD])
def test_a_config_error_is_one_line_before_torch_and_any_run_directory(tmp_path, overrides, stderr):
    proc, seconds, errors, imported = run_cli(tmp_path, *overrides)
    assert proc.returncode == 2, errors
    assert errors == stderr and proc.stdout == ""  # once, no traceback, no log line
    assert not (tmp_path / "run").exists()  # no run directory, no train.log
    assert "torch" not in imported and "numba" not in imported  # checked before the heavy imports
    assert seconds < 2.0, seconds


def test_an_unknown_env_param_is_refused_before_any_run_directory(tmp_path):
    """The env's own parameter declarations, read before Hydra makes the run directory (after the
    imports: the env's module loads torch), naming the closest parameter."""
    proc, _, errors, _ = run_cli(tmp_path, "env=tag", "algo=mappo", "+env.params.num_runner=3", "+env.params.seed=1")
    assert proc.returncode == 2, errors
    assert errors.splitlines() == [
        "error: env.params.seed is set by the recipe: use seed=...",
        "error: env.params: TagEnv got unknown parameter(s) 'num_runner' (did you mean 'num_runners'?); "
        "valid parameters: " + errors.split("valid parameters: ")[-1]]
    assert "num_runners" in errors.split("valid parameters: ")[-1].split(", ")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override", ["+algo.learning_rate=1e-3", "++algo.learning_rate=1e-3", "+learning_rate=1e-3",
                                      "+env.learning_rate=1e-3"])
def test_check_config_refuses_a_key_added_with_plus(no_work, tmp_path, override):
    """The composed config (train()'s, a --multirun job's) is checked for keys the schemas lack, too."""
    from torchrl_warp.recipes.config import ConfigError, check_config
    from torchrl_warp.recipes.train import train

    cfg = compose(override)
    with pytest.raises(ConfigError, match="learning_rate is not a config key: did you mean algo.lr"):
        check_config(cfg)
    with pytest.raises(ConfigError):
        train(cfg, str(tmp_path))
    check_config(compose("+env.params.anything=1"))  # the env's parameters: its constructor checks them


def test_the_command_line_check_leaves_hydra_flags_and_sweeps_to_hydra():
    from torchrl_warp.recipes.config import ConfigError, command_line_config

    assert command_line_config(["--help"]) is None and command_line_config(["--cfg", "job"]) is None
    assert command_line_config(["-m", "seed=0,1"]) is None  # a sweep's values: checked job by job
    with pytest.raises(ConfigError, match="algo.learning_rate is not a config key"):
        command_line_config(["-m", "+algo.learning_rate=1e-3,1e-4"])  # its keys: at once
    cfg = command_line_config(["env=tag", "algo=mappo", "hydra.run.dir=x", "+env.params.use_full_observation=true"])
    assert cfg.env.name == "tag" and cfg.env.params.use_full_observation is True


def test_an_unknown_key_names_the_closest_known_key():
    from torchrl_warp.recipes.config import unknown_key

    assert unknown_key("algo.learning_rate").endswith("did you mean algo.lr?")
    assert unknown_key("algo.ent_coef").endswith("did you mean algo.entropy_coeff?")
    assert unknown_key("algo.num_envs").endswith("did you mean env.num_envs?")
    assert unknown_key("env.num_env").endswith("did you mean env.num_envs?")
    assert unknown_key("time_limit").endswith("did you mean time_limit_s?")
    assert unknown_key("foo.bar") == "foo.bar is not a config key (python -m torchrl_warp.recipes.train --cfg job " \
                                     "prints them all)"


ENV_CONFIGS = sorted(f[:-5] for f in os.listdir(os.path.join(os.path.dirname(__file__), "..", "recipes", "conf", "env"))
                     if f.endswith(".yaml"))


@pytest.mark.parametrize("env", ENV_CONFIGS)
def test_each_env_config_trains_whole_batches(env):
    """Its total_frames is what the collector gathers: no rounding up, a progress bar that ends at 100%."""
    cfg = compose(f"env={env}")
    assert cfg.env.total_frames % (cfg.env.num_envs * cfg.env.steps_per_batch) == 0, (
        cfg.env.total_frames, cfg.env.num_envs, cfg.env.steps_per_batch)
