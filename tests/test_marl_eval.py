"""Evaluations in marl-eval's JSON layout (recipes/marl_eval.py), as BenchMARL writes them:
every family's run writes ``marl_eval.json``, one ``step_<k>`` per evaluation
(``eval_interval_frames`` adds evaluations during training, kept off the training clocks), and
a resumed run continues its file.
"""
import json
import math

import pytest

from conftest import SIM
from test_off_policy import TINY_MPE, one_thread, run, scalars_of  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(SIM, reason="training runs on the CPU backend, not in the simulator")

TINY_CARTPOLE = ("env=cartpole", "algo=ppo", "device=cpu", "env.num_envs=4", "env.steps_per_batch=10",
                 "env.total_frames=80", "algo.hidden=[16,16]", "algo.minibatch_size=20", "algo.epochs=1",
                 "eval_envs=3", "checkpoint_every=1", "video=false")


def the_run(path, environment, task, algorithm, seed=0) -> dict:
    """The one run a ``marl_eval.json`` holds, checked to be filed under these names (shared with
    tests/test_distributed.py and tests/test_gpu_replay.py)."""
    with open(path) as f:
        data = json.load(f)
    assert list(data) == [environment] and list(data[environment]) == [task], list(data)
    assert list(data[environment][task]) == [algorithm]
    assert list(data[environment][task][algorithm]) == [f"seed_{seed}"]
    return data[environment][task][algorithm][f"seed_{seed}"]


def test_the_log_keeps_each_evaluation_and_each_metrics_best(tmp_path):
    from torchrl_warp.recipes.marl_eval import MarlEvalLog

    path = str(tmp_path / "marl_eval.json")
    log = MarlEvalLog(path, "vmas", "simple_tag", "maddpg", seed=3)
    log.add(100, {"adversary": [1.0, 3.0], "agent": [-1.0, -5.0]})
    log.add(200, {"adversary": [2.0, 2.0], "agent": [0.0, -2.0]})
    run_data = the_run(path, "vmas", "simple_tag", "maddpg", seed=3)
    assert run_data["step_0"] == {"step_count": 100, "adversary_return": [1.0, 3.0], "agent_return": [-1.0, -5.0],
                                  "return": [0.0, -1.0]}  # the groups' mean, episode by episode
    assert run_data["step_1"]["step_count"] == 200 and run_data["step_1"]["return"] == [1.0, 0.0]
    assert run_data["absolute_metrics"] == {"adversary_return": [3.0], "agent_return": [0.0], "return": [1.0]}
    # a second log of the same run (a resumed one) appends
    MarlEvalLog(path, "vmas", "simple_tag", "maddpg", seed=3).add(300, {"adversary": [0.0, 0.0], "agent": [0.0, 0.0]})
    assert the_run(path, "vmas", "simple_tag", "maddpg", seed=3)["step_2"]["step_count"] == 300
    with pytest.raises(ValueError, match="one return per episode"):
        log.add(400, {"adversary": [0.0], "agent": [0.0, 1.0]})


def test_an_off_policy_run_evaluates_every_interval_and_resumes_its_file(tmp_path):
    summary = run(tmp_path / "a", "algo=masac", *TINY_MPE, "eval_interval_frames=40")
    run_data = the_run(tmp_path / "a" / "marl_eval.json", "vmas", "simple_spread", "masac")
    assert [run_data[f"step_{k}"]["step_count"] for k in range(2)] == [40, 80] and "step_2" not in run_data
    final = run_data["step_1"]
    assert len(final["agents_return"]) == 4 == len(final["return"])  # eval_envs=4: one episode each
    # the final evaluation is the summary's: its mean is eval_return/agents
    assert sum(final["agents_return"]) / 4 == pytest.approx(summary["eval_return/agents"], rel=1e-5)
    assert "episode_returns" not in summary
    scalars = scalars_of(tmp_path / "a")
    assert len(scalars["eval/eval_return/agents"]) == 1 and math.isfinite(scalars["eval/eval_gap_closed/agents"][0])
    resumed = run(tmp_path / "b", "algo=masac", *TINY_MPE, "env.total_frames=160", "eval_interval_frames=40",
                  "marl_eval_algorithm=masac_tiny", f"resume={tmp_path / 'a' / 'checkpoint.pt'}")
    assert resumed["frames"] == 160
    with open(tmp_path / "b" / "marl_eval.json") as f:
        data = json.load(f)["vmas"]["simple_spread"]
    assert data["masac"]["seed_0"] == run_data  # the first run's, carried over
    assert [data["masac_tiny"]["seed_0"][f"step_{k}"]["step_count"] for k in range(2)] == [120, 160]


def test_an_on_policy_run_writes_the_file_too(tmp_path):
    summary = run(tmp_path, *TINY_CARTPOLE, "eval_interval_frames=40", "seed=2")
    run_data = the_run(tmp_path / "marl_eval.json", "torchrl_warp", "cartpole", "ppo", seed=2)
    assert [run_data["step_0"]["step_count"], run_data["step_1"]["step_count"]] == [40, 80]
    assert len(run_data["step_1"]["agent_return"]) == 3
    assert sum(run_data["step_1"]["return"]) / 3 == pytest.approx(summary["eval_return/agent"], rel=1e-5)
    assert run_data["absolute_metrics"]["return"] == [max(run_data["step_0"]["return"] + run_data["step_1"]["return"])]


def test_an_evaluation_during_training_is_kept_off_its_clocks(tmp_path, monkeypatch):
    import time

    from torchrl_warp.recipes import common

    evaluate = common.evaluate

    def slow_evaluate(*args, **kwargs):
        time.sleep(3.0)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(common, "evaluate", slow_evaluate)
    summary = run(tmp_path, *TINY_CARTPOLE, "eval_interval_frames=40")
    scalars = scalars_of(tmp_path)
    # the second batch's collection (timed from the first update's end) and the training time
    # leave the 3 s evaluation between them out
    assert len(scalars["eval/eval_return/agent"]) == 1
    assert scalars["time/collect_s"][1] < 3.0, scalars["time/collect_s"]
    laps = sum(scalars["time/collect_s"]) + sum(scalars["time/update_s"])
    assert summary["train_seconds"] - laps < 1.5, (summary["train_seconds"], laps)
