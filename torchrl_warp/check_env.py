"""Check that an environment behaves the same on every backend, and as a reference step if given.

``check_env("module:EnvClass", steps, **params)`` runs one seeded rollout of random
actions on each backend (the CPU, Numba's CUDA simulator, CUDA where a GPU is
present), each in a process of its own (the simulator must be chosen before numba
is imported), and compares every state field, outputs included, after the first
reset, after every step and after every automatic reset of the envs a step ended.
The actions are drawn once from the action spec with a seeded CPU generator, the
same on every backend. Ints and bools must be equal; floats agree within
``rtol``/``atol`` (NaN equals NaN); kernels' scratch fields (``Field(scratch=True)``)
are skipped. A ``reference`` step function (numpy) can be checked too: after each
step, it is given the state that the step started from on each backend, so a
difference shows at the step that makes it.

Before its own rollout, the CPU backend's process replays the rollout with the
bounds-checked CPU backend (``backend="cpu_checked"``: the same loop run as Python over
arrays that check every index), which the CPU backend itself does not do: a phase that
reads or writes past a field (an observation longer than the declared
``observation_shape``) fails the check there with an error naming the env, the kernel,
the phase, the field, its declared shape and the index (``bounds_check=False`` skips it).

The result names the first entry that differs: the two runs, the step, the field,
the env, the agent, the element and both values.

Examples:
    >>> print(Difference("cpu", "cudasim", step=3, stage="step", field="pos", env=1, agent=2,
    ...                  element=(1,), value_a=2.0, value_b=2.25, dtype="float32", count=1,
    ...                  size=12, fields=("pos", "observation"), tolerance="rtol=1e-05, atol=1e-05"))
    cpu and cudasim differ after step 3: pos[env 1, agent 2, 1] is 2.0 on cpu, 2.25 on cudasim (1 of 12 entries of pos differ; rtol=1e-05, atol=1e-05); also differing there: observation

In Python (raises :class:`CheckEnvError` when the runs differ, unless
``raise_on_difference=False``)::

    from torchrl_warp import check_env
    result = check_env("torchrl_warp.envs:CartPoleEnv", steps=30, num_envs=2, max_steps=10)
    assert result.ok

Command line (exit status 1 when the runs differ)::

    python -m torchrl_warp.check_env torchrl_warp.envs:TagEnv --steps 20 --param episode_length=8
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

__all__ = ["check_env", "CheckResult", "Comparison", "Difference", "BackendRun", "CheckEnvError", "BACKENDS", "main"]

# `python -m torchrl_warp.check_env` runs this file as __main__ after the package has imported
# it (the package exports check_env); runpy warns about that, harmlessly here
warnings.filterwarnings("ignore", message="'torchrl_warp.check_env' found in sys.modules", category=RuntimeWarning)

#: the backends, in the order they are run and compared (the first that runs is the baseline)
BACKENDS = ("cpu", "cudasim", "cuda")
#: WarpEnv's own arguments, which check_env sets itself
_ENV_ARGUMENTS = ("num_envs", "device", "backend", "seed", "check_actions", "cuda_graphs")


class CheckEnvError(AssertionError):
    """The runs differ, or a backend failed; ``.result`` is the :class:`CheckResult`."""

    def __init__(self, result: CheckResult):
        super().__init__(str(result))
        self.result = result


@dataclass(frozen=True)
class Difference:
    """The first entry on which two runs disagree.

    ``a`` and ``b`` are backends (``b`` may be ``"reference"``); ``step`` 0 is the first
    reset; ``stage`` is ``"step"`` (right after step ``step``) or ``"reset"`` (the first
    reset, or the automatic reset after step ``step``); ``agent`` is ``None`` for a
    per-env field; ``element`` indexes one agent's (or env's) entry; ``count`` of the
    field's ``size`` entries differ there, and ``fields`` lists every field that does.
    """

    a: str
    b: str
    step: int
    stage: str
    field: str
    env: int
    agent: int | None
    element: tuple
    value_a: bool | int | float
    value_b: bool | int | float
    dtype: str
    count: int
    size: int
    fields: tuple
    tolerance: str = ""

    @property
    def where(self) -> str:
        """``after step 3``, ``at the first reset``, ``after the automatic reset at step 4``."""
        if self.stage == "step":
            return f"after step {self.step}"
        return "at the first reset" if self.step == 0 else f"after the automatic reset at step {self.step}"

    def __str__(self) -> str:
        import numpy as np

        index = [f"env {self.env}"] + ([] if self.agent is None else [f"agent {self.agent}"])
        index += [str(i) for i in self.element]
        show = lambda v: str(np.asarray(v, dtype=self.dtype)[()])  # noqa: E731 (float32 digits)
        b_is = "from the reference" if self.b == "reference" else f"on {self.b}"
        b_name = "the reference" if self.b == "reference" else self.b
        since = f" (from {self.a}'s state before it)" if self.b == "reference" else ""
        extra = "; ".join(x for x in (f"{self.count} of {self.size} entries of {self.field} differ",
                                      self.tolerance) if x)
        text = (f"{self.a} and {b_name} differ {self.where}{since}: {self.field}[{', '.join(index)}] is "
                f"{show(self.value_a)} on {self.a}, {show(self.value_b)} {b_is} ({extra})")
        others = [f for f in self.fields if f != self.field]
        return text + (f"; also differing there: {', '.join(others)}" if others else "")


@dataclass
class Comparison:
    """Two runs compared: ``first`` difference (``None``: they agree) and every step with one."""

    a: str
    b: str
    states: int                      # states compared
    first: Difference | None = None
    differing_steps: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.first is None


@dataclass
class BackendRun:
    """One backend's run: ``status`` is ``"ok"``, ``"skipped"`` (``message`` says why) or ``"failed"``."""

    name: str
    status: str
    message: str = ""
    seconds: float = 0.0
    episode_ends: int = 0            # env-steps that ended an episode (each followed by a reset)
    details: str = ""                # a failure's traceback, or the end of its output


@dataclass
class CheckResult:
    """What :func:`check_env` found. ``ok``: every backend that ran agrees (and with the reference)."""

    target: str
    steps: int
    num_envs: int
    seed: int
    params: dict
    backends: dict
    comparisons: list

    def problems(self) -> list[str]:
        """What went wrong (empty: nothing): failed backends, first differences, nothing compared."""
        out = [f"{r.name} failed: {r.message}" for r in self.backends.values() if r.status == "failed"]
        out += [str(c.first) for c in self.comparisons if c.first is not None]
        if not self.comparisons:
            ran = [r.name for r in self.backends.values() if r.status == "ok"]
            out.append(f"nothing was compared: {' and '.join(ran) or 'no backend'} ran, and no reference was given")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    @property
    def first_difference(self) -> Difference | None:
        """The earliest difference of any comparison (by step, then stage), or ``None``."""
        found = [c.first for c in self.comparisons if c.first is not None]
        return min(found, key=lambda d: (d.step, d.stage == "reset"), default=None)

    def notes(self) -> list[str]:
        """What the check did not cover (backends skipped aside): resets never reached."""
        out = []
        if any(r.status == "ok" and r.episode_ends == 0 for r in self.backends.values()):
            out.append(f"no episode ended in {self.steps} steps, so no automatic reset was compared: "
                       "run more steps or pass a shorter time limit")
        return out

    def __str__(self) -> str:
        params = "".join(f", {k}={v!r}" for k, v in self.params.items())
        lines = [f"check_env {self.target}: {self.steps} steps, {self.num_envs} envs, seed {self.seed}{params}"]
        for r in self.backends.values():
            state = {"ok": f"ran in {r.seconds:.1f} s, {r.episode_ends} episodes ended"}.get(r.status, r.message)
            lines.append(f"  {r.name:8} {r.status:8} {state}")
        for c in self.comparisons:
            b = "the reference" if c.b == "reference" else c.b
            verdict = (f"the same over {c.states} states" if c.ok else
                       f"differ {c.first.where}, at step{'s' if len(c.differing_steps) > 1 else ''} "
                       f"{_ranges(c.differing_steps)}")
            lines.append(f"  {c.a} vs {b}: {verdict}")
        lines += [f"  note: {n}" for n in self.notes()]
        problems = self.problems()
        lines += ["FAILED: " + p for p in problems] if problems else ["OK: every run agrees"]
        return "\n".join(lines)


def _ranges(steps: list) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    out, start = [], None
    for i, s in enumerate(steps):
        if start is None:
            start = s
        if i + 1 == len(steps) or steps[i + 1] != s + 1:
            out.append(str(start) if start == s else f"{start}-{s}")
            start = None
    return ", ".join(out)


# ----- inputs ----------------------------------------------------------------------------
def _import_path(path: str, what: str, importer=importlib.import_module):
    """The object named by ``"module:attribute"`` (``what``: ``"Class"`` or ``"function"``)."""
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ValueError(f"check_env: expected 'module:{what}' (e.g. 'torchrl_warp.envs:CartPoleEnv'), got {path!r}")
    module_name, attribute = path.split(":")
    try:
        obj = importer(module_name)
    except ImportError as e:
        raise ImportError(f"check_env: cannot import module {module_name!r} of {path!r}: {e}") from e
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"check_env: module {module_name!r} has no {attribute!r} (from {path!r})")
        obj = getattr(obj, part)
    return obj


def _import_unlocked(module_name: str):
    """Import ``module_name`` without holding its import lock while its body runs.

    A module that steps an env when imported (the example of docs/writing_an_env.md)
    would deadlock in the simulator otherwise: numba, compiling a helper for a simulated
    thread, imports the helper's module and waits for the lock the main thread holds.
    """
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.find_spec(module_name)  # imports the parent packages
    if spec is None:
        raise ModuleNotFoundError(f"No module named {module_name!r}", name=module_name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    parent, _, child = module_name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def _env_class(target, importer=importlib.import_module):
    """``target`` (``"module:Class"``, or a WarpEnv subclass defined in an importable module),
    as ``(path, class)``."""
    from torchrl_warp.env import WarpEnv

    if isinstance(target, type):
        path = f"{target.__module__}:{target.__qualname__}"
        if target.__module__ == "__main__" or "<locals>" in target.__qualname__:
            raise ValueError(f"check_env: {target.__qualname__} must be importable by each backend's process: "
                             f"define it at the top level of a module and pass 'module:{target.__name__}'")
    else:
        path = target
    cls = _import_path(path, "Class", importer)
    if not (isinstance(cls, type) and issubclass(cls, WarpEnv)) or cls is WarpEnv:
        raise TypeError(f"check_env: {path!r} is {cls!r}, not a WarpEnv subclass")
    return path, cls


def _reference_function(reference):
    if reference is None or callable(reference):
        return reference
    fn = _import_path(reference, "function")
    if not callable(fn):
        raise TypeError(f"check_env: reference {reference!r} is {fn!r}, which is not callable")
    return fn


def _check_number(name, value, low, integral=False):
    import numbers

    kind = numbers.Integral if integral else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value < low:
        raise ValueError(f"check_env: {name} must be {'an int' if integral else 'a finite number'} >= {low}, "
                         f"got {value!r}")


# ----- one backend, in its own process ---------------------------------------------------
def _worker(job_path: str) -> None:
    """Run one backend's rollout as ``job_path`` says, and save its trajectory (or its failure)."""
    import torch

    job = torch.load(job_path, weights_only=True)
    sys.path[:0] = [p for p in job["path"] if p not in sys.path]
    name, out = job["backend"], {"status": "failed", "stage": "build"}
    try:
        if name == "cuda" and not torch.cuda.is_available():
            out = {"status": "skipped", "message": "no CUDA device in its process (torch.cuda.is_available() is False)"}
        else:
            _, cls = _env_class(job["target"], _import_unlocked)
            env = cls(num_envs=job["num_envs"], device="cuda" if name == "cuda" else "cpu", backend=name,
                      seed=job["seed"], **job["params"])
            if name == "cpu" and job.get("bounds_check"):
                out["stage"] = "bounds check"
                _bounds_checked_rollout(cls, job)
            out["stage"] = "run"
            out = {"status": "ok", **_rollout(env, job["steps"], job["seed"])}
    except Exception as e:  # reported by the parent, with the traceback
        out.update(message=f"{type(e).__name__}: {e}", error_type=type(e).__name__, error=str(e),
                   details=traceback.format_exc())
    torch.save(out, job["out"])


def _bounds_checked_rollout(cls, job) -> None:
    """The job's rollout on the bounds-checked CPU backend; an index outside a field raises
    an ``IndexError`` that names it (:class:`~torchrl_warp.backends.BoundsCheckedBackend`)."""
    from torchrl_warp.backends import BOUNDS_CHECKED

    env = cls(num_envs=job["num_envs"], device="cpu", backend=BOUNDS_CHECKED, seed=job["seed"], **job["params"])
    try:
        _rollout(env, job["steps"], job["seed"])
    except IndexError as err:
        raise IndexError(f"the bounds-checked run (backend {BOUNDS_CHECKED!r}) found {err}") from err


def _rollout(env, steps: int, seed: int) -> dict:
    """The state after the first reset, then after each step and after the reset that follows it
    (of the envs the step ended, as ``step_and_maybe_reset`` does), every field, on the CPU."""
    import torch
    from torchrl.envs.utils import step_mdp

    spec = env.full_action_spec.to("cpu")
    with torch.random.fork_rng(devices=[]):  # the same draws on every backend: the spec's, on the CPU
        torch.manual_seed(seed)
        actions = [spec.rand() for _ in range(steps)]
    snapshots = []
    snap = lambda: snapshots.append({k: v.to("cpu", copy=True) for k, v in env.state.items()})  # noqa: E731
    root = env.reset()
    snap()
    for t in range(steps):
        data = env.step(root.update(actions[t].to(env.device)))
        snap()
        root = env.maybe_reset(step_mdp(data))
        snap()
    fields = env.layout.all_fields()
    return {
        "backend": env.backend,
        "states": {k: torch.stack([s[k] for s in snapshots]) for k in snapshots[0]},
        "own_fields": [f.name for f in env.layout.fields],
        "scratch": [f.name for f in fields if f.scratch],
        "per_agent": {f.name: f.per_agent for f in fields},
        "params": dict(vars(env.params)),
        "episode_ends": int(torch.stack([s["done"] for s in snapshots[1::2]]).sum()),
    }


def _run_backends(path, backends, steps, num_envs, seed, params, timeout, bounds_check=False) -> dict:
    """Each backend's trajectory (or failure), its runs side by side in processes of their own."""
    import torch

    results, procs = {}, {}
    with tempfile.TemporaryDirectory(prefix="check_env_") as tmp:
        search_path = [os.getcwd() if p == "" else p for p in sys.path]
        try:
            for name in backends:
                job = {"backend": name, "target": path, "steps": steps, "num_envs": num_envs, "seed": seed,
                       "params": params, "path": search_path, "out": os.path.join(tmp, f"{name}.pt"),
                       "bounds_check": bounds_check}
                torch.save(job, os.path.join(tmp, f"{name}.job"))
                environ = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1" if name == "cudasim" else "0"}
                log = open(os.path.join(tmp, f"{name}.log"), "w")
                procs[name] = (subprocess.Popen([sys.executable, "-m", "torchrl_warp.check_env", "--worker",
                                                 os.path.join(tmp, f"{name}.job")],
                                                stdout=log, stderr=subprocess.STDOUT, env=environ),
                               log, time.perf_counter())
            pending = dict(procs)
            while pending:
                for name, (proc, log, start) in list(pending.items()):
                    seconds = time.perf_counter() - start
                    timed_out = proc.poll() is None and timeout is not None and seconds > timeout
                    if proc.poll() is None and not timed_out:
                        continue
                    if timed_out:
                        proc.kill()
                        proc.wait()
                    del pending[name]
                    results[name] = (_collect(name, tmp, proc.returncode, timed_out, timeout), seconds)
                time.sleep(0.05)
        finally:
            for proc, log, _ in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
    return results


def _collect(name, tmp, returncode, timed_out, timeout) -> dict:
    """What backend ``name``'s process saved, or why it saved nothing; ``details``: its output."""
    import torch

    with open(os.path.join(tmp, f"{name}.log")) as f:
        output = f.read()[-4000:]
    out_path = os.path.join(tmp, f"{name}.pt")
    if timed_out:
        out = {"status": "failed", "stage": "run", "message": f"timed out after {timeout} s"}
    elif not os.path.exists(out_path):
        out = {"status": "failed", "stage": "run",
               "message": f"its process exited with code {returncode}, saving nothing"}
    else:
        out = torch.load(out_path, weights_only=True)
    out.setdefault("details", output)
    return out


# ----- comparisons -----------------------------------------------------------------------
def _field_order(run: dict) -> list[str]:
    """Fields in the order their differences are reported: the action (an input), the env's own
    fields, then the outputs and counters; scratch fields left out."""
    names = list(run["states"])
    first = ["action"] + run["own_fields"] + ["observation", "reward"]
    order = [n for n in first if n in names] + [n for n in names if n not in first]
    return [n for n in order if n not in run["scratch"]]


def _stage(snapshot: int) -> tuple[int, str]:
    """Snapshot index -> (step, stage): 0 the first reset, then each step and the reset after it."""
    return (snapshot + 1) // 2, "step" if snapshot % 2 else "reset"


def _mismatch(got, expected, rtol, atol):
    """Where ``got`` differs from ``expected``: exactly for ints and bools, within the
    tolerance (NaN equal to NaN) for floats."""
    import torch

    if got.is_floating_point() or expected.is_floating_point():
        dtype = torch.promote_types(got.dtype, expected.dtype)
        return ~torch.isclose(got.to(dtype), expected.to(dtype), rtol=rtol, atol=atol, equal_nan=True)
    return got != expected


def _difference(a, b, snapshot, masks, values_a, values_b, per_agent, rtol, atol) -> Difference:
    """The first differing entry of ``snapshot``: the first field of ``masks`` with one, row-major."""
    fields = tuple(f for f, m in masks.items() if bool(m.any()))
    name = fields[0]
    mask = masks[name]
    index = tuple(int(i) for i in mask.nonzero()[0])
    lead = 2 if per_agent[name] else 1
    step, stage = _stage(snapshot)
    x, y = values_a[name], values_b[name]
    floating = x.is_floating_point() or y.is_floating_point()
    return Difference(a, b, step, stage, name, env=index[0], agent=index[1] if lead == 2 else None,
                      element=index[lead:], value_a=x[index].item(), value_b=y[index].item(),
                      dtype=str(x.dtype).removeprefix("torch."), count=int(mask.sum()), size=mask.numel(),
                      fields=fields, tolerance=f"rtol={rtol}, atol={atol}" if floating else "")


def _compare_runs(a: str, run_a: dict, b: str, run_b: dict, rtol, atol) -> Comparison:
    import torch

    masks = {}
    for name in _field_order(run_a):
        x, y = run_a["states"][name], run_b["states"][name]
        if x.shape != y.shape or x.dtype != y.dtype:
            raise RuntimeError(f"check_env: field {name!r} is {tuple(x.shape)} {x.dtype} on {a}, "
                               f"{tuple(y.shape)} {y.dtype} on {b}")
        masks[name] = _mismatch(y, x, rtol, atol)
    snapshots = next(iter(masks.values())).shape[0]
    differs = torch.stack([m.reshape(snapshots, -1).any(1) for m in masks.values()]).any(0)
    bad = differs.nonzero().flatten().tolist()
    comparison = Comparison(a, b, snapshots, differing_steps=sorted({_stage(s)[0] for s in bad}))
    if bad:
        s = bad[0]
        comparison.first = _difference(a, b, s, {k: m[s] for k, m in masks.items()},
                                       {k: v[s] for k, v in run_a["states"].items()},
                                       {k: v[s] for k, v in run_b["states"].items()}, run_a["per_agent"], rtol, atol)
    return comparison


def _compare_reference(name: str, run: dict, reference, rtol, atol) -> Comparison:
    """Each step of ``run`` against ``reference`` applied to the state that step started from."""
    import numpy as np
    import torch

    states, order = run["states"], _field_order(run)
    params = SimpleNamespace(**run["params"])
    steps = (states["done"].shape[0] - 1) // 2
    comparison = Comparison(name, "reference", steps)
    for t in range(1, steps + 1):
        before = {k: v[2 * t - 2].numpy().copy() for k, v in states.items()}
        after = {k: v[2 * t - 1] for k, v in states.items()}
        try:
            out = reference(before, after["action"].numpy().copy(), params)
        except Exception as e:
            raise RuntimeError(f"check_env: the reference raised at step {t} (from {name}'s state): "
                               f"{type(e).__name__}: {e}") from e
        if not isinstance(out, Mapping):
            raise TypeError(f"check_env: the reference must return a dict of state arrays, got {type(out).__name__}")
        unknown = sorted(set(out) - set(order))
        if unknown:
            raise ValueError(f"check_env: the reference returned {', '.join(map(repr, unknown))}, which "
                             f"{'is' if len(unknown) == 1 else 'are'} no (non-scratch) state field; the fields: "
                             f"{', '.join(order)}")
        expected, masks = {}, {}
        for k in (k for k in order if k in out):
            expected[k] = torch.as_tensor(np.asarray(out[k]))
            if tuple(expected[k].shape) != tuple(after[k].shape):
                raise ValueError(f"check_env: the reference's {k!r} has shape {tuple(expected[k].shape)}, "
                                 f"the state field {tuple(after[k].shape)}")
            masks[k] = _mismatch(after[k], expected[k], rtol, atol)
        if any(bool(m.any()) for m in masks.values()):
            comparison.differing_steps.append(t)
            if comparison.first is None:
                comparison.first = _difference(name, "reference", 2 * t - 1, masks, after, expected,
                                               run["per_agent"], rtol, atol)
    return comparison


# ----- the check -------------------------------------------------------------------------
def check_env(
    target,
    steps: int = 20,
    *,
    num_envs: int = 2,
    seed: int = 0,
    backends=BACKENDS,
    reference=None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    raise_on_difference: bool = True,
    timeout: float | None = None,
    bounds_check: bool = True,
    **params,
) -> CheckResult:
    """Run the same seeded random-action rollout on each backend and compare them (see the module doc).

    Args:
        target: ``"module:EnvClass"`` (a ``WarpEnv`` subclass), or the class itself if
            its module can be imported by path.
        steps: steps of the rollout (envs that end an episode are reset, as in
            ``rollout(break_when_any_done=False)``): choose a time limit among ``params``
            short enough that episodes end.
        num_envs: the env's batch size.
        seed: the env's seed (the actions' seed too).
        backends: which of ``"cpu"``, ``"cudasim"``, ``"cuda"`` to run; ``"cuda"`` is
            skipped where its process sees no GPU. The first that runs is compared with
            each of the others.
        reference: ``fn(state, action, params) -> dict``, or ``"module:function"``: the
            state (name -> numpy array, every field) that a step starts from, the
            kernels' ``action`` array ``[num_envs, num_agents, ...]``, and ``env.params``;
            it returns next values of some state fields (name -> array of the field's
            shape), compared after that step on every backend.
        rtol: relative tolerance for floats (``torch.isclose``'s); ints and bools are exact.
        atol: absolute tolerance for floats (``torch.isclose``'s).
        raise_on_difference: raise :class:`CheckEnvError` when the runs differ or a
            backend fails (``False``: return the result with ``ok`` False).
        timeout: seconds each backend may take (``None``: no limit).
        bounds_check: the CPU backend's process first replays the rollout with the
            bounds-checked CPU backend (see the module doc); an index outside a field
            fails the CPU run with an error naming it.
        **params: the env's parameters.

    Returns a :class:`CheckResult` (``ok``, ``first_difference``, ``backends``,
    ``comparisons``; ``str()`` of it is a report).

    Example (each backend's process takes some seconds to start and compile)::

        result = check_env("torchrl_warp.envs:CartPoleEnv", steps=30, max_steps=10)
        result.ok, result.backends["cuda"].status  # (True, 'skipped') on a machine without a GPU
    """
    from torchrl_warp.checks import check_flag, check_seed
    from torchrl_warp.params import check_params

    path, cls = _env_class(target)
    _check_number("steps", steps, 1, integral=True)
    _check_number("num_envs", num_envs, 1, integral=True)
    if check_seed("check_env", seed) is None:
        raise ValueError("check_env: seed must be an int (every backend runs with the same one), got None")
    if isinstance(backends, str) or not backends or len(set(backends)) != len(backends) or \
            any(b not in BACKENDS for b in backends):
        raise ValueError(f"check_env: backends must be distinct names among {', '.join(BACKENDS)}, got {backends!r}")
    _check_number("rtol", rtol, 0)
    _check_number("atol", atol, 0)
    check_flag("check_env", "raise_on_difference", raise_on_difference)
    check_flag("check_env", "bounds_check", bounds_check)
    if timeout is not None:
        _check_number("timeout", timeout, 0)
    reserved = sorted(set(params) & set(_ENV_ARGUMENTS))
    if reserved:
        raise TypeError(f"check_env: {', '.join(reserved)} {'is' if len(reserved) == 1 else 'are'} set by "
                        "check_env itself (backends= chooses the devices); pass only the env's parameters")
    check_params(cls.__name__, cls.parameters, params)
    reference = _reference_function(reference)
    if len(backends) < 2 and reference is None:
        raise ValueError("check_env: give two backends or more, or a reference, to compare")

    runs = _run_backends(path, tuple(backends), steps, num_envs, seed, params, timeout, bounds_check)
    failed = [out for out, _ in runs.values() if out["status"] == "failed"]
    built = [out for out, _ in runs.values() if out["status"] != "skipped"]
    if built and len(failed) == len(built) and all(out["stage"] == "build" for out in failed) \
            and len({out["message"] for out in failed}) == 1 and failed[0]["error_type"] in ("ValueError", "TypeError"):
        # every backend refused the parameters in the same words: bad input, not an inconsistency
        raise (ValueError if failed[0]["error_type"] == "ValueError" else TypeError)(failed[0]["error"])
    result = CheckResult(path, steps, num_envs, seed, dict(params), {}, [])
    for name in backends:
        out, seconds = runs[name]
        result.backends[name] = BackendRun(name, out["status"], out.get("message", ""), seconds,
                                           out.get("episode_ends", 0), out.get("details", ""))
    ran = [name for name in backends if runs[name][0]["status"] == "ok"]
    for name in ran[1:]:
        result.comparisons.append(_compare_runs(ran[0], runs[ran[0]][0], name, runs[name][0], rtol, atol))
    if reference is not None:
        for name in ran:
            result.comparisons.append(_compare_reference(name, runs[name][0], reference, rtol, atol))
    if raise_on_difference and not result.ok:
        raise CheckEnvError(result)
    return result


def _literal(text: str):
    """A ``--param`` value: a Python literal, ``true``/``false`` as bools (the spelling of
    YAML and Hydra), else the plain string.

    >>> _literal("8"), _literal("false"), _literal("True"), _literal("grid")
    (8, False, True, 'grid')
    """
    import ast

    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a plain string, e.g. neighbor_search=grid


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:  # one backend's process (started by _run_backends)
        return _worker(argv[1])
    parser = argparse.ArgumentParser(prog="python -m torchrl_warp.check_env", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("target", help="the env class, as module:Class (e.g. torchrl_warp.envs:CartPoleEnv)")
    parser.add_argument("--steps", type=int, default=20, help="steps of the rollout (done envs are reset)")
    parser.add_argument("--num-envs", type=int, default=2, help="envs stepped together")
    parser.add_argument("--seed", type=int, default=0, help="the env's seed and the actions'")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="an env parameter (a Python literal; true/false are bools), e.g. max_steps=10; repeat for more")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS,
                        help="backends to run (cuda is skipped without a GPU)")
    parser.add_argument("--reference", metavar="MODULE:FUNCTION",
                        help="a numpy step function fn(state, action, params) -> dict of next state arrays")
    parser.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance for floats")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance for floats")
    parser.add_argument("--timeout", type=float, help="seconds each backend may take")
    parser.add_argument("--no-bounds-check", action="store_true",
                        help="skip the bounds-checked replay of the rollout in the cpu backend's process")
    parser.add_argument("--json", help="also write the result here, as JSON")
    args = parser.parse_args(argv)
    params = {}
    for item in args.param:
        name, eq, value = item.partition("=")
        if not eq or not name:
            parser.error(f"--param takes NAME=VALUE, got {item!r}")
        params[name] = _literal(value)
    try:
        result = check_env(args.target, args.steps, num_envs=args.num_envs, seed=args.seed, backends=args.backends,
                           reference=args.reference, rtol=args.rtol, atol=args.atol, raise_on_difference=False,
                           timeout=args.timeout, bounds_check=not args.no_bounds_check, **params)
    except (ValueError, TypeError, ImportError) as e:
        parser.error(str(e))
    print(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ok": result.ok, "problems": result.problems(), **asdict(result)}, f, indent=1, default=str)
    if not result.ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
