"""The example environment of docs/writing_an_env.md runs as written.

The first ```python block of that page is written to a temporary file and imported;
importing it runs the example's own checks (``check_env_specs``, a rollout, and
asserts on the values). Kept tiny, so it also runs under the CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1 pytest -m sim``).
"""
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from torchrl_warp import WarpEnv

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing_an_env.md"
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
MODULE_NAME = "torchrl_warp_docs_example"


def first_python_block(text: str) -> str:
    match = re.search(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.DOTALL | re.MULTILINE)
    assert match, f"{DOC} has no ```python block"
    return match.group(1)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The doc's example, imported as a module (which runs it)."""
    path = tmp_path_factory.mktemp("docs") / "walkers_example.py"
    path.write_text(first_python_block(DOC.read_text()))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    # registered so that numba and the simulator see a regular module's globals
    sys.modules[MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(MODULE_NAME, None)


def env_class(module):
    classes = [
        v for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, WarpEnv) and v is not WarpEnv
        and v.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"expected one WarpEnv subclass in the doc example, got {classes}"
    return classes[0]


@pytest.mark.sim
def test_example_runs_and_defines_an_env(example):
    cls = env_class(example)
    assert example.env.backend == ("cudasim" if SIM else "cpu")
    assert isinstance(example.env, cls)


@pytest.mark.sim
def test_example_rollout_shapes(example):
    cls = env_class(example)
    num_envs, steps = 2, 3
    env = cls(num_envs=num_envs, device="cpu", seed=1)
    assert env.num_agents <= 4, "keep the doc example's defaults small (the simulator is slow)"
    td = env.rollout(steps, break_when_any_done=False)
    assert td.batch_size == (num_envs, steps)
    for group, n in env.layout.groups.items():
        obs_shape = tuple(env.layout.observation_shape)
        act_shape = tuple(env.layout.action_spec.shape)
        assert td[group, "observation"].shape == (num_envs, steps, n, *obs_shape)
        assert td["next", group, "observation"].shape == (num_envs, steps, n, *obs_shape)
        assert td[group, "action"].shape == (num_envs, steps, n, *act_shape)
        assert td["next", group, "reward"].shape == (num_envs, steps, n, 1)
        assert td["next", group, "reward"].dtype == torch.float32
    for key in ("done", "terminated", "truncated"):
        assert td["next", key].shape == (num_envs, steps, 1)
        assert td["next", key].dtype == torch.bool


@pytest.mark.sim
def test_example_seeding_reproduces_resets(example):
    cls = env_class(example)
    a = cls(num_envs=2, device="cpu", seed=3).reset()
    env = cls(num_envs=2, device="cpu", seed=4)
    env.reset()
    env.set_seed(3)  # zeroes the episode counters: the next reset is episode 1 again
    b = env.reset()
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.sim
def test_example_rejects_bad_parameters(example):
    cls = env_class(example)
    name = next(k for k, v in cls.defaults.items() if type(v) is int)
    with pytest.raises(TypeError, match="unknown parameter"):
        cls(num_envs=1, no_such_parameter=1)
    with pytest.raises(TypeError, match=name):
        cls(num_envs=1, **{name: 1.5})
    with pytest.raises(ValueError, match=name):
        cls(num_envs=1, **{name: 0})


@pytest.mark.slow
@pytest.mark.skipif(SIM, reason="Tag's kernels at the README's sizes: the CPU backend")
def test_the_readmes_collector_example_runs_as_written(capsys):
    """README's "Plug it into a TorchRL pipeline" block: its memory estimate and three batches.
    Slow: Tag's CPU kernels compile for over a minute on two cores."""
    text = (DOC.parents[1] / "README.md").read_text()
    code = re.search(r"## Plug it into a TorchRL pipeline\n\n```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    exec(compile(code.group(1), "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "a collector loop needs about 1.47 GiB"
    assert len(lines) == 4 and all(line.startswith("torch.Size([128, 50]) tensor(") for line in lines[1:])
