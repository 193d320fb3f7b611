"""The training recipe: a smoke run through the real CLI, resume, config checking."""
import csv
import glob
import json
import math
import os
import re
import subprocess
import time
import sys

import pytest
import torch

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="training runs on the CPU backend, not in the simulator")


def run_train(tmp_path, *overrides):
    cmd = [sys.executable, "-m", "torchrl_warp.recipes.train", f"hydra.run.dir={tmp_path}", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return proc


def small_tag(num_envs=4, **params):
    """Tag with 2 taggers and 5 runners, each observing 2 others, on the CPU backend."""
    from torchrl_warp.envs import TagEnv

    return TagEnv(num_envs=num_envs, num_taggers=2, num_runners=5, num_other_agents_observed=2, seed=0, **params)


def read_csv_scalars(run_dir):
    scalars = {}
    for path in glob.glob(os.path.join(run_dir, "train", "scalars", "**", "*.csv"), recursive=True):
        name = os.path.relpath(path, os.path.join(run_dir, "train", "scalars"))[:-4]
        with open(path) as f:
            scalars[name] = [float(row[1]) for row in csv.reader(f) if row]
    return scalars


@pytest.mark.parametrize(
    "overrides, groups",
    [
        # algo.cudagraph_update is for CUDA: on the CPU the steps run eagerly
        (["env.num_envs=64", "env.steps_per_batch=16", "env.total_frames=2048", "eval_envs=8",
          "algo.cudagraph_update=true"], ["agent"]),
        (["env=tag", "algo=mappo", "env.num_envs=4", "env.steps_per_batch=10", "env.total_frames=80",
          "env.params.num_taggers=2", "env.params.num_runners=4", "+env.params.num_other_agents_observed=2",
          "env.params.episode_length=10", "algo.hidden=[16,16]", "algo.minibatch_size=20", "eval_envs=4"],
         ["taggers", "runners"]),
        (["env=tag", "algo=ippo", "env.params.egocentric_observation=false", "env.num_envs=4",
          "env.steps_per_batch=10", "env.total_frames=80", "env.params.num_taggers=2", "env.params.num_runners=4",
          "+env.params.num_other_agents_observed=2", "env.params.episode_length=10", "algo.hidden=[16,16]",
          "algo.minibatch_size=20", "eval_envs=4"],
         ["taggers", "runners"]),
        (["env=tag_gridworld", "algo=mappo", "env.num_envs=4", "env.steps_per_batch=10", "env.total_frames=80",
          "env.params.num_taggers=3", "env.params.grid_length=4", "env.params.episode_length=10",
          "algo.hidden=[16,16]", "algo.minibatch_size=20", "eval_envs=4"],
         ["taggers", "runners"]),
    ],
    ids=["cartpole_ppo", "tag_mappo", "tag_ippo_warpdrive_observation", "tag_gridworld_mappo"],
)
def test_smoke_run_writes_checkpoint_csv_and_finite_losses(tmp_path, overrides, groups):
    proc = run_train(tmp_path, "checkpoint_every=1", "profile_iteration=2", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "missing transforms required by the policy" not in proc.stderr
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert set(ckpt) == {"format", "agents", "optimizer", "frames", "iteration", "config"}
    assert ckpt["frames"] > 0 and ckpt["optimizer"]["state"]
    scalars = read_csv_scalars(tmp_path)
    for g in groups:
        for loss in ("loss_objective", "loss_critic"):
            values = scalars[f"{loss}/{g}"]
            assert values and all(math.isfinite(v) for v in values), (loss, g, values)
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
    assert "aten::" in (tmp_path / "profile.txt").read_text()  # iteration 2 was profiled
    assert len(scalars["time/update_s"]) == len(scalars["iteration"]) and min(scalars["time/update_s"]) > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["frames"] == ckpt["frames"]
    assert all(math.isfinite(summary[f"eval_return/{g}"]) for g in groups)
    parts = [summary[k] for k in ("imports_seconds", "setup_seconds", "train_seconds", "eval_seconds")]
    assert min(parts) > 0 and sum(parts) <= summary["wall_seconds_since_launch"]  # where the time went
    if "env=tag_gridworld" in overrides:  # trained and random taggers were measured
        for name in ("eval_tag_rate", "eval_tag_rate_random_taggers"):
            assert 0 <= summary[name] <= 1
        for name in ("eval_steps_to_tag", "eval_steps_to_tag_random_taggers"):
            assert 1 <= summary[name] <= 10
    elif "taggers" in groups:  # the scripted yardsticks were measured against the trained agents
        for name in ("random_taggers", "chasing_taggers", "vs_fleeing_runners"):
            assert summary[f"eval_tags_per_episode_{name}"] >= 0


def test_resume_continues_from_the_checkpoint(tmp_path):
    # 500 frames: rounded up to 2 whole batches of 32 x 8, and said so
    first = run_train(tmp_path / "a", "env.num_envs=32", "env.steps_per_batch=8", "env.total_frames=500", "eval_envs=4")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "env.total_frames=500 rounded up to 512" in first.stdout + first.stderr
    log = (tmp_path / "a" / "train.log").read_text()  # the run's own messages, not numba's driver lines
    assert f"run directory: {tmp_path / 'a'}" in log and "add pending dealloc" not in log
    bar = [line for line in first.stderr.replace("\r", "\n").splitlines() if "frames/s" in line]
    assert bar and bar[-1].startswith("100%|") and " 512/512 " in bar[-1]  # the bar ends at its total
    ckpt = tmp_path / "a" / "checkpoint.pt"
    second = run_train(tmp_path / "b", "env.num_envs=32", "env.steps_per_batch=8", "env.total_frames=1024",
                       "eval_envs=4", f"resume={ckpt}")
    assert second.returncode == 0, second.stderr[-3000:]
    before = torch.load(ckpt, weights_only=True)
    after = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert before["frames"] == 512 and after["frames"] == 1024
    assert after["iteration"] == before["iteration"] + 2
    # ppo anneals the lr linearly over env.total_frames, from the frames already done
    lr = 5e-4
    assert read_csv_scalars(tmp_path / "a")["lr"] == pytest.approx([lr, lr / 2])
    assert read_csv_scalars(tmp_path / "b")["lr"] == pytest.approx([lr / 2, lr / 4])
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["frames"] == 1024 and summary["frames_this_run"] == 512  # figures count this process's frames
    # a finished run resumed with the same total collects nothing and says so
    third = run_train(tmp_path / "c", "env.num_envs=32", "env.steps_per_batch=8", "env.total_frames=1024",
                      "eval_envs=4", f"resume={tmp_path / 'b' / 'checkpoint.pt'}")
    assert third.returncode == 0, third.stderr[-3000:]
    assert "nothing to do" in third.stdout + third.stderr and "trained 1024 of 1024 frames" in third.stdout + third.stderr
    assert not (tmp_path / "c" / "checkpoint.pt").exists()


@pytest.mark.parametrize(
    "override, message",
    [
        ("algo.learning_rate=0.1", "learning_rate"),
        ("env.num_envs=many", "num_envs"),
        ("+env.params.num_runner=3", "unknown parameter(s) 'num_runner'"),
        ("algo=mappo", "algo=mappo does not fit env=cartpole"),
        ("algo.matmul_precision=hihg", "Invalid value 'hihg', expected one of [highest, high, medium]"),
        ("algo.reward_scale=0", "algo.reward_scale must be in (0, inf), got 0.0"),
    ],
)
def test_bad_config_fails_loudly(tmp_path, override, message):
    proc = run_train(tmp_path, override, "env.total_frames=64", "env.num_envs=8")
    assert proc.returncode != 0
    assert message in proc.stderr
    log = tmp_path / "train.log"  # a run that started says in its directory why it failed
    assert not log.exists() or ("run failed" in log.read_text() and message in log.read_text())


def test_obs_norm_standardizes_inside_the_networks():
    from omegaconf import OmegaConf

    from torchrl_warp.recipes.config import AlgoConfig
    from torchrl_warp.recipes.on_policy import GroupAgent
    from torchrl_warp.recipes.common import Standardize, observation_stats

    env = small_tag()
    loc, scale = observation_stats(env, ["taggers", "runners"], steps=5)
    dim = env.layout.observation_shape[-1]
    assert loc.shape == scale.shape == (dim,) and (scale > 0).all()
    # each neighbour's "in the game" flag is 1 all along a short rollout: scale 1, not ~0
    flag = 6 + 6  # own features, then the first neighbour's 7th feature
    assert loc[flag] == 1.0 and scale[flag] == 1.0
    algo = OmegaConf.structured(AlgoConfig(name="mappo", hidden=[8]))
    agent = GroupAgent(env, "taggers", algo, torch.device("cpu"), obs_stats=(loc, scale))
    first = agent.actor.module[0].module[0]
    assert isinstance(first, Standardize)
    torch.testing.assert_close(first.inv_scale * scale, torch.ones_like(scale))
    td = env.reset()
    obs = td["taggers", "observation"]
    torch.testing.assert_close(first(obs), (obs - loc) / scale)
    assert any(name.endswith("inv_scale") for name in agent.state_dict())  # saved in checkpoints


def test_the_replay_buffer_gets_no_next_observations():
    from torchrl_warp.recipes.on_policy import without_next_observations

    env = small_tag(3)
    batch = env.rollout(4, break_when_any_done=False)
    kept = without_next_observations(batch, ["taggers", "runners"])
    dropped = set(batch.keys(True, True)) - set(kept.keys(True, True))
    assert dropped == {("next", "taggers", "observation"), ("next", "runners", "observation")}
    assert torch.equal(kept["next", "runners", "reward"], batch["next", "runners", "reward"])


@pytest.mark.parametrize("entropy_coeff", [0.01, 0.0])
@pytest.mark.parametrize("algo", ["ppo", "mappo", "ippo"])
def test_losses_without_functional_parameters_match_torchrl_defaults(algo, entropy_coeff):
    """The recipe's losses call the modules directly (``functional=False``, less host
    time), skip TorchRL's entropy finiteness check (a host sync, recipes/losses.py), and
    with ``entropy_coeff=0`` compute no entropy (TorchRL's default adds 0 x entropy); the
    losses and gradients are those of TorchRL's own classes and defaults."""
    from omegaconf import OmegaConf
    from tensordict.nn import TensorDictSequential
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

    from torchrl_warp.envs import CartPoleEnv
    from torchrl_warp.recipes.config import AlgoConfig
    from torchrl_warp.recipes.on_policy import GroupAgent

    torch.manual_seed(0)
    group = None if algo == "ppo" else "runners"
    env = CartPoleEnv(num_envs=4, seed=0) if algo == "ppo" else small_tag()
    cfg = OmegaConf.structured(AlgoConfig(name=algo, hidden=[8], entropy_coeff=entropy_coeff))
    agent = GroupAgent(env, group, cfg, torch.device("cpu"))
    policy = agent.actor if group is None else TensorDictSequential(
        agent.actor, GroupAgent(env, "taggers", cfg, torch.device("cpu")).actor)
    with torch.no_grad():
        batch = env.rollout(6, policy, break_when_any_done=False)
        agent.advantage(batch)
    ours = agent.loss
    assert not ours.functional
    torchrl_loss = {"ppo": ClipPPOLoss, "mappo": MAPPOLoss, "ippo": IPPOLoss}[algo]
    theirs = torchrl_loss(agent.actor, agent.critic, clip_epsilon=cfg.clip_epsilon, entropy_coeff=cfg.entropy_coeff,
                          critic_coeff=cfg.critic_coeff, normalize_advantage=True)
    assert theirs.functional and type(ours) is not type(theirs) and isinstance(ours, type(theirs))
    theirs.set_keys(**{k: getattr(ours.tensor_keys, k) for k in ("reward", "action", "sample_log_prob", "value",
                                                                 "advantage", "value_target", "done", "terminated")})
    params = list(agent.parameters())
    results = []
    for loss in (ours, theirs):
        out = loss(batch.reshape(-1))
        assert ("loss_entropy" in out.keys()) == (loss is theirs or entropy_coeff > 0)
        total = out["loss_objective"] + out["loss_critic"] + out.get("loss_entropy", 0.0)
        results.append((total.detach(), torch.autograd.grad(total, params, allow_unused=True)))
    torch.testing.assert_close(results[0], results[1])
    assert sum(g.abs().sum() for g in results[0][1] if g is not None) > 0


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_advantage_in_slices_of_envs_equals_one_pass(algo):
    from omegaconf import OmegaConf

    from torchrl_warp.recipes.config import AlgoConfig
    from torchrl_warp.recipes.on_policy import GroupAgent

    torch.manual_seed(0)
    env = small_tag(5, episode_length=4)
    agent = GroupAgent(env, "runners", OmegaConf.structured(AlgoConfig(name=algo, hidden=[8])), torch.device("cpu"))
    batch = env.rollout(9, break_when_any_done=False)  # [5 envs, 9 steps], episodes end inside
    whole, sliced = batch.clone(), batch.clone()
    agent.advantage(whole, chunk_floats=10**9)
    floats = agent.critic_floats_per_frame
    # 5 runners' observations, and one hidden row per runner or (MAPPO) for the group
    assert floats == 5 * env.layout.observation_shape[-1] + (1 if algo == "mappo" else 5) * 8
    agent.advantage(sliced, chunk_floats=2 * 9 * floats)  # two envs per slice: 2 + 2 + 1
    for k in (("runners", "advantage"), ("runners", "value_target"), ("runners", "state_value")):
        assert k in sliced.keys(True) and sliced[k].shape[:2] == (5, 9)
        torch.testing.assert_close(sliced[k], whole[k])
    assert whole["runners", "advantage"].abs().sum() > 0


@pytest.mark.parametrize("group", [None, "runners"])
def test_reward_scale_scales_the_rewards_gae_sees_and_nothing_else(group):
    from omegaconf import OmegaConf

    from torchrl_warp.envs import CartPoleEnv
    from torchrl_warp.recipes.config import AlgoConfig
    from torchrl_warp.recipes.on_policy import GroupAgent

    torch.manual_seed(0)
    if group is None:
        env, name = CartPoleEnv(num_envs=4, seed=0), "ppo"
    else:
        env, name = small_tag(episode_length=4), "mappo"
    scaled = GroupAgent(env, group, OmegaConf.structured(AlgoConfig(name=name, hidden=[8], reward_scale=0.01)),
                        torch.device("cpu"))
    plain = GroupAgent(env, group, OmegaConf.structured(AlgoConfig(name=name, hidden=[8])), torch.device("cpu"))
    plain.load_state_dict(scaled.state_dict())
    batch = env.rollout(9, break_when_any_done=False)
    reward = ("next", "reward") if group is None else ("next", group, "reward")
    assert batch[reward].abs().sum() > 0
    ours, by_hand = batch.clone(), batch.clone()
    by_hand[reward] = by_hand[reward] * 0.01
    scaled.advantage(ours)
    plain.advantage(by_hand)
    advantage = "advantage" if group is None else (group, "advantage")
    torch.testing.assert_close(ours[advantage], by_hand[advantage])
    torch.testing.assert_close(ours[reward], batch[reward])  # the batch keeps its rewards (logged returns)


def test_a_checkpoint_of_graphed_updates_resumes_on_the_cpu(tmp_path):
    """A GPU run with algo.cudagraph_update saves a fused, capturable Adam with a tensor lr;
    a CPU run takes its moments and keeps its own options (capturable fails on the CPU)."""
    args = ["env.num_envs=32", "env.steps_per_batch=8", "eval_envs=4"]
    first = run_train(tmp_path / "a", *args, "env.total_frames=512")
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    for group in ckpt["optimizer"]["param_groups"]:  # as the GPU run would have saved it
        group.update(fused=True, capturable=True, lr=torch.tensor(group["lr"]))
    torch.save(ckpt, tmp_path / "graphed.pt")
    second = run_train(tmp_path / "b", *args, "env.total_frames=1024", f"resume={tmp_path / 'graphed.pt'}")
    assert second.returncode == 0, second.stderr[-3000:]
    after = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert [g["capturable"] for g in after["optimizer"]["param_groups"]] == [False]
    assert isinstance(after["optimizer"]["param_groups"][0]["lr"], float)
    steps = [s["step"].item() for s in after["optimizer"]["state"].values()]
    assert steps == [2 * 2 * 8] * len(steps)  # the saved step counts went on: 2 runs x 2 batches x 8 epochs
    assert read_csv_scalars(tmp_path / "b")["lr"] == pytest.approx([5e-4 / 2, 5e-4 / 4])


def test_obs_norm_stats_come_back_with_a_resumed_run(tmp_path):
    args = ("env.num_envs=16", "env.steps_per_batch=8", "eval_envs=4", "algo.obs_norm=true")
    first = run_train(tmp_path / "a", *args, "env.total_frames=128")
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = tmp_path / "a" / "checkpoint.pt"
    # another seed: stats measured afresh would differ; the checkpoint's must win
    second = run_train(tmp_path / "b", *args, "env.total_frames=256", "seed=1", f"resume={ckpt}")
    assert second.returncode == 0, second.stderr[-3000:]
    before = torch.load(ckpt, weights_only=True)["agents"]
    after = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["agents"]
    stats = [k for k in before if k.endswith((".shift", ".inv_scale"))]
    assert {"agent.actor.module.0.module.0.shift", "agent.critic.module.0.inv_scale"} <= set(stats)
    for k in stats:
        assert torch.equal(before[k], after[k]), k


def test_scripted_chasers_and_fleeing_runners_move_the_tag_count():
    from torchrl_warp.envs import TagEnv
    from torchrl_warp.recipes.scripted import scripted_tags_per_episode

    def tags(taggers, runners):
        env = TagEnv(num_envs=16, num_taggers=3, num_runners=20, grid_length=10.0, episode_length=50, seed=0,
                     num_other_agents_observed=2)
        return scripted_tags_per_episode(env, taggers, runners)

    random = tags("random", "random")
    assert tags("chase", "random") > 1.5 * random
    assert tags("random", "flee") < 0.5 * random


def test_time_from_launch_counts_the_package_imports():
    """``wall_seconds_since_launch`` runs from the process's start (Linux), not from the
    recipe module's import: importing torch and TorchRL before it takes seconds."""
    from torchrl_warp.recipes import common

    since_import = time.perf_counter() - common._IMPORTED
    since_launch = common.seconds_since_launch()
    assert since_launch >= since_import
    if os.path.exists("/proc/self/stat"):  # pytest started well before it imported the recipe
        assert since_launch > since_import + 0.05


def test_minibatches_are_the_replay_buffers_gathered_in_place():
    """recipes.train.minibatches: TorchRL's ReplayBuffer(LazyTensorStorage, SamplerWithoutReplacement
    (drop_last=True)) over the flattened batch, minibatch for minibatch and draw for draw, read from
    a batch that is not contiguous (as GraphedCollector's views of its slabs are)."""
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement

    from torchrl_warp.recipes.on_policy import minibatches

    time_major = torch.randn(5, 6, 3, 2)
    batch = TensorDict({"x": time_major.transpose(0, 1), "g": TensorDict(
        {"y": torch.arange(30 * 3).reshape(5, 6, 3).transpose(0, 1)}, [6, 5, 3])}, [6, 5])
    buffer = ReplayBuffer(storage=LazyTensorStorage(30), sampler=SamplerWithoutReplacement(drop_last=True),
                          batch_size=7)
    buffer.extend(batch.reshape(-1))
    torch.manual_seed(0)
    theirs = [buffer.sample() for _ in range(3 * (30 // 7))]
    after_theirs = torch.rand(3)
    torch.manual_seed(0)
    ours = list(minibatches(batch, 7, epochs=3))
    assert torch.equal(torch.rand(3), after_theirs)  # the same random draws
    assert len(ours) == len(theirs) == 12
    for a, b in zip(ours, theirs):
        assert a.batch_size == b.batch_size == (7,)
        assert torch.equal(a["x"], b["x"]) and torch.equal(a["g", "y"], b["g", "y"])


def test_the_collection_policy_writes_actions_and_log_probs_only():
    """What the batch keeps of the policy: no distribution arguments (Tag's logits were 17% of a batch)."""
    from omegaconf import OmegaConf

    from torchrl_warp.recipes.on_policy import GroupAgent, collection_policy

    env = small_tag()
    algo = OmegaConf.create(dict(name="mappo", hidden=[8], reward_scale=1.0, clip_epsilon=0.2, entropy_coeff=0.01,
                                 critic_coeff=1.0, gamma=0.99, lmbda=0.95))
    actors = [GroupAgent(env, g, algo, "cpu").actor for g in env.layout.groups]
    td = env.reset()
    before = set(td.keys(True, True))
    written = set(collection_policy(actors)(td).keys(True, True)) - before
    assert written == {(g, k) for g in env.layout.groups for k in ("action", "action_log_prob")}


def test_the_time_limit_stops_within_a_gradient_step_and_says_so(tmp_path):
    """time_limit_s was checked between batches only: a 60 s limit on a CPU MPE run whose first
    batch took 48 s ended it, silently, at 94 s. Here one batch's update is 1200 gradient steps
    (~30 s on one CPU core); a 3 s limit stops it after the step that passes the limit."""
    limit = 3
    proc = run_train(tmp_path, "env.num_envs=16", "env.steps_per_batch=8", "env.total_frames=1280", "eval_envs=4",
                     "algo.minibatch_size=8", "algo.epochs=75", f"time_limit_s={limit}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (tmp_path / "train.log").read_text()
    stop = re.search(r"time limit of 3 s reached after ([\d.]+) s of training, at gradient step (\d+) of 1200 of "
                     r"iteration 1: stopping", log)
    assert stop and 1 <= int(stop[2]) < 1200 and limit <= float(stop[1]) < limit + 1, log
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["time_limit_reached"] is True and summary["frames"] == 128  # one batch, partly trained on
    assert limit <= summary["train_seconds"] < limit + 2
    assert read_csv_scalars(tmp_path)["time/update_s"][0] < limit + 1
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["frames"] == 128


def test_mpe_on_the_cpu_says_its_batch_is_a_gpus_and_a_first_batch_past_the_limit_is_said(tmp_path):
    """env=mpe's batch (4096 x 25 x 3 agent-steps) is a GPU's: on the CPU the run says so at launch,
    with a CPU size; a first batch that outlasts the limit is said to, then one step is taken."""
    proc = run_train(tmp_path, "env=mpe", "algo=mappo", "env.num_envs=1024", "env.total_frames=51200", "eval_envs=4",
                     "time_limit_s=0.01")  # 1024 x 25 x 3 = 76800 agent-steps a batch
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (tmp_path / "train.log").read_text()
    assert ("[WARNING] - a batch of env.num_envs=1024 x env.steps_per_batch=25 x 3 agents (76800 agent-steps) is "
            "sized for a GPU") in log and "for the CPU try env.num_envs=512 algo.minibatch_size=6400" in log, log
    assert "[WARNING] - time limit of 0.01 s passed while collecting the first batch" in log, log
    # mpe.yaml's minibatch of 12800: 2 gradient steps an epoch of a 25600-frame batch, 4 epochs
    assert re.search(r"at gradient step 1 of 8 of iteration 1: stopping", log), log
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 25600


NOISY_TRAIN = '''
import runpy, sys
from tensordict.utils import logger as tensordict_logger
from torchrl._utils import logger as torchrl_logger
from torchrl_warp.recipes import metrics

update = metrics.EpisodeTracker.update


def noisy_update(self, batch):  # what TorchRL 0.14's LazyTensorStorage and CudaGraphModule log, once a batch
    torchrl_logger.info("Initialized LazyTensorStorage with torch.Size([256]) shape")
    tensordict_logger.info("Registering CUDA graph...")
    return update(self, batch)


metrics.EpisodeTracker.update = noisy_update
sys.argv = ["train", *sys.argv[1:]]
runpy.run_module("torchrl_warp.recipes.train", run_name="__main__", alter_sys=True)
'''


def test_library_log_lines_print_above_the_progress_bar_without_colour_codes(tmp_path):
    """TorchRL's INFO lines (its own handler, in colour codes) printed into the progress bar's line;
    tensordict's too (on a GPU: "Registering CUDA graph..."). The recipe's run, its stdout and
    stderr as one stream (as a terminal shows them), with both libraries logging once a batch."""
    script = tmp_path / "noisy_train.py"
    script.write_text(NOISY_TRAIN)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(script), f"hydra.run.dir={run_dir}", "env.num_envs=32",
                           "env.steps_per_batch=8", "env.total_frames=768", "eval_envs=4"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "\x1b[" not in proc.stdout  # no raw colour codes
    for message in ("[torchrl][INFO] - Initialized LazyTensorStorage", "[tensordict][INFO] - Registering CUDA graph"):
        lines = [line for line in proc.stdout.split("\n") if message in line]
        assert len(lines) == 3, (message, proc.stdout[-3000:])  # one a batch
        # each on a line of its own: after the bar's line is cleared (\r), nothing of the bar before it
        assert all(line.split("\r")[-1].startswith("[20") for line in lines), lines
        assert (run_dir / "train.log").read_text().count(message) == 3  # and in the run's log
    bar = [line for line in proc.stdout.replace("\r", "\n").splitlines() if "frames/s" in line]
    assert bar and bar[-1].startswith("100%|") and " 768/768 " in bar[-1]
