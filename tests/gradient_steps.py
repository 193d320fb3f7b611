"""The recipe's GradientStep, eager and captured as a CUDA graph, on the same minibatches: what
tests/test_gpu.py and tests/nccl_graphed_update.py compare.

``eager_and_graphed(env, groups, cfg, device)`` -> ``[(agents, losses), (agents, losses)]``:
6 steps each from the same initial parameters (the lr changed after step 4, in place for the
graph); ``assert_same_steps`` checks that the two runs took the same steps.
"""
import torch
from tensordict.nn import TensorDictSequential

from torchrl_warp.recipes.distributed import Ranks
from torchrl_warp.recipes.on_policy import GradientStep, GroupAgent
from torchrl_warp.recipes.common import set_lr


def eager_and_graphed(env, groups, cfg, device, amp=False, ranks=Ranks()):
    runs = []
    for graphed in (False, True):
        torch.manual_seed(0)
        by_group = {g: GroupAgent(env, g, cfg, device) for g in groups}
        agents = torch.nn.ModuleDict({g or "agent": a for g, a in by_group.items()})
        if not runs:  # one set of minibatches for both
            with torch.no_grad():
                batch = env.rollout(8, TensorDictSequential(*[by_group[g].actor for g in groups]),
                                    break_when_any_done=False)
                for g in groups:
                    by_group[g].advantage(batch)
            flat = batch.reshape(-1)
            generator = torch.Generator(device=device).manual_seed(0)
            minibatches = [flat[torch.randperm(flat.numel(), device=device, generator=generator)[:64]]
                           for _ in range(6)]
        lr = torch.tensor(1e-2, device=device) if graphed else 1e-2
        optimizer = torch.optim.Adam(agents.parameters(), lr=lr, fused=True, capturable=graphed)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp, cache_enabled=not graphed)
        step = GradientStep(by_group, optimizer, cfg, autocast, graphed, device, ranks)
        losses = []
        for i, minibatch in enumerate(minibatches):
            if i == 4:
                set_lr(optimizer, 1e-1)
            losses.append(step(minibatch.clone()))
        assert hasattr(step._step, "graph") == graphed  # captured, then replayed
        runs.append((agents, losses))
    return runs


def assert_same_steps(runs, amp=False):
    (eager, eager_losses), (graphed, graphed_losses) = runs
    tol = dict(rtol=1e-3, atol=1e-4) if amp else dict(rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(eager.named_parameters(), graphed.parameters()):
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"{name}: {m}")
    torch.testing.assert_close(eager_losses[-1].to_dict(), graphed_losses[-1].to_dict(), **tol)
