"""GPU tests (marked ``gpu``) of the replay families (recipes/replay.py: DDPG, SAC, their
multi-agent forms, DQN, IQL, VDN, QMIX): on the device a gradient step, a buffer sample, the
target update and the collecting policy never wait for the host; a gradient step captured
as a CUDA graph (``algo.cudagraph_update``) takes the steps the eager one takes; and the
recipe trains each family through ``GraphedCollector`` with graphed updates, then resumes.
"""
import math

import pytest
import torch

from test_marl_eval import the_run
from test_off_policy import ENV_OF, collected, sync_free_steps

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


@pytest.mark.parametrize("algo", list(ENV_OF))
def test_a_gradient_step_a_sample_and_the_policy_never_wait_for_the_host(algo):
    """torch's sync debug mode raising, and forbid_host_syncs on the device: what a GPU run
    repeats per gradient step and per env step queues without a sync."""
    assert sync_free_steps(algo, "cuda") == {torch.float32}


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_under_amp_the_gpu_step_runs_its_products_in_bfloat16(amp):
    assert sync_free_steps("masac", "cuda", amp=amp) == ({torch.bfloat16} if amp else {torch.float32})


@pytest.mark.parametrize("algo", ["ddpg", "sac", "maddpg", "masac", "dqn", "vdn", "qmix"])
def test_graphed_replay_gradient_steps_match_eager_ones(algo):
    """``algo.cudagraph_update``: the same 6 sampled minibatches, eager and through the
    captured step (capturable Adam, its lr a tensor, SoftUpdate's target update captured with
    it; DQN's HardUpdate after it): the online and target networks end equal."""
    from torchrl_warp.recipes.replay import GradientStep, make_optimizer, target_updates

    runs = []
    for graphed in (False, True):
        torch.manual_seed(0)
        cfg, env, agents, by_group, policy, buffer, batch = collected(algo, "cuda", cudagraph_update=graphed)
        if not runs:
            generator = torch.Generator(device=CUDA).manual_seed(0)
            flat = buffer[:len(buffer)]
            minibatches = [flat[torch.randint(len(buffer), (16,), device=CUDA, generator=generator)]
                           for _ in range(6)]
        optimizer = make_optimizer(cfg, agents, CUDA)
        assert optimizer.param_groups[0]["capturable"] == graphed
        within, after = target_updates(by_group)  # as the recipe: SoftUpdate inside the captured step
        step = GradientStep(by_group, optimizer, cfg.algo, torch.autocast("cuda", enabled=False), graphed, CUDA,
                            then=within)
        for minibatch in minibatches:
            step(minibatch.clone())
            after()
        assert hasattr(step._step, "graph") == graphed  # captured, then replayed
        runs.append(agents)
    eager, graphed_agents = runs
    for (name, a), b in zip(eager.named_parameters(), graphed_agents.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    for (name, a), b in zip(eager.named_buffers(), graphed_agents.buffers()):
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


#: each family at small sizes on the GPU: 2 batches of 64 envs x 10 steps, a gradient step per
#: 40 frames (16 a batch), minibatches of 64
SMALL = ["device=cuda", "env.num_envs=64", "env.steps_per_batch=10", "env.total_frames=1280", "algo.hidden=[32,32]",
         "algo.minibatch_size=64", "algo.frames_per_gradient_step=40", "algo.buffer_size=4096", "eval_envs=16",
         "eval_interval_frames=640", "algo.cudagraph_update=true"]


@pytest.mark.parametrize("algo", ["masac", "qmix"])  # one of each family
def test_each_replay_family_trains_graphed_on_the_gpu_and_resumes(tmp_path, caplog, algo):
    """The recipe on CUDA (in this process, as tests/test_off_policy.py runs it: no second
    import of torch and Numba): collection through GraphedCollector (env.graphed_rollout, on by
    default), graphed gradient steps; then a resume from its checkpoint with the buffer."""
    import logging

    from test_off_policy import run

    overrides = (f"env={ENV_OF[algo]}", f"algo={algo}", "video=false", *SMALL)
    first = run(tmp_path / "a", *overrides)
    assert (first["frames"], first["gradient_steps"]) == (1280, 32) and first["device"] == "cuda"
    assert all(math.isfinite(v) for k, v in first["final"].items() if "loss" in k), first["final"]
    ckpt = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    assert ckpt["optimizer"]["param_groups"][0]["capturable"] and ckpt["family"]["gradient_steps"] == 32
    with caplog.at_level(logging.INFO, logger="torchrl_warp.recipes.train"):
        resumed = run(tmp_path / "b", *overrides, "env.total_frames=2560", f"resume={tmp_path / 'a' / 'checkpoint.pt'}")
    assert (resumed["frames"], resumed["gradient_steps"]) == (2560, 32)
    assert "replay buffer: 1280 frames from" in caplog.text
    run_data = the_run(tmp_path / "b" / "marl_eval.json", "vmas", "simple_spread", algo)
    assert [run_data[f"step_{k}"]["step_count"] for k in range(4)] == [640, 1280, 1920, 2560]
