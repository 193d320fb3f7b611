"""The benchmark CLI, the action distribution and the recipe's episode tracker."""
import json
import math

import pytest
import torch
from tensordict import TensorDict

from conftest import SIM
from torchrl_warp.distributions import MultiCategoricalLogits

pytestmark = pytest.mark.skipif(SIM, reason="CPU-backend tools")


def test_bench_cli_measures_every_mode(tmp_path):
    from torchrl_warp.bench import main

    out = tmp_path / "bench.json"
    rows = main(["--env", "tag", "--num-envs", "3", "--agents", "2+3", "--k", "2", "--steps", "3",
                 "--repeats", "1", "--mode", "step", "step_and_maybe_reset", "collector", "graphed", "graphed_copied",
                 "graphed_in_place", "--json", str(out)])
    assert [r["mode"] for r in rows] == ["step", "step_and_maybe_reset", "collector", "graphed", "graphed_copied",
                                         "graphed_in_place"]
    for r in rows:
        assert r["env_steps_per_s"] > 0 and r["agent_steps_per_s"] == pytest.approx(5 * r["env_steps_per_s"])
    saved = json.loads(out.read_text())
    assert saved["results"] == rows and saved["meta"]["torch"] == torch.__version__
    assert not any(r["egocentric"] for r in rows)


def test_bench_help_shows_defaults_before_importing_torch():
    """``--help`` answers from the standard library: no torch, TorchRL or Numba import (seconds)."""
    import subprocess
    import sys

    code = ("import sys\nfrom torchrl_warp import bench\ntry:\n    bench.main(['--help'])\nexcept SystemExit:\n"
            "    pass\nprint(sorted({'torch', 'torchrl', 'numba', 'tensordict'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[]"), proc.stdout[-300:]
    assert "--num-envs" in proc.stdout and "(default: [64])" in proc.stdout and "simple_spread" in proc.stdout


def test_bench_cli_egocentric_and_search_are_tag_options(capsys):
    from torchrl_warp.bench import main

    rows = main(["--env", "tag", "--num-envs", "2", "--agents", "2+3", "--k", "2", "--steps", "2",
                 "--repeats", "1", "--mode", "step", "--egocentric", "--search", "grid", "scan"])
    assert [r["search"] for r in rows] == ["grid", "scan"] and rows[0]["egocentric"]
    for option in (["--egocentric"], ["--search", "scan"]):
        with pytest.raises(SystemExit):
            main(["--env", "cartpole", *option])
        assert "--egocentric and --search are Tag options" in capsys.readouterr().err


def test_bench_times_the_step_kernel_phase_by_phase_and_restores_the_state(tmp_path):
    from torchrl_warp.bench import main, make_env, phase_name, phase_seconds

    env = make_env("tag", 3, "cpu", "2+3", 2)
    env.reset()
    before = env.state.clone()
    rows = phase_seconds(env, steps=2, repeats=1)
    assert [name for name, _ in rows] == [phase_name(p) for p in env.layout.step]
    assert all(sec > 0 for _, sec in rows)
    assert (env.state.exclude("action") == before.exclude("action")).all()  # only the actions were drawn
    out = tmp_path / "phases.json"
    main(["--env", "tag", "--num-envs", "3", "--agents", "2+3", "--k", "2", "--steps", "2", "--repeats", "1",
          "--phases", "--json", str(out)])
    assert len(json.loads(out.read_text())["results"]) == len(rows)


@pytest.mark.parametrize("nvec", [(5, 2), (4, 4)], ids=["unequal", "equal"])  # two code paths
def test_multicategorical_logits_matches_independent_categoricals(nvec):
    n0 = nvec[0]
    logits = torch.randn(4, 3, sum(nvec))
    dist = MultiCategoricalLogits(logits, nvec=nvec)
    a = dist.sample((6,))
    assert a.shape == (6, 4, 3, 2) and a[..., 0].max() < nvec[0] and a[..., 1].max() < nvec[1]
    first = torch.distributions.Categorical(logits=logits[..., :n0])
    second = torch.distributions.Categorical(logits=logits[..., n0:])
    torch.testing.assert_close(dist.log_prob(a), first.log_prob(a[..., 0]) + second.log_prob(a[..., 1]))
    torch.testing.assert_close(dist.entropy(), first.entropy() + second.entropy())
    assert torch.equal(dist.mode, torch.stack([logits[..., :n0].argmax(-1), logits[..., n0:].argmax(-1)], -1))
    # sampling follows the probabilities (Gumbel-max): frequencies of 200k draws of one agent
    draws = MultiCategoricalLogits(logits[0, 0], nvec=nvec).sample((200_000,))
    for dim, d in enumerate((first, second)):
        freq = torch.bincount(draws[:, dim], minlength=nvec[dim]).float() / draws.shape[0]
        torch.testing.assert_close(freq, d.probs[0, 0], atol=0.005, rtol=0)
    # log_prob is differentiable (the PPO loss needs it); sampling is not
    logits.requires_grad_(True)
    MultiCategoricalLogits(logits, nvec=nvec).log_prob(a[0]).sum().backward()
    assert logits.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="expected sum\\(nvec\\)=7"):
        MultiCategoricalLogits(torch.zeros(2, 6), nvec=(5, 2))


def test_episode_tracker_sums_rewards_across_batches():
    from torchrl_warp.recipes.metrics import EpisodeTracker

    tracker = EpisodeTracker(["taggers"], num_envs=2, device="cpu")
    reward = torch.tensor([[1.0, 2.0, 3.0], [10.0, 10.0, 10.0]]).reshape(2, 3, 1, 1).expand(2, 3, 2, 1)
    done = torch.tensor([[False, False, False], [False, True, False]]).unsqueeze(-1)
    batch = TensorDict({"next": {"done": done, "taggers": {"reward": reward}}}, batch_size=[2, 3])
    tracker.update(batch)
    assert tracker.summary() == {"return/taggers": 20.0, "episodes": 1}  # env 1: 10 + 10
    done2 = torch.tensor([[True, False, False], [False, False, False]]).unsqueeze(-1)
    tracker.update(TensorDict({"next": {"done": done2, "taggers": {"reward": reward}}}, batch_size=[2, 3]))
    assert tracker.summary() == {"return/taggers": 7.0, "episodes": 1}  # env 0: 1+2+3 carried over, +1
    out = tracker.summary()
    assert math.isnan(out["return/taggers"]) and out["episodes"] == 0


@pytest.mark.parametrize("mode, copies, cloned", [("graphed", True, False), ("graphed_copied", True, True),
                                                   ("graphed_in_place", False, False)])
def test_the_graphed_modes_differ_in_whether_batches_are_copied_out(monkeypatch, mode, copies, cloned):
    from torchrl_warp import graphed_collector
    from torchrl_warp.bench import make_env, measure

    made, own = [], []
    original = graphed_collector.GraphedCollector.__init__
    original_shutdown = graphed_collector.GraphedCollector.shutdown

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self.copy_batches)

    def shutdown(self):  # whether batches came from the graph whose batches are copied out
        own.append(bool(self._own))
        original_shutdown(self)

    monkeypatch.setattr(graphed_collector.GraphedCollector, "__init__", recording)
    monkeypatch.setattr(graphed_collector.GraphedCollector, "shutdown", shutdown)
    assert measure(make_env("cartpole", 4, "cpu"), mode, steps=3, repeats=1) > 0
    assert made == [copies] and own == [cloned]
