"""The CPU backend never changes torch's threading (``torchrl_warp.threads``).

Numba's ``omp`` threading layer, started by the first parallel launch, set OpenMP's thread
count, which is torch's on Linux: ``torch.get_num_threads()`` went 1 -> 2 under
``OMP_NUM_THREADS=1``. Each check runs in a fresh process (the layer starts once per
process), with ``OMP_NUM_THREADS=1``: launches then run serially in the calling thread,
or, with ``TORCHRL_WARP_NUM_THREADS=2``, on two of Numba's threads. Kernels load from the
kernel cache when an earlier run compiled them; every env of ``tests/all_envs.py`` runs
under the ``slow`` marker.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import pytest

from conftest import SIM
from torchrl_warp import threads

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(SIM, reason="the CPU backend's threads (the simulator runs Python threads)")

_STEP_EVERY_ENV = """
import json, sys, warnings
import numba, torch
warnings.simplefilter("error", numba.NumbaWarning)  # "Cannot cache ..." among them
from all_envs import ENVS, make
seen = {"before": [torch.get_num_threads(), torch.get_num_interop_threads()], "after": {}}
for name in sys.argv[1:] or ENVS:
    env = make(name)
    td = env.reset()
    td = env.step(env.rand_action(td))
    env.step_and_maybe_reset(env.rand_action(td["next"].clone()))
    env.rollout(3)
    seen["after"][name] = [torch.get_num_threads(), torch.get_num_interop_threads()]
    seen.setdefault("ran", set()).update(
        variant for k in env._compiled.values() for variant in ("parallel", "serial") if getattr(k, variant).signatures)
seen["layer"] = numba.threading_layer()
seen["ran"] = sorted(seen["ran"])
print(json.dumps(seen))
"""


def _run(code: str, *args: str, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    environ.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), environ.get("PYTHONPATH", "")]),
                   **env)
    result = subprocess.run([sys.executable, "-c", code, *args], env=environ, capture_output=True, text=True,
                            timeout=3600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _check_unchanged(seen: dict) -> None:
    assert seen["before"][0] == 1, seen  # OMP_NUM_THREADS=1
    changed = {name: after for name, after in seen["after"].items() if after != seen["before"]}
    assert not changed, f"torch's (intra-op, inter-op) threads were {seen['before']}, after stepping: {changed}"


@pytest.mark.parametrize("numba_threads, ran", [("", "serial"), ("2", "parallel")])
def test_stepping_envs_leaves_torch_threads_alone(numba_threads, ran):
    """A sample: one classic-control env and one MPE scenario (every env: the slow test)."""
    seen = _run(_STEP_EVERY_ENV, "cartpole", "simple_spread", **{threads.THREADS_ENV: numba_threads})
    _check_unchanged(seen)
    assert seen["layer"] == threads.DEFAULT_LAYER
    assert seen["ran"] == [ran]  # one thread (torch's count): the serial loop, no thread pool


@pytest.mark.slow
def test_stepping_every_env_leaves_torch_threads_alone():
    """On two of Numba's threads: the parallel launches (the serial ones touch no thread)."""
    _check_unchanged(_run(_STEP_EVERY_ENV, **{threads.THREADS_ENV: "2"}))


def test_a_chosen_omp_layer_leaves_torch_threads_alone_too():
    """``NUMBA_THREADING_LAYER=omp`` is the user's choice and is kept; its start changes
    OpenMP's thread count, which the backend then puts back."""
    seen = _run(_STEP_EVERY_ENV, "cartpole", NUMBA_THREADING_LAYER="omp", **{threads.THREADS_ENV: "2"})
    _check_unchanged(seen)
    assert seen["layer"] == "omp"


def test_threads_per_launch_follow_torch_unless_set(monkeypatch):
    import torch

    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    assert threads.num_threads() == min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)
    monkeypatch.setenv(threads.THREADS_ENV, "1")
    assert threads.num_threads() == 1
    monkeypatch.setenv(threads.THREADS_ENV, "100000")
    assert threads.num_threads() == numba.config.NUMBA_NUM_THREADS  # at most the pool's size
    for bad in ("0", "two"):
        monkeypatch.setenv(threads.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=threads.THREADS_ENV):
            threads.num_threads()


def test_a_launch_puts_the_callers_numba_thread_count_back():
    threads.start_numba_threads()
    before = numba.get_num_threads()
    with threads.numba_threads(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
