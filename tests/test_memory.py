"""Memory estimates (torchrl_warp/memory.py): a batch's bytes from the specs, and clear refusals."""
import math

import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector

from conftest import SIM
from torchrl_warp import memory
from torchrl_warp.envs import CartPoleEnv, MPEEnv, TagEnv


def _actual_frame_bytes(batch) -> float:
    """Bytes per frame of a collected batch: every leaf's storage over its frames."""
    total = sum(v.numel() * v.element_size() for v in batch.values(True, True))
    return total / math.prod(batch.batch_size)


def _collect(env, policy, traj_ids):
    collector = Collector(env, policy, frames_per_batch=env.num_envs * 3, total_frames=-1,
                          track_traj_ids=traj_ids, auto_register_policy_transforms=False)
    batch = next(iter(collector))
    collector.shutdown()
    return batch


@pytest.mark.parametrize("make", [
    lambda: CartPoleEnv(num_envs=4, seed=0),
    lambda: TagEnv(num_envs=2, num_taggers=2, num_runners=3, num_other_agents_observed=2, seed=0),
    lambda: MPEEnv("simple_tag", num_envs=2, seed=0),
], ids=["cartpole", "tag", "simple_tag"])
@pytest.mark.parametrize("traj_ids", [False, True])
def test_frame_bytes_is_a_collected_batchs_bytes_per_frame(make, traj_ids):
    env = make()
    batch = _collect(env, None, traj_ids)
    assert memory.frame_bytes(env, traj_ids=traj_ids) == _actual_frame_bytes(batch)


@pytest.mark.skipif(SIM, reason="a policy's bytes are the same in the simulator; the CPU run suffices")
def test_frame_bytes_counts_what_the_policy_writes():
    env = CartPoleEnv(num_envs=4, seed=0)
    # a policy writing an action and two float32 extras per frame (as a PPO actor's logits, log-prob)
    def act(obs):
        n = obs.shape[:-1]
        return torch.zeros(n, dtype=torch.int64), torch.zeros(n + (2,)), torch.zeros(n)

    policy = TensorDictModule(act, in_keys=["observation"], out_keys=["action", "logits", "sample_log_prob"])
    batch = _collect(env, policy, False)
    assert memory.frame_bytes(env, policy) == _actual_frame_bytes(batch) == memory.frame_bytes(env) + 12


def test_check_fits_refuses_what_exceeds_free_memory_naming_parts_and_advice():
    free = memory.available_bytes("cpu")
    assert free is not None and free > 0
    assert memory.check_fits("a run", {"a": 10, "b": 20}, "cpu", "lower x") == 30
    with pytest.raises(MemoryError, match=r"a run needs about .* GiB on cpu \(a .* GiB, b .* GiB\) but only .* "
                                          r"available on the host \(MemAvailable\): lower x"):
        memory.check_fits("a run", {"a": free, "b": free}, "cpu", "lower x")


def test_the_bench_refuses_a_collector_batch_that_cannot_fit():
    from torchrl_warp.bench import measure

    env = TagEnv(num_envs=8, num_taggers=10, num_runners=100, seed=0)
    steps = int(10 * memory.available_bytes("cpu") / memory.frame_bytes(env) / 8)
    with pytest.raises(MemoryError, match=r"the collector mode over TagEnv\(num_envs=8\) x \d+ steps needs about "
                                          r".*lower --num-envs or --steps"):
        measure(env, "collector", steps=steps)


@pytest.mark.skipif(SIM, reason="training runs on the CPU backend")
def test_the_recipe_refuses_a_run_that_cannot_fit_before_collecting(tmp_path):
    from test_recipes import run_train

    # CartPole: ~100 bytes a frame with the actor's, so one batch alone is about the free memory
    frames = int(8 * memory.available_bytes("cpu") / 800)
    num_envs = 2**16
    steps = max(1, frames // num_envs)
    proc = run_train(tmp_path, f"env.num_envs={num_envs}", f"env.steps_per_batch={steps}",
                     f"env.total_frames={num_envs * steps}", "algo.minibatch_size=64")
    assert proc.returncode != 0
    assert "MemoryError: training cartpole with env.num_envs=65536" in proc.stderr, proc.stderr[-3000:]
    assert "lower env.num_envs or env.steps_per_batch" in proc.stderr
    assert not (tmp_path / "checkpoint.pt").exists()
