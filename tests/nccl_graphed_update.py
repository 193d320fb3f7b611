"""The recipe's gradient step with the gradients' NCCL all-reduce, eager and captured in a
CUDA graph, on one GPU: a one-rank NCCL group (a file store, no network) stands in for
torchrun's. Run by tests/test_gpu.py in a process of its own; prints ``same steps`` when the
graphed steps equal the eager ones and the process group closes."""
import faulthandler
import os
import sys

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

sys.path.insert(0, os.path.dirname(__file__))
from gradient_steps import assert_same_steps, eager_and_graphed  # noqa: E402
from torchrl_warp.envs import TagEnv  # noqa: E402
from torchrl_warp.recipes.config import AlgoConfig  # noqa: E402
from torchrl_warp.recipes.distributed import Ranks  # noqa: E402


class AllReducingRank(Ranks):
    """Rank 0 of 1 that all-reduces anyway (what each of N ranks does)."""

    @property
    def distributed(self) -> bool:
        return True


# a hang is a failure that says where: every thread's traceback on stderr, then exit (tests/test_gpu.py
# waits longer than this)
faulthandler.dump_traceback_later(float(os.environ.get("TORCHRL_WARP_HANG_S", "150")), exit=True)
dist.init_process_group("nccl", init_method=f"file://{sys.argv[1]}", rank=0, world_size=1)
cuda = torch.device("cuda")
cfg = OmegaConf.structured(AlgoConfig(name="mappo", hidden=[16], entropy_coeff=0.01))
env = TagEnv(num_envs=16, num_taggers=2, num_runners=6, num_other_agents_observed=2, device="cuda", seed=0)
assert_same_steps(eager_and_graphed(env, ["taggers", "runners"], cfg, cuda, ranks=AllReducingRank()))
torch.cuda.synchronize()
print("same steps", flush=True)
dist.destroy_process_group()
faulthandler.cancel_dump_traceback_later()
print("closed")
