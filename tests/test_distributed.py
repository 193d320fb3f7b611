"""The training recipe on several ranks (``torchrun``, gloo on this machine's CPU): the ranks'
gradients are averaged every step, so their parameters stay equal; rank 0 writes the run.

Both tests start 2 ranks with ``torchrun --standalone`` (a rendezvous on this machine only).
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import SIM
from test_marl_eval import the_run
from torchrl_warp.recipes.distributed import Ranks

pytestmark = pytest.mark.skipif(SIM, reason="gloo ranks on the CPU backend, not in the simulator")

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]

GRADIENTS = Path(__file__).with_name("distributed_gradients.py")


def test_ranks_come_from_torchruns_variables():
    assert Ranks.from_environment({}) == Ranks(0, 1, 0)
    ranks = Ranks.from_environment({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (ranks.rank, ranks.world, ranks.local_rank, ranks.is_main, ranks.distributed) == (3, 4, 1, False, True)
    with pytest.raises(ValueError, match="WORLD_SIZE must be >= 1, got 0"):
        Ranks.from_environment({"WORLD_SIZE": "0"})


def test_each_step_averages_the_ranks_gradients(tmp_path):
    """Each rank's gradient after the all-reduce is the mean of what one process computes
    on each rank's minibatch; the ranks' parameter check tells equal from perturbed."""
    proc = subprocess.run([*TORCHRUN, str(GRADIENTS), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, theirs = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert ours["agree"] and theirs["agree"] and ours["disagree"] and theirs["disagree"]
    differs = False
    for mine, other, alone0, alone1 in zip(ours["averaged"], theirs["averaged"], *ours["alone"].values()):
        assert torch.equal(mine, other)
        torch.testing.assert_close(mine, (alone0 + alone1) / 2, rtol=1e-6, atol=1e-7)
        differs |= not torch.equal(alone0, alone1)
    assert differs  # the ranks' minibatches differ: the mean is not either rank's own gradient


TINY = ["device=cpu", "env.num_envs=4", "env.steps_per_batch=16", "algo.minibatch_size=32", "algo.epochs=2",
        "eval_envs=4", "video=false"]


def test_two_ranks_train_cartpole_together_and_one_resumes(tmp_path):
    proc = subprocess.run([*TORCHRUN, "-m", "torchrl_warp.recipes.train", f"hydra.run.dir={tmp_path}", *TINY,
                           "env.total_frames=500"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["ranks_agree"] is True
    assert summary["frames"] == 512  # 500 rounded up to whole batches of 2 ranks x 4 envs x 16 steps
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["frames"] == 512
    assert "2 ranks (torchrun): 4 envs each" in (tmp_path / "train.log").read_text()
    # the 2-rank checkpoint, resumed by one process
    resumed = tmp_path / "resumed"
    proc = subprocess.run([sys.executable, "-m", "torchrl_warp.recipes.train", f"hydra.run.dir={resumed}", *TINY,
                           "env.total_frames=1024", f"resume={tmp_path / 'checkpoint.pt'}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((resumed / "summary.json").read_text())
    assert (summary["frames"], summary["frames_this_run"]) == (1024, 512) and "ranks" not in summary


def test_rank_zero_alone_makes_the_run_directory(tmp_path):
    """A run directory that would differ per rank (here it names the rank) is rank 0's alone:
    the other ranks make none and write nothing (``Ranks.hydra_overrides``)."""
    proc = subprocess.run([*TORCHRUN, "-m", "torchrl_warp.recipes.train", *TINY, "env.total_frames=128",
                           "hydra.run.dir=outputs/rank${oc.env:RANK}"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["rank0"]
    assert {".hydra", "summary.json", "train.log"} <= {p.name for p in (tmp_path / "outputs" / "rank0").iterdir()}


#: the replay families at tiny sizes: 2 batches of 2 ranks x 4 envs x 10 steps, a gradient step per
#: 10 of a rank's frames, an evaluation every 80 frames
TINY_REPLAY = ["device=cpu", "env.num_envs=4", "env.steps_per_batch=10", "algo.hidden=[16,16]",
               "algo.minibatch_size=20", "algo.frames_per_gradient_step=10", "algo.buffer_size=1000", "eval_envs=4",
               "eval_interval_frames=80", "video=false"]


@pytest.mark.parametrize("algo, env", [("sac", "pendulum"), ("dqn", "cartpole")])
def test_two_ranks_train_a_replay_family_together_and_resume_with_its_buffer(tmp_path, algo, env):
    """Each rank collects into its own buffer and takes its gradient steps with the others
    (averaged), rank 0 evaluates between batches while the others wait, and a 2-rank resume
    refills every rank's buffer from the checkpoint's (rank 0's)."""
    import csv

    def torchrun(run_dir, *extra):
        proc = subprocess.run([*TORCHRUN, "-m", "torchrl_warp.recipes.train", f"hydra.run.dir={run_dir}",
                               f"env={env}", f"algo={algo}", *TINY_REPLAY, *extra],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads((run_dir / "summary.json").read_text())

    summary = torchrun(tmp_path / "a", "env.total_frames=160")
    assert summary["ranks"] == 2 and summary["ranks_agree"] is True
    assert (summary["frames"], summary["gradient_steps"]) == (160, 8)  # each rank: 80 frames, a step per 10
    steps = the_run(tmp_path / "a" / "marl_eval.json", "torchrl_warp", env, algo)
    assert [steps[f"step_{k}"]["step_count"] for k in range(2)] == [80, 160]
    resumed = torchrun(tmp_path / "b", "env.total_frames=320", f"resume={tmp_path / 'a' / 'checkpoint.pt'}")
    assert resumed["ranks_agree"] is True and (resumed["frames"], resumed["gradient_steps"]) == (320, 8)
    with open(tmp_path / "b" / "train" / "scalars" / "buffer_frames.csv") as f:
        assert [float(row[1]) for row in csv.reader(f) if row] == [120.0, 160.0]  # 80 refilled, then 40 a batch
