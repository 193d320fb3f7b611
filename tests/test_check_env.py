"""check_env: one seeded rollout per backend, each in its own process, compared entry by entry.

Each backend's process takes seconds to start (torch, numba) and compile, so the runs
are few: DriftEnv (tests/inconsistent_env.py, different in the simulator at a known
step, env and agent) on every backend once, replayed for the comparisons that only
differ in the reference or the tolerance; CartPole on the CPU and the simulator.
"""
import importlib
import json
import sys

import numba
import pytest
import torch
from torchrl.data import Categorical

import inconsistent_env as drift
from torchrl_warp import Field, Layout, Param, WarpEnv, check_env
from torchrl_warp.check_env import CheckEnvError, main

#: the module (``torchrl_warp.check_env`` is the function, which the package exports)
MODULE = importlib.import_module("torchrl_warp.check_env")
DRIFT = "inconsistent_env:DriftEnv"
STEPS = 6  # DriftEnv's episodes last 4 steps: one automatic reset per env


@pytest.fixture(scope="module")
def drift_check():
    """check_env on DriftEnv, every backend and the reference; and the runs it compared."""
    runs = []
    real = MODULE._run_backends

    def spy(*args):
        runs.append(real(*args))
        return runs[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MODULE, "_run_backends", spy)
        result = check_env(DRIFT, STEPS, reference=drift.reference_step, raise_on_difference=False)
    return result, runs[0]


@pytest.fixture
def replay(drift_check, monkeypatch):
    """check_env compares DriftEnv's runs again instead of running it."""
    monkeypatch.setattr(MODULE, "_run_backends", lambda *args: drift_check[1])


@pytest.fixture
def no_runs(monkeypatch):
    """check_env must refuse before it starts any process."""
    def fail(*args):
        raise AssertionError("check_env started its backends")

    monkeypatch.setattr(MODULE, "_run_backends", fail)


def test_the_first_difference_is_named_exactly(drift_check):
    result = drift_check[0]
    assert not result.ok
    d = result.first_difference
    assert (d.a, d.b, d.step, d.stage, d.field) == ("cpu", "cudasim", drift.ODD_STEP, "step", "pos")
    assert (d.env, d.agent, d.element) == (drift.ODD_ENV, drift.ODD_AGENT, (1,))
    assert (d.value_a, d.value_b) == (drift.ODD_AGENT, drift.ODD_AGENT + 0.25)
    assert (d.count, d.size, d.fields) == (1, 2 * 3 * 2, ("pos", "observation"))
    message = str(d)
    assert message.startswith("cpu and cudasim differ after step 3: pos[env 1, agent 2, 1] is 2.0 on cpu, "
                              "2.25 on cudasim (1 of 12 entries of pos differ")
    assert message.endswith("also differing there: observation")
    assert "FAILED: " + message in str(result)


def test_the_reference_starts_from_each_backends_own_state(drift_check):
    """The simulator's bump is one step's difference from the reference, not every later step's."""
    pairs = {(c.a, c.b): c for c in drift_check[0].comparisons}
    assert list(pairs) == [("cpu", "cudasim"), ("cpu", "reference"), ("cudasim", "reference")]
    assert pairs["cpu", "cudasim"].differing_steps == [3, 4]  # until the reset after step 4
    assert pairs["cpu", "reference"].ok and pairs["cpu", "reference"].states == STEPS
    sim = pairs["cudasim", "reference"]
    assert sim.differing_steps == [3]
    assert (sim.first.field, sim.first.env, sim.first.agent, sim.first.value_a, sim.first.value_b) == \
        ("pos", 1, 2, 2.25, 2.0)
    assert "differ after step 3 (from cudasim's state before it)" in str(sim.first)


def test_each_backend_ran_in_its_own_process(drift_check):
    result = drift_check[0]
    assert [r.status for r in result.backends.values()][:2] == ["ok", "ok"]
    assert all(r.episode_ends == 2 for r in result.backends.values() if r.status == "ok")  # resets compared
    assert all("RuntimeWarning" not in r.details for r in result.backends.values())  # python -m's, silenced
    cuda = result.backends["cuda"]
    if not torch.cuda.is_available():
        assert (cuda.status, cuda.message) == ("skipped", "no CUDA device in its process "
                                                          "(torch.cuda.is_available() is False)")
        assert "  cuda     skipped  no CUDA device" in str(result)


def test_an_injected_reference_error_is_found_at_its_step(replay):
    with pytest.raises(CheckEnvError) as caught:
        check_env(DRIFT, STEPS, backends=("cpu",), reference="inconsistent_env:broken_reference")
    result = caught.value.result
    assert list(result.backends) == ["cpu"] and len(result.comparisons) == 1
    d = result.first_difference
    assert (d.a, d.b, d.step, d.field) == ("cpu", "reference", drift.BROKEN_STEP, "reward")
    assert (d.env, d.agent, d.element, d.fields) == (drift.BROKEN_ENV, drift.BROKEN_AGENT, (), ("reward",))
    assert d.value_b == pytest.approx(d.value_a + 1.0)
    assert result.comparisons[0].differing_steps == [drift.BROKEN_STEP]
    assert str(d) in str(caught.value)


def test_floats_agree_within_the_tolerance(replay):
    result = check_env(DRIFT, STEPS, reference=drift.reference_step, atol=0.3)  # the bump is 0.25
    assert result.ok and result.first_difference is None
    assert str(result).endswith("OK: every run agrees")


def test_ints_and_bools_are_exact_and_nan_equals_nan():
    nan = float("nan")
    got = torch.tensor([1.0, nan, nan, 2.0])
    assert MODULE._mismatch(got, torch.tensor([1.0 + 1e-7, nan, 0.0, 2.1]), 1e-5, 1e-5).tolist() == \
        [False, False, True, True]
    assert MODULE._mismatch(torch.tensor([3, 4]), torch.tensor([3, 5]), 1e-5, 10.0).tolist() == [False, True]
    assert MODULE._mismatch(torch.tensor([True]), torch.tensor([False]), 1e-5, 1.0).tolist() == [True]


def test_a_reference_that_breaks_its_contract_is_refused(replay):
    def run(reference):
        return check_env(DRIFT, STEPS, backends=("cpu",), reference=reference)

    with pytest.raises(ValueError, match="returned 'speed', which is no"):
        run(lambda s, a, p: {"speed": s["pos"]})
    with pytest.raises(ValueError, match=r"reference's 'reward' has shape \(2,\), the state field \(2, 3\)"):
        run(lambda s, a, p: {"reward": s["reward"][:, 0]})
    with pytest.raises(TypeError, match="must return a dict"):
        run(lambda s, a, p: [s["pos"]])
    with pytest.raises(RuntimeError, match="the reference raised at step 1 .from cpu's state.: KeyError"):
        run(lambda s, a, p: s["speed"])


def test_a_failed_backend_fails_the_check():
    result = check_env(DRIFT, STEPS, backends=("cpu", "cudasim"), timeout=0.01, raise_on_difference=False)
    assert [(r.status, r.message) for r in result.backends.values()] == [("failed", "timed out after 0.01 s")] * 2
    assert result.problems()[:2] == ["cpu failed: timed out after 0.01 s", "cudasim failed: timed out after 0.01 s"]
    assert not result.ok


def test_parameters_every_backend_refuses_are_bad_input(monkeypatch):
    refused = {"status": "failed", "stage": "build", "error_type": "ValueError",
               "message": "ValueError: TagEnv: too many", "error": "TagEnv: too many"}
    monkeypatch.setattr(MODULE, "_run_backends", lambda *args: {
        "cpu": (refused, 1.0), "cudasim": (refused, 1.0), "cuda": ({"status": "skipped", "message": "x"}, 1.0)})
    with pytest.raises(ValueError, match="^TagEnv: too many$"):
        check_env(DRIFT, STEPS)


@pytest.mark.parametrize("target, kwargs, error, match", [
    ("inconsistent_env.DriftEnv", {}, ValueError, "expected 'module:Class'"),
    ("inconsistent_env:DriftEnv:x", {}, ValueError, "expected 'module:Class'"),
    ("inconsistent_env:NoSuchEnv", {}, ValueError, "has no 'NoSuchEnv'"),
    ("no_such_module_here:Env", {}, ImportError, "cannot import module 'no_such_module_here'"),
    ("torchrl_warp.params:Param", {}, TypeError, "not a WarpEnv subclass"),
    ("inconsistent_env:reference_step", {}, TypeError, "not a WarpEnv subclass"),
    (DRIFT, {"steps": 0}, ValueError, "steps must be an int >= 1"),
    (DRIFT, {"steps": 2.5}, ValueError, "steps must be an int >= 1"),
    (DRIFT, {"num_envs": 0}, ValueError, "num_envs must be an int >= 1"),
    (DRIFT, {"no_such_param": 1}, TypeError, "unknown parameter"),
    (DRIFT, {"max_steps": 0}, ValueError, "max_steps"),
    (DRIFT, {"device": "cuda"}, TypeError, "device is set by check_env itself"),
    (DRIFT, {"seed": None}, ValueError, "seed must be an int"),
    (DRIFT, {"backends": ("cpu", "gpu")}, ValueError, "backends must be distinct names among cpu, cudasim, cuda"),
    (DRIFT, {"backends": ("cpu",)}, ValueError, "two backends or more, or a reference"),
    (DRIFT, {"reference": "reference_step"}, ValueError, "expected 'module:function'"),
    (DRIFT, {"reference": "inconsistent_env:BUMP"}, TypeError, "not callable"),
    (DRIFT, {"rtol": -1.0}, ValueError, "rtol must be a finite number >= 0"),
])
def test_bad_input_is_refused_before_anything_runs(no_runs, target, kwargs, error, match):
    with pytest.raises(error, match=match):
        check_env(target, **kwargs)


def test_a_class_must_be_importable_by_path(no_runs):
    class Local(drift.DriftEnv):
        pass

    with pytest.raises(ValueError, match="must be importable by each backend's process"):
        check_env(Local)
    with pytest.raises(ValueError, match="two backends or more"):  # an importable class is fine
        check_env(drift.DriftEnv, backends=("cpu",))


@pytest.fixture
def walkers(tmp_path, monkeypatch):
    """The example of docs/writing_an_env.md as the module ``walkers``, as the docs save it."""
    from test_docs_example import DOC, first_python_block

    (tmp_path / "walkers.py").write_text(first_python_block(DOC.read_text()))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "walkers:WalkersEnv"
    sys.modules.pop("walkers", None)


def test_a_correct_env_passes_on_the_cpu_and_the_simulator(walkers):
    """The docs' WalkersEnv, whose module steps an env when imported (under the simulator too)."""
    result = check_env(walkers, 8, backends=("cpu", "cudasim"), max_steps=4, timeout=600)
    assert result.ok and result.problems() == [] and result.notes() == []
    assert [r.status for r in result.backends.values()] == ["ok", "ok"]
    assert result.backends["cpu"].episode_ends == 2 * 2  # each env's time limit, twice
    assert result.comparisons[0].states == 2 * 8 + 1  # the first reset, each step and each reset after it
    assert "cpu vs cudasim: the same over 17 states" in str(result)


def test_the_command_line(replay, tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main([DRIFT, "--steps", str(STEPS), "--backends", "cpu", "--reference", "inconsistent_env:broken_reference",
              "--json", str(tmp_path / "r.json")])
    assert caught.value.code == 1
    out = capsys.readouterr().out
    assert "FAILED: cpu and the reference differ after step 2 (from cpu's state before it): reward[env 0, agent 1]" \
        in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] is False and report["comparisons"][0]["first"]["step"] == 2
    main([DRIFT, "--steps", str(STEPS), "--param", "max_steps=4", "--atol", "0.3"])  # passes: no SystemExit
    assert "OK: every run agrees" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["DriftEnv"], "expected 'module:Class'"),
    ([DRIFT, "--param", "max_steps"], "--param takes NAME=VALUE, got 'max_steps'"),
    ([DRIFT, "--param", "no_such_param=1"], "unknown parameter"),
    ([DRIFT, "--steps", "0"], "steps must be an int >= 1"),
])
def test_the_command_line_refuses_bad_input(no_runs, capsys, argv, match):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2 and match in capsys.readouterr().err


def test_the_command_line_help_shows_the_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for option, default in [("--steps STEPS", 20), ("--num-envs NUM_ENVS", 2), ("--seed SEED", 0),
                            ("--rtol RTOL", 1e-05)]:
        line = next(line for line in out.splitlines() if line.lstrip().startswith(option))
        assert line.endswith(f"(default: {default})"), line
    assert "(cuda is skipped without a GPU) (default: ['cpu', 'cudasim', 'cuda'])" in out


@pytest.mark.gpu
@pytest.mark.parametrize("target, params", [
    ("torchrl_warp.envs:CartPoleEnv", {"max_steps": 10}),
    ("torchrl_warp.envs:TagEnv", {"num_taggers": 2, "num_runners": 5, "num_other_agents_observed": 2,
                                  "episode_length": 10}),
])
def test_the_cuda_leg(target, params):
    result = check_env(target, 30, num_envs=8, backends=("cpu", "cuda"), **params)
    assert result.ok and result.backends["cuda"].status == "ok" and result.backends["cuda"].episode_ends > 0


# ----- the bounds-checked CPU run (issue 40, item 7) -------------------------------------
@numba.njit
def short_start(env, agent, pos, observation):
    pos[env, agent, 0] = agent
    observation[env, agent, 0] = pos[env, agent, 0]
    observation[env, agent, 1] = 0.0


@numba.njit
def short_observe(env, agent, action, pos, observation, reward, step_count, done, terminated, truncated, max_steps):
    pos[env, agent, 0] += 0.1 * (action[env, agent] - 1)
    for i in range(3):  # three entries into an observation declared with two
        observation[env, agent, i] = pos[env, agent, 0] + i
    reward[env, agent] = pos[env, agent, 0]
    if agent == 0:
        truncated[env] = step_count[env] >= max_steps
        done[env] = truncated[env]


class ShortObservationEnv(WarpEnv):
    """Writes a third observation entry past its ``observation_shape=(2,)``: the CPU backend
    lets it through (into the next agent's row, or past the buffer), the simulator raises
    numpy's bare ``IndexError``."""

    parameters = {"num_walkers": Param(2, "agents", ge=1), "max_steps": Param(3, "truncated after", ge=1)}

    def _layout(self, p):
        return Layout(groups={"walkers": p.num_walkers}, observation_shape=(2,), action_spec=Categorical(3),
                      fields=[Field("pos", (2,), per_agent=True)], reset=(short_start,), step=(short_observe,))


SHORT_MESSAGE = (r"ShortObservationEnv: the step kernel's phase short_observe \(phase 1 of 1\), at env 0, agent 0, "
                 r"wrote observation\[0, 0, 2\], outside observation's shape \(2, 2, 2\) \(declared as "
                 r"\[num_envs, num_agents\] \+ \(2,\) \(the Layout's observation_shape\)\): index 2 is out of "
                 r"bounds for axis 2 with size 2")


def test_the_cpu_backend_lets_an_out_of_bounds_write_through_and_the_checked_one_names_it():
    env = ShortObservationEnv(num_envs=2, backend="cpu")
    env.step(env.rand_action(env.reset()))  # silently
    checked = ShortObservationEnv(num_envs=2, backend="cpu_checked")
    assert checked.backend == "cpu_checked"
    td = checked.reset()  # the reset writes inside its fields
    with pytest.raises(IndexError, match="^" + SHORT_MESSAGE + "$"):
        checked.step(checked.rand_action(td))


def test_the_checked_backend_runs_a_correct_env_as_the_cpu_does():
    runs = []
    for backend in ("cpu", "cpu_checked"):
        env = drift.DriftEnv(num_envs=2, backend=backend, seed=4)
        torch.manual_seed(0)
        runs.append(env.rollout(6, break_when_any_done=False))  # an automatic reset at step 4
    for key in runs[0].keys(True, True):
        torch.testing.assert_close(runs[1][key], runs[0][key], msg=str(key))


def test_check_env_names_the_field_and_the_phase_an_out_of_bounds_write_hits():
    result = check_env("test_check_env:ShortObservationEnv", 4, backends=("cpu", "cudasim"),
                       raise_on_difference=False, timeout=600)
    cpu = result.backends["cpu"]
    assert cpu.status == "failed", cpu
    assert cpu.message.startswith("IndexError: the bounds-checked run (backend 'cpu_checked') found ")
    assert __import__("re").search(SHORT_MESSAGE, cpu.message), cpu.message
    assert result.problems()[0] == f"cpu failed: {cpu.message}"
    assert result.backends["cudasim"].status == "failed"  # numpy's IndexError, which names nothing
