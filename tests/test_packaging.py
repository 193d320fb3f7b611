"""Packaging: the sdist and the wheel hold every module and config, and the wheel works from
a clean ``sys.path``; with the checkout's root first on ``sys.path`` (``python -m pytest``
from the root after a non-editable ``pip install .``) the checkout's package imports whole.

The subprocesses drop an editable install's finder from ``sys.meta_path`` and put their own
directories first on ``sys.path``: what they import comes from where they say.
"""
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="packaging has no kernels: it runs in the CPU pass only")

ROOT = Path(__file__).resolve().parents[1]
#: the checkout's directories -> where the wheel installs them (pyproject's package-dir)
PACKAGE_DIRS = {"torchrl_warp": "torchrl_warp", "envs": "torchrl_warp/envs", "cuda": "torchrl_warp/cuda",
                "recipes": "torchrl_warp/recipes"}
PRELUDE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path[:] = {path!r} + [p for p in sys.path[1:] if p not in {root!r}]
"""


def python_with_path(code: str, path: list, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter whose ``sys.path`` starts with ``path`` and that has no
    editable install of this project (its finder dropped, the checkout's root off the path)."""
    prelude = PRELUDE.format(path=[str(p) for p in path], root=["", str(ROOT)])
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def package_files() -> set:
    """Every module and recipe config of the checkout, as the wheel names it."""
    files = set()
    for src, dst in PACKAGE_DIRS.items():
        for f in (ROOT / src).glob("*.py"):
            files.add(f"{dst}/{f.name}")
    for f in (ROOT / "recipes" / "conf").rglob("*.yaml"):
        files.add(f"torchrl_warp/recipes/{f.relative_to(ROOT / 'recipes').as_posix()}")
    return files


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """``python -m build`` (the sdist, then the wheel built from it) of a copy of the checkout."""
    tree = tmp_path_factory.mktemp("src") / "torchrl-warp"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".ci-venv", ".whl", "site", "gpuscratch",
                                                              "__pycache__", "*.egg-info", "outputs", "build"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory):
    """The wheel installed into a directory of its own (``pip install --target``, no dependencies)."""
    target = tmp_path_factory.mktemp("target")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                           str(target), str(dists[1])], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return target


def test_the_wheel_holds_every_module_and_recipe_config(dists):
    names = set(zipfile.ZipFile(dists[1]).namelist())
    expected = package_files()
    assert {"torchrl_warp/envs/tag.py", "torchrl_warp/cuda/tag.py", "torchrl_warp/recipes/conf/config.yaml"} <= expected
    assert expected - names == set()
    assert not [n for n in names if n.split("/")[0] in ("tests", "docs", "envs", "cuda", "recipes")]


def test_the_sdist_holds_the_sources_docs_and_tests(dists):
    with tarfile.open(dists[0]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    sources = {f.relative_to(ROOT).as_posix() for src in PACKAGE_DIRS for f in (ROOT / src).glob("*.py")}
    wanted = sources | {"pyproject.toml", "LICENSE", "README.md", "CHANGELOG.md", "mkdocs.yml",
                        "docs/writing_an_env.md", "tests/test_docs_example.py", "recipes/conf/config.yaml"}
    assert wanted - names == set()


def test_the_installed_wheel_steps_an_env_and_composes_the_recipe_config(installed, tmp_path):
    code = """
import torchrl_warp, torchrl_warp.envs
assert torchrl_warp.__file__.startswith(sys.path[0]), torchrl_warp.__file__
assert torchrl_warp.envs.__file__.startswith(sys.path[0]), torchrl_warp.envs.__file__
from torchrl_warp.envs import CartPoleEnv
print(tuple(CartPoleEnv(num_envs=2, seed=0).rollout(3).batch_size))
sys.argv = ["train", "--cfg", "job"]
import runpy
runpy.run_module("torchrl_warp.recipes.train", run_name="__main__")
"""
    proc = python_with_path(code, [installed], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "(2, 3)"
    assert "name: cartpole" in proc.stdout and "name: ppo" in proc.stdout  # the default env and algo


def test_the_checkouts_root_first_on_sys_path_imports_the_whole_package(installed):
    """``pip install .`` then ``python -m pytest`` at the root: the root's torchrl_warp/ comes first
    and takes its envs, cuda and recipes from beside it."""
    code = """
import torchrl_warp, torchrl_warp.envs, torchrl_warp.cuda.tag, torchrl_warp.recipes
print(torchrl_warp.__file__); print(torchrl_warp.envs.__file__); print(torchrl_warp.recipes.__file__)
"""
    proc = python_with_path(code, [ROOT, installed], ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(ROOT / "torchrl_warp" / "__init__.py"), str(ROOT / "envs" / "__init__.py"),
                                   str(ROOT / "recipes" / "__init__.py")]
