"""Every ``python -m torchrl_warp.<tool>`` command in the README's and the docs' code blocks
is one its tool takes: the training recipe's overrides compose into a config that passes
``check_config`` (the checks a run makes before it builds an env), the other tools' options
parse. Placeholders (``<date>``, ``PATH``) are filled with a made-up path first. The cheap
command lines (the ``check_env`` demonstration) run as written in ``test_docs_cheap_commands_run``.
"""
from __future__ import annotations

import argparse
import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SIM

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOOLS = {"torchrl_warp.bench": "torchrl_warp.bench", "torchrl_warp.soak": "torchrl_warp.soak",
         "torchrl_warp.check_env": "torchrl_warp.check_env",
         "torchrl_warp.recipes.scripted": "torchrl_warp.recipes.scripted",
         "torchrl_warp.recipes.mpe_scripted": "torchrl_warp.recipes.mpe_scripted"}

pytestmark = pytest.mark.skipif(SIM, reason="the commands' options: no kernels, the CPU pass only")


def block_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command) for each ``python -m torchrl_warp...`` line of the file's fenced code
    blocks, continuation lines joined, a trailing ``# comment`` dropped, from ``python`` on."""
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", path.read_text(), re.DOTALL | re.MULTILINE):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line)
            match = re.search(r"python3? -m (torchrl_warp\S*)(.*)$", line)
            if match:
                commands.append((f"{path.name}: {line.strip()[:80]}", match.group(1) + match.group(2)))
    return commands


COMMANDS = [c for path in DOCS for c in block_commands(path)]


def fill_placeholders(args: list[str]) -> list[str]:
    return [re.sub(r"<[a-z_]+>", "x", a).replace("=PATH", "=x/checkpoint.pt") for a in args]


class _Parsed(Exception):
    pass


def parse_only(module: str, argv: list[str]) -> argparse.Namespace:
    """``module.main(argv)`` until its ``ArgumentParser`` has parsed ``argv`` (nothing runs)."""
    original = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    argparse.ArgumentParser.parse_args = parse_and_stop
    try:
        importlib.import_module(module).main(argv)
    except _Parsed as parsed:
        return parsed.args[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{module}.main never parsed its arguments")


def compose_recipe(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from torchrl_warp.recipes.config import check_config, register

    register()
    with initialize_config_dir(config_dir=str(ROOT / "recipes" / "conf"), version_base=None):
        cfg = compose("config", overrides=[o for o in overrides if not o.startswith("device=")])
    check_config(cfg)  # device= is checked against this machine's devices: left out
    return cfg


def test_the_docs_have_commands_of_every_tool():
    tools = {command.split()[0] for _, command in COMMANDS}
    assert {"torchrl_warp.recipes.train", "torchrl_warp.recipes.play", *TOOLS} - tools == \
        {"torchrl_warp.recipes.scripted"}, tools  # scripted's options are cited inline only
    assert len(COMMANDS) > 40


@pytest.mark.parametrize("where,command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_docs_command_is_one_its_tool_takes(where, command):
    tool, *args = shlex.split(command)
    args = fill_placeholders(args)
    if tool == "torchrl_warp.recipes.train":
        compose_recipe(args)
    elif tool == "torchrl_warp.recipes.play":
        from torchrl_warp.recipes.play import parse_args

        parse_args(args)
    else:
        assert tool in TOOLS, f"{where}: no check for {tool}"
        parse_only(TOOLS[tool], args)


@pytest.mark.parametrize("bad", [["env=tag"], ["env=tag", "algo=mappo", "env.num_envs=0"], ["algo.hiden=[16]"]])
def test_a_bad_recipe_command_would_fail(bad):
    with pytest.raises(Exception):
        compose_recipe(bad)


def test_a_bad_tool_command_would_fail():
    with pytest.raises(SystemExit):
        parse_only("torchrl_warp.bench", ["--env", "tag", "--num-agents", "10"])


def test_docs_cheap_commands_run():
    """docs/writing_an_env.md's check_env demonstration: it finds the drift it is written to show."""
    (where, command), = [(w, c) for w, c in COMMANDS if "inconsistent_env:DriftEnv" in c]
    proc = subprocess.run([sys.executable, "-m", *shlex.split(command)], cwd=ROOT / "tests", capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, (where, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "first disagreement" in proc.stdout.lower() or "differ" in proc.stdout.lower(), proc.stdout[-2000:]


#: overrides that do not change what a run holds: left out of docs/recipes.md's memory table
_NOT_MEMORY = ("resume=", "time_limit_s=", "eval_envs=", "eval_interval_frames=", "marl_eval_algorithm=",
               "env.total_frames=", "device=")


def test_the_memory_table_gives_each_documented_training_command_its_estimate():
    """docs/recipes.md's "Memory": a row per documented training command (its overrides that
    change memory), with what the recipe's own estimate says on a GPU and on the CPU."""
    from torchrl_warp.recipes.train import family

    text = (ROOT / "docs" / "recipes.md").read_text().split("### Memory", 1)[1].split("\n#", 1)[0]
    table = {m.group(1): (float(m.group(2)), float(m.group(3)))
             for m in re.finditer(r"^\| `([^`]*)` \| ([\d.]+) \| ([\d.]+) \|$", text, re.MULTILINE)}
    wanted = []
    for _, command in COMMANDS:
        if command.startswith("torchrl_warp.recipes.train"):
            args = [a for a in fill_placeholders(shlex.split(command)[1:]) if not a.startswith(_NOT_MEMORY)]
            if args not in wanted:
                wanted.append(args)
    assert len(table) == len(wanted)
    for args in wanted:
        name = " ".join(args) or "(the defaults: CartPole + PPO)"
        cfg = compose_recipe(args)
        memory_needed = family(cfg.algo.name).memory_needed  # each family's own estimate
        gib = tuple(round(memory_needed(cfg, on_gpu) / 2**30, 2) for on_gpu in (True, False))
        assert table.get(name) == gib, name
