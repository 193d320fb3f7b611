"""The recipe's gradient step with the gradients' NCCL all-reduce, eager and captured in a
CUDA graph, on one GPU: a one-rank NCCL group (a file store, no network) stands in for
torchrun's. Run by tests/test_gpu.py in a process of its own; prints ``same steps`` when the
graphed steps equal the eager ones and the process group closes."""
import sys

import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from tensordict.nn import TensorDictSequential

from torchrl_warp.envs import TagEnv
from torchrl_warp.recipes.config import AlgoConfig
from torchrl_warp.recipes.distributed import Ranks
from torchrl_warp.recipes.train import GradientStep, GroupAgent


class AllReducingRank(Ranks):
    """Rank 0 of 1 that all-reduces anyway (what each of N ranks does)."""

    @property
    def distributed(self) -> bool:
        return True


dist.init_process_group("nccl", init_method=f"file://{sys.argv[1]}", rank=0, world_size=1)
cuda = torch.device("cuda")
cfg = OmegaConf.structured(AlgoConfig(name="mappo", hidden=[16], entropy_coeff=0.01))
env = TagEnv(num_envs=16, num_taggers=2, num_runners=6, num_other_agents_observed=2, device="cuda", seed=0)
groups = ["taggers", "runners"]
runs = []
for graphed in (False, True):
    torch.manual_seed(0)
    by_group = {g: GroupAgent(env, g, cfg, cuda) for g in groups}
    agents = torch.nn.ModuleDict(by_group)
    if not runs:
        with torch.no_grad():
            batch = env.rollout(8, TensorDictSequential(*[by_group[g].actor for g in groups]),
                                break_when_any_done=False)
            for g in groups:
                by_group[g].advantage(batch)
        flat = batch.reshape(-1)
        generator = torch.Generator(device="cuda").manual_seed(0)
        minibatches = [flat[torch.randperm(flat.numel(), device="cuda", generator=generator)[:64]] for _ in range(6)]
    lr = torch.tensor(1e-2, device=cuda) if graphed else 1e-2
    optimizer = torch.optim.Adam(agents.parameters(), lr=lr, fused=True, capturable=graphed)
    step = GradientStep(agents, by_group, optimizer, cfg, torch.autocast("cuda", enabled=False), graphed, cuda,
                        AllReducingRank())
    for minibatch in minibatches:
        step(minibatch.clone())
    assert hasattr(step._step, "graph") == graphed, "the graphed step was not captured"
    runs.append(agents)
for (name, a), b in zip(runs[0].named_parameters(), runs[1].parameters()):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
torch.cuda.synchronize()
dist.destroy_process_group()
print("same steps")
