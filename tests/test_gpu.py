"""GPU tests (marked ``gpu``; skipped without a CUDA device): the CUDA backend itself."""
import math

import pytest
import torch
from torchrl.collectors import Collector
from torchrl.envs.utils import check_env_specs

from group_envs import MoversEnv, SpeakersEnv
from policies import pre_drawn_policy
from torchrl_warp.envs import CartPoleEnv, MPEEnv, SimpleSpreadEnv, TagEnv

pytestmark = pytest.mark.gpu

STEPS = 100


def strict(fn):
    """Run ``fn`` with torch raising on any host-device synchronization."""
    def wrapped(*args, **kwargs):
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode(previous)

    return wrapped


ENVS = {  # short Tag episodes, so that 100-200 steps include resets
    "tag": lambda **kw: TagEnv(num_envs=32, episode_length=40, **kw),
    "tag_egocentric": lambda **kw: TagEnv(num_envs=32, episode_length=40, egocentric_observation=True, **kw),
    # k = 2: the scan (neighbor_search="auto"); with 7 agents 4 envs share a warp, whose
    # lanes count their own env's runners left (atomic_count)
    "tag_scan": lambda **kw: TagEnv(num_envs=32, episode_length=40, num_other_agents_observed=2, **kw),
    "tag_scan_small": lambda **kw: TagEnv(num_envs=64, num_taggers=2, num_runners=5, num_other_agents_observed=2,
                                          episode_length=40, **kw),
    "cartpole": lambda **kw: CartPoleEnv(num_envs=512, **kw),
    # MPE simple_spread, continuous (2 substeps: collision_force and integrate after the
    # first) and discrete (1 substep); 6-step episodes
    "simple_spread": lambda **kw: SimpleSpreadEnv(num_envs=64, n_agents=3, substeps=2, max_steps=6, **kw),
    "simple_spread_discrete": lambda **kw: SimpleSpreadEnv(num_envs=64, n_agents=4, continuous_actions=False,
                                                           max_steps=6, **kw),
    # the other MPE scenarios through MPEEnv: groups that differ, messages, world bounds,
    # obstacles, VMAS's action encodings
    "simple_tag": lambda **kw: MPEEnv("simple_tag", num_envs=64, max_steps=6, terminated_truncated=True, **kw),
    "simple_tag_10_20_discrete": lambda **kw: MPEEnv("simple_tag", num_envs=32, num_adversaries=10,
                                                     num_good_agents=20, continuous_actions=False, max_steps=6, **kw),
    "simple_world_comm": lambda **kw: MPEEnv("simple_world_comm", num_envs=64, max_steps=6, **kw),
    "simple_speaker_listener_one_hot": lambda **kw: MPEEnv("simple_speaker_listener", num_envs=64, max_steps=6,
                                                           continuous_actions=False, categorical_actions=False, **kw),
    "simple_crypto": lambda **kw: MPEEnv("simple_crypto", num_envs=64, max_steps=6, **kw),
    "simple_reference_multidiscrete": lambda **kw: MPEEnv("simple_reference", num_envs=64, max_steps=6,
                                                          continuous_actions=False, multidiscrete_actions=True, **kw),
    "simple_adversary": lambda **kw: MPEEnv("simple_adversary", num_envs=64, max_steps=6, **kw),
    "simple_push_discrete": lambda **kw: MPEEnv("simple_push", num_envs=64, max_steps=6, continuous_actions=False,
                                                **kw),
    "simple": lambda **kw: MPEEnv("simple", num_envs=64, max_steps=6, **kw),
    # groups that differ (tests/group_envs.py): continuous, and discrete (Categorical and
    # MultiCategorical); 5-step episodes
    "movers": lambda **kw: MoversEnv(num_envs=64, **kw),
    "speakers": lambda **kw: SpeakersEnv(num_envs=64, **kw),
}


#: envs whose contacts amplify the CUDA/CPU rounding difference (the GPU fuses multiply-adds)
#: past 1e-5 within an episode: simple_tag's 10 substeps of contact force 500, with 30 agents
#: crowded in [-1, 1]^2 (1.2e-5 measured on 20 of 3.4M observation entries)
STIFF = {"simple_tag_10_20_discrete": 1e-4}


def continuous(env):
    return any(env.full_action_spec[key].dtype.is_floating_point for key in env.action_keys)


@pytest.mark.parametrize("name", ENVS)
def test_specs_on_cuda(name):
    env = ENVS[name](device="cuda")
    assert env.backend == "cuda" and env.state.device.type == "cuda"
    check_env_specs(env)


@pytest.mark.parametrize("name", ENVS)
def test_rollout_without_host_sync(name):
    """200 steps of env.rollout (auto-resets included) with torch raising on any sync.

    The first reset runs outside: TorchRL's ``reset()`` checks the done flags on the
    host once. Every step, and every auto-reset after it, runs strict.
    """
    env = ENVS[name](device="cuda", check_actions=False)
    env.rollout(3, break_when_any_done=False)  # compile outside the strict region
    # TorchRL's Bounded.rand() clamps its draws behind `if (out > high).any()`, a sync of
    # the spec's, not the env's: continuous envs take pre-drawn actions (already on the GPU)
    policy = pre_drawn_policy(env, 200, device="cuda") if continuous(env) else None
    start = env.reset()
    torch.cuda.synchronize()
    td = strict(env.rollout)(200, policy=policy, auto_reset=False, tensordict=start, break_when_any_done=False)
    assert td.batch_size == (env.num_envs, 200)
    assert td["next", "done"].any()  # resets happened inside the strict region


@pytest.mark.parametrize("name", ENVS)
def test_collector_without_host_sync_in_the_env(name):
    """200 steps of a Collector; the env's own step, reset and auto-reset run strict."""
    env = ENVS[name](device="cuda", check_actions=False)
    env._step = strict(env._step)
    env._reset = strict(env._reset)
    env.maybe_reset = strict(env.maybe_reset)
    frames = env.num_envs * 100
    collector = Collector(env, policy=None, frames_per_batch=frames, total_frames=2 * frames,
                          device="cuda", no_cuda_sync=True)
    batches = [b for b in collector]
    collector.shutdown()
    assert len(batches) == 2 and batches[0].batch_size == (env.num_envs, 100)
    assert torch.cat([b["next", "done"] for b in batches]).any()


@pytest.mark.parametrize("name", ENVS)
def test_cpu_and_cuda_trajectories_agree(name):
    """Same seed, same actions: the CUDA and CPU backends agree for 100+ steps."""
    gpu, cpu = ENVS[name](device="cuda", seed=11), ENVS[name](device="cpu", seed=11)
    a = gpu.rollout(STEPS, policy=pre_drawn_policy(gpu, STEPS, device="cuda"), break_when_any_done=False).cpu()
    b = cpu.rollout(STEPS, policy=pre_drawn_policy(cpu, STEPS), break_when_any_done=False)
    assert b["next", "done"].any()  # the comparison spans resets
    for key in b.keys(True, True):
        x, y = a[key], b[key]
        if x.dtype.is_floating_point:
            tol = STIFF.get(name, 1e-5)
            torch.testing.assert_close(x, y, atol=tol, rtol=tol, msg=lambda m: f"{key}: {m}")
        else:
            assert torch.equal(x, y), key


@pytest.mark.parametrize("name", ENVS)
def test_same_seed_is_bit_identical_on_cuda(name):
    runs = [ENVS[name](device="cuda", seed=3).rollout(50, policy=pre_drawn_policy(ENVS[name](), 50, device="cuda"),
                                                      break_when_any_done=False) for _ in range(2)]
    assert (runs[0] == runs[1]).all()


def test_tag_with_1000_agents_per_env():
    """10 taggers + 990 runners: more agents than threads per block; matches the CPU."""
    kw = dict(num_envs=16, num_taggers=10, num_runners=990, seed=5)
    gpu, cpu = TagEnv(device="cuda", **kw), TagEnv(device="cpu", **kw)
    a = gpu.rollout(5, policy=pre_drawn_policy(gpu, 5, device="cuda"), break_when_any_done=False).cpu()
    b = cpu.rollout(5, policy=pre_drawn_policy(cpu, 5), break_when_any_done=False)
    for key in b.keys(True, True):
        if b[key].dtype.is_floating_point:
            torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-5)
        else:
            assert torch.equal(a[key], b[key]), key
    assert b["next", "taggers", "reward"].sum() > 0  # tags happened
    big = TagEnv(device="cuda", num_envs=2000, num_taggers=10, num_runners=990, check_actions=False)
    td = big.rollout(10, break_when_any_done=False)
    assert td["next", "runners", "observation"].shape == (2000, 10, 990, 77)
    assert torch.isfinite(td["next", "runners", "observation"]).all()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_scan_and_grid_agree_on_cuda(k):
    """The two k-nearest searches give the same neighbours: bit-identical rollouts on the GPU."""
    runs = []
    for search in ("grid", "scan"):
        env = TagEnv(device="cuda", num_envs=256, num_other_agents_observed=k, episode_length=30, seed=7,
                     neighbor_search=search)
        runs.append(env.rollout(60, policy=pre_drawn_policy(env, 60, device="cuda"), break_when_any_done=False))
    assert runs[0]["next", "done"].any()
    assert (runs[0] == runs[1]).all()
    assert TagEnv(device="cuda", num_envs=1, num_other_agents_observed=k).search == ("scan" if k <= 2 else "grid")


def test_runners_left_counted_once_per_warp_match_the_runners_in_game():
    """atomic_count (one atomic per warp and env): 4 envs of 7 agents share each warp."""
    env = TagEnv(device="cuda", num_envs=64, num_taggers=2, num_runners=5, num_other_agents_observed=2,
                 tagging_distance=0.2, episode_length=1000, seed=3)
    env.rollout(30, break_when_any_done=False)
    left = env.state["runners_left"]
    assert torch.equal(left.long(), env.runners_in_game) and (left < 5).any()


@pytest.mark.parametrize("name", ENVS)
def test_set_seed_after_graph_capture_replays_the_new_seed(name):
    """Kernel launches are captured in CUDA graphs; reseeding must not replay the old seed."""
    fresh = ENVS[name](device="cuda", seed=21)
    expected = fresh.rollout(20, policy=pre_drawn_policy(fresh, 20, device="cuda"), break_when_any_done=False)
    env = ENVS[name](device="cuda", seed=5)
    env.rollout(20, break_when_any_done=False)  # launches captured with seed 5
    env.set_seed(21)
    again = env.rollout(20, policy=pre_drawn_policy(env, 20, device="cuda"), break_when_any_done=False)
    assert (again == expected).all()
    eager = ENVS[name](device="cuda", seed=21, cuda_graphs=False)
    assert (eager.rollout(20, policy=pre_drawn_policy(eager, 20, device="cuda"), break_when_any_done=False)
            == expected).all()


@pytest.mark.parametrize("name", ["tag", "tag_scan", "cartpole", "simple_spread", "simple_tag"])
def test_reset_pool_set_after_graph_capture_agrees_with_the_cpu(name):
    """A pool set once the launches are captured: the new reset kernel is launched, then
    captured; resets draw the same entries as on the CPU."""
    donor = ENVS[name](device="cpu", seed=99)
    donor.reset()
    pool = {f.name: donor.state[f.name].clone() for f in donor.layout.fields if not (f.scratch or f.derived)}
    runs = []
    for device in ("cuda", "cpu"):
        env = ENVS[name](device=device, seed=13)
        # launches captured without a pool (the same actions on both: episodes end alike)
        env.rollout(10, policy=pre_drawn_policy(env, 10, device=device), break_when_any_done=False)
        env.set_reset_pool(pool)
        policy = pre_drawn_policy(env, STEPS, device=device)
        runs.append(env.rollout(STEPS, policy=policy, break_when_any_done=False))
    a, b = runs[0].cpu(), runs[1]
    assert b["next", "done"].any()
    for key in b.keys(True, True):
        if b[key].dtype.is_floating_point:
            torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-5, msg=lambda m: f"{key}: {m}")
        else:
            assert torch.equal(a[key], b[key]), key


def test_recipe_losses_do_not_sync_with_the_host():
    """recipes/losses.py: a MAPPO loss forward and backward on the GPU never waits for the
    device (TorchRL's own ``MAPPOLoss`` checks its entropy's finiteness: one sync per call)."""
    from omegaconf import OmegaConf
    from tensordict.nn import TensorDictSequential

    from torchrl_warp.recipes.config import AlgoConfig
    from torchrl_warp.recipes.on_policy import GroupAgent

    env = ENVS["tag"](device="cuda", seed=0)
    cfg = OmegaConf.structured(AlgoConfig(name="mappo", hidden=[16], entropy_coeff=0.01))
    agents = [GroupAgent(env, g, cfg, torch.device("cuda")) for g in ("taggers", "runners")]
    with torch.no_grad():
        batch = env.rollout(8, TensorDictSequential(agents[0].actor, agents[1].actor), break_when_any_done=False)
        agents[1].advantage(batch)
    minibatch = batch.reshape(-1)

    @strict
    def step():
        out = agents[1].loss(minibatch)
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()

    step()


@pytest.mark.parametrize("algo, amp", [("ppo", False), ("mappo", False), ("mappo", True)])
def test_graphed_gradient_steps_match_eager_ones(algo, amp):
    """``algo.cudagraph_update``: the recipe's GradientStep replayed as a CUDA graph takes the
    steps the eager one takes (same minibatches; the lr changed after capture, in place;
    with and without bfloat16 autocast)."""
    from omegaconf import OmegaConf

    from gradient_steps import assert_same_steps, eager_and_graphed
    from torchrl_warp.recipes.config import AlgoConfig
    from torchrl_warp.recipes.on_policy import GroupAgent

    cuda = torch.device("cuda")
    cfg = OmegaConf.structured(AlgoConfig(name=algo, hidden=[16], entropy_coeff=0.01))
    env = ENVS["cartpole" if algo == "ppo" else "tag"](device="cuda", seed=0)
    groups = [None] if algo == "ppo" else ["taggers", "runners"]
    runs = eager_and_graphed(env, groups, cfg, cuda, amp=amp)
    assert_same_steps(runs, amp)
    torch.manual_seed(0)
    untrained = GroupAgent(env, groups[0], cfg, cuda)
    graphed = runs[1][0]
    assert not torch.equal(next(untrained.parameters()), next(graphed.parameters()))  # it did train


@pytest.mark.parametrize("env_args, epochs, lr", [
    (["env.num_envs=256", "env.steps_per_batch=16", "algo.minibatch_size=1500"], 8, 5e-4 / 4),  # ppo anneals
    (["env=tag", "algo=mappo", "env.num_envs=64", "env.steps_per_batch=10", "env.params.num_taggers=2",
      "env.params.num_runners=5", "+env.params.num_other_agents_observed=2", "algo.minibatch_size=300",
      "algo.hidden=[32,32]"], 4, 3e-4),
], ids=["cartpole", "tag"])
def test_recipe_resumes_an_eager_run_with_graphed_updates(tmp_path, env_args, epochs, lr):
    """``algo.cudagraph_update=true`` in the recipe's config: a run of eager steps, then two
    batches more, graphed, from its checkpoint. Batches are not a multiple of the minibatch
    (the remainder is left out: a graph takes one shape); Adam's step counts go on; the lr is
    the annealed one (a tensor filled in place). In this process (the CLI's own path is the
    CPU tests'), so that the suite does not pay four processes' imports."""
    from test_recipe_config import compose
    from torchrl_warp.recipes.train import train

    def run(out, *args):
        out.mkdir()
        return train(compose("device=cuda", "eval_envs=16", *env_args, *args), str(out))

    frames = 4096 if "env=tag" not in env_args else 640
    run(tmp_path / "a", "algo.cudagraph_update=false", f"env.total_frames={2 * frames}")
    summary = run(tmp_path / "b", "algo.cudagraph_update=true", f"env.total_frames={4 * frames}",
                  f"resume={tmp_path / 'a' / 'checkpoint.pt'}")
    assert summary["frames"] == 4 * frames
    assert all(math.isfinite(v) for k, v in summary["final"].items() if k.startswith("loss_"))
    optimizer = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["optimizer"]
    assert optimizer["param_groups"][0]["capturable"]
    assert float(optimizer["param_groups"][0]["lr"]) == pytest.approx(lr)
    steps = {s["step"].item() for s in optimizer["state"].values()}
    assert steps == {4 * epochs * 2}  # 4 batches, each epoch 2 full minibatches


def test_graphed_update_captures_the_nccl_all_reduce(tmp_path):
    """The recipe's gradient step with the NCCL all-reduce captured in its CUDA graph (what
    torchrun runs would need to stay graphed): on one GPU, a one-rank NCCL group, the captured
    step takes the eager one's steps, and the group then closes (tests/nccl_graphed_update.py,
    in its own process: a hang there is a failure). Then the recipe under torchrun, one rank."""
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "nccl_graphed_update.py")
    proc = subprocess.run([sys.executable, script, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=200)  # the script dumps its threads' tracebacks and exits after 150 s
    assert proc.returncode == 0 and "same steps" in proc.stdout and "closed" in proc.stdout, (
        proc.stdout[-1000:] + proc.stderr[-5000:])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m",
                "torchrl_warp.recipes.train", f"hydra.run.dir={tmp_path / 'run'}", "device=cuda",
                "env.total_frames=40960", "eval_envs=16"]
    proc = subprocess.run(torchrun, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").exists()


def test_the_recipes_memory_estimate_bounds_its_peak_on_the_gpu(tmp_path):
    """Tag MAPPO at a tenth of the documented command's batch: the training's peak of torch's
    allocator (summary.json) stays within the recipe's estimate, which the refusal of a run
    that cannot fit is made from."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torchrl_warp.recipes.train", f"hydra.run.dir={tmp_path}", "device=cuda",
           "env=tag", "algo=mappo", "env.num_envs=256", "env.total_frames=76800", "algo.minibatch_size=4096",
           "algo.epochs=2", "algo.amp=true", "eval_envs=16", "video=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    print(f"estimate {summary['memory_estimate_gib']:.2f} GiB, peak {summary['peak_memory_gib']:.2f} GiB")
    assert 0 < summary["peak_memory_gib"] <= summary["memory_estimate_gib"]
