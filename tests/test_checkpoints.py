"""Checkpoints are data: tensors and plain containers, loaded with ``weights_only=True`` and
checked (file, entries, finiteness, fit to the config) before any env is built."""
import math
import os
import pickle
import random

import pytest
import torch

from conftest import SIM
from test_recipe_config import compose, no_work  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(SIM, reason="the recipe runs on the CPU backend, not in the simulator")

SMALL = ("env.num_envs=2", "env.total_frames=64", "algo.hidden=[8]")


def networks(cfg):
    """The recipe's CartPole networks and Adam for ``cfg``, on the CPU."""
    from torchrl_warp.envs import CartPoleEnv
    from torchrl_warp.recipes.on_policy import GroupAgent

    env = CartPoleEnv(num_envs=2, seed=0)
    dim = env.layout.observation_shape[-1]
    stats = (torch.zeros(dim), torch.ones(dim)) if cfg.algo.obs_norm else None
    agents = torch.nn.ModuleDict({"agent": GroupAgent(env, None, cfg.algo, torch.device("cpu"), stats)})
    return agents, torch.optim.Adam(agents.parameters(), lr=1e-3)


@pytest.fixture
def honest(tmp_path):
    """(cfg, path of a checkpoint the recipe wrote for it: 64 frames, 2 iterations, one Adam step)."""
    from torchrl_warp.recipes.checkpoint import save_checkpoint

    cfg = compose(*SMALL)
    agents, optimizer = networks(cfg)
    sum(p.square().sum() for p in agents.parameters()).backward()
    optimizer.step()
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(str(path), agents, optimizer, 64, 2, cfg)
    return cfg, path


def resume_fails(cfg, path, tmp_path):
    """The CheckpointError of ``train`` resuming from ``path``, checked to name the file and
    to come before any output."""
    from omegaconf import OmegaConf

    from torchrl_warp.recipes.checkpoint import CheckpointError
    from torchrl_warp.recipes.train import train

    out = tmp_path / "out"
    out.mkdir()
    OmegaConf.update(cfg, "resume", str(path))
    with pytest.raises(CheckpointError) as raised:
        train(cfg, str(out))
    assert str(path) in str(raised.value)
    assert os.listdir(out) == []
    return str(raised.value)


def test_an_honest_checkpoint_is_plain_data_and_restores(honest):
    from torchrl_warp.recipes.checkpoint import load_checkpoint, restore

    cfg, path = honest
    saved = torch.load(path, weights_only=True)

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, (str, int)) and plain(v) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return all(plain(v) for v in x)
        return x is None or isinstance(x, (str, int, float, bool, torch.Tensor))

    assert plain(saved) and saved["config"]["algo"]["matmul_precision"] == "high"
    assert not os.path.exists(f"{path}.tmp")
    agents, optimizer = networks(cfg)
    frames, iteration = restore(load_checkpoint(str(path), cfg), str(path), agents, optimizer)
    assert (frames, iteration) == (64, 2)
    for k, v in agents.state_dict().items():
        assert torch.equal(v, saved["agents"][k]), k
    assert [s["step"].item() for s in optimizer.state_dict()["state"].values()] == [1.0] * len(saved["optimizer"]["state"])


class Payload:
    """Pickles as a call to ``open(marker, "w")``: code that a pickle load would run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_checkpoint_carrying_code_is_refused_and_the_code_does_not_run(honest, tmp_path, no_work):  # noqa: F811
    cfg, path = honest
    ckpt = torch.load(path, weights_only=True)
    marker = tmp_path / "payload_ran"
    ckpt["config"]["note"] = Payload(str(marker))
    evil = tmp_path / "evil.pt"
    torch.save(ckpt, evil)
    message = resume_fails(cfg, evil, tmp_path)
    assert "refused" in message and "it refers to io.open" in message
    assert not marker.exists()
    torch.load(evil, weights_only=False)  # what the recipe used to do: the payload runs
    assert marker.exists()


def _edited(edit):
    """A bad file: the honest checkpoint with ``edit(ckpt)`` applied, saved with torch.save."""
    def write(path, honest_path):
        ckpt = torch.load(honest_path, weights_only=True)
        edit(ckpt)
        torch.save(ckpt, path)
    return write


def _bytes(make):
    def write(path, honest_path):
        path.write_bytes(make(honest_path.read_bytes()))
    return write


def _set(key, value):
    return _edited(lambda ckpt: ckpt.__setitem__(key, value))


def _first_tensor(ckpt, where, value):
    if where == "agents":
        t = next(v for v in ckpt["agents"].values() if v.is_floating_point())
    else:
        t = next(iter(ckpt["optimizer"]["state"].values()))["exp_avg"]
    t.view(-1)[0] = value


BAD_FILES = [
    ("empty", _bytes(lambda b: b""), "not a readable checkpoint"),
    ("truncated", _bytes(lambda b: b[: len(b) // 2]), "not a readable checkpoint"),
    ("random_bytes", _bytes(lambda b: random.Random(0).randbytes(4096)), "not a"),
    ("a_pickle", lambda p, h: p.write_bytes(pickle.dumps({"agents": {}, "frames": 3})), "refused"),
    ("a_foreign_dict", lambda p, h: torch.save({"model": torch.zeros(3)}, p),
     "not a checkpoint of this recipe: no 'format', 'agents', 'optimizer', 'frames', 'iteration', 'config' entry"),
    ("a_list", lambda p, h: torch.save([torch.zeros(3)], p), "holds a list"),
    ("a_directory", lambda p, h: p.mkdir(), "no such file"),
    *[(f"no_{k}", _edited(lambda ckpt, k=k: ckpt.pop(k)), f"no '{k}' entry")
      for k in ("format", "agents", "optimizer", "frames", "iteration", "config")],
    ("another_format", _set("format", 2), "format 2; this recipe reads format 1"),
    ("negative_frames", _set("frames", -1), "'frames' must be an int >= 0, got -1"),
    ("float_iteration", _set("iteration", 1.5), "'iteration' must be an int >= 0, got 1.5"),
    ("agents_not_tensors", _set("agents", {"w": [1.0]}), "'agents' must be a non-empty dict of tensors"),
    ("optimizer_not_a_state_dict", _set("optimizer", {"state": []}), "'optimizer' must be an optimizer's state_dict"),
    ("config_not_a_dict", _set("config", "cartpole"), "'config' must be a dict, got str"),
    ("config_without_env_params", _edited(lambda ckpt: ckpt["config"]["env"].pop("params")),
     "its config has no env.params"),
    ("nan_weight", _edited(lambda ckpt: _first_tensor(ckpt, "agents", math.nan)), "NaN or inf in agents['agent."),
    ("inf_adam_moment", _edited(lambda ckpt: _first_tensor(ckpt, "optimizer", math.inf)),
     "NaN or inf in optimizer state 0['exp_avg']"),
]


@pytest.mark.parametrize("write, problem", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_refused_naming_it_before_any_work(honest, tmp_path, no_work, write, problem):  # noqa: F811
    cfg, path = honest
    bad = tmp_path / "bad.pt"
    write(bad, path)
    assert problem in resume_fails(cfg, bad, tmp_path)


def test_a_missing_file_is_refused(tmp_path, no_work):  # noqa: F811
    assert "no such file" in resume_fails(compose(*SMALL), tmp_path / "nothing.pt", tmp_path)


def _config_of(*overrides):
    from torchrl_warp.recipes.checkpoint import plain_config

    return _edited(lambda ckpt: ckpt.__setitem__("config", plain_config(compose(*SMALL, *overrides))))


TAG = ("env=tag", "algo=mappo")
MISFITS = [
    # (the checkpoint's config, this run's overrides, the problem)
    ("another_env", (), TAG, "env.name differs: the checkpoint's is 'cartpole', this config's 'tag'"),
    ("a_changed_env_param", (), ("+env.params.max_steps=100",),
     "env.params differs: the checkpoint's is {}, this config's {'max_steps': 100}"),
    ("other_agent_numbers", (*TAG, "env.params.num_runners=4"), TAG, "env.params differs"),
    ("another_algo", ("env=tag", "algo=ippo"), TAG, "algo.name differs: the checkpoint's is 'ippo'"),
    ("other_layers", (), ("algo.hidden=[16]",), "algo.hidden differs: the checkpoint's is [8], this config's [16]"),
    ("no_obs_norm", (), ("algo.obs_norm=false",), "algo.obs_norm differs"),
]


@pytest.mark.parametrize("theirs, ours, problem", [m[1:] for m in MISFITS], ids=[m[0] for m in MISFITS])
def test_a_checkpoint_of_another_env_or_network_is_refused_before_any_work(honest, tmp_path, no_work,  # noqa: F811
                                                                           theirs, ours, problem):
    _, path = honest
    bad = tmp_path / "other.pt"
    _config_of(*theirs)(bad, path)
    assert problem in resume_fails(compose(*SMALL, *ours), bad, tmp_path)


def test_the_run_settings_may_change_on_resume(honest):
    from torchrl_warp.recipes.checkpoint import load_checkpoint

    _, path = honest
    cfg = compose(*SMALL, "env.num_envs=8", "env.total_frames=1000", "seed=3", "algo.lr=0.01", "eval_envs=2")
    assert load_checkpoint(str(path), cfg)["frames"] == 64


def test_env_params_compare_as_the_env_resolves_them(honest):
    """A parameter written out at its default is the same env as one left out."""
    from torchrl_warp.envs import CartPoleEnv
    from torchrl_warp.recipes.checkpoint import CheckpointError, load_checkpoint

    _, path = honest
    cfg = compose(*SMALL, f"+env.params.max_steps={CartPoleEnv.defaults['max_steps']}")
    assert load_checkpoint(str(path), cfg, CartPoleEnv.defaults)["frames"] == 64
    with pytest.raises(CheckpointError, match="env.params differs"):
        load_checkpoint(str(path), compose(*SMALL, "+env.params.max_steps=7"), CartPoleEnv.defaults)


def test_networks_that_do_not_fit_are_refused_when_restored(honest):
    """The backstop behind the config comparison: a checkpoint whose config fits but whose
    tensors do not."""
    from torchrl_warp.recipes.checkpoint import CheckpointError, load_checkpoint, restore

    cfg, path = honest
    ckpt = load_checkpoint(str(path), cfg)
    wider, optimizer = networks(compose(*SMALL[:-1], "algo.hidden=[16]"))
    with pytest.raises(CheckpointError, match="networks do not fit this config's"):
        restore(ckpt, str(path), wider, optimizer)
    agents, _ = networks(cfg)
    fewer = torch.optim.Adam(list(agents.parameters())[:-1])
    with pytest.raises(CheckpointError, match="optimizer state is for"):
        restore(ckpt, str(path), agents, fewer)
