"""The training recipe on several processes, under ``torchrun``: which rank this is, and what
the ranks share.

``torchrun --nproc-per-node=N -m torchrl_warp.recipes.train ...`` starts N ranks. Each owns
its own envs (``env.num_envs`` per rank, seeded ``seed + rank``) on its own GPU
(``cuda:<local rank>``; NCCL) or on the CPU (gloo), collects its own batches, and every
gradient step averages the ranks' gradients (one all-reduce of all of them, flattened). The
ranks share only that, the initial parameters (rank 0's, broadcast), the observation
statistics (summed over every rank's rollout) and the flag to stop. Rank 0 alone logs,
writes checkpoints, evaluates and writes the summary. Without ``torchrun`` (no
``WORLD_SIZE``) nothing here does anything: one process, world size 1.

Examples:
    >>> ranks = Ranks.from_environment({})  # no torchrun
    >>> ranks.world, ranks.rank, ranks.is_main
    (1, 0, True)
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["Ranks"]


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks of a run (``world == 1``: a run of its own)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_environment(cls, environ=None) -> "Ranks":
        """The ranks ``torchrun`` describes in ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``."""
        environ = os.environ if environ is None else environ
        world = int(environ.get("WORLD_SIZE", 1))
        if world < 1:
            raise ValueError(f"WORLD_SIZE must be >= 1, got {world}")
        return cls(int(environ.get("RANK", 0)), world, int(environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def hydra_overrides(self) -> list[str]:
        """Hydra overrides for this rank: none for rank 0; the others make no run directory of
        their own (rank 0 writes the run) and log to the console only.

        Examples:
            >>> Ranks(rank=1, world=2).hydra_overrides()
            ['hydra.run.dir=.', 'hydra.output_subdir=null', 'hydra/job_logging=stdout']
        """
        return [] if self.is_main else ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def start(self, device: torch.device) -> torch.device:
        """Join the process group (NCCL on CUDA, gloo on the CPU) and return this rank's
        device: ``cuda:<local rank>`` for a CUDA ``device``."""
        if not self.distributed:
            return device
        if device.type == "cuda":
            if self.local_rank >= torch.cuda.device_count():
                raise RuntimeError(f"rank {self.rank} has local rank {self.local_rank}, but this machine has "
                                   f"{torch.cuda.device_count()} CUDA devices: start at most that many ranks "
                                   f"per node (torchrun --nproc-per-node)")
            device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return device

    def stop(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()

    def broadcast_(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers into every rank's ``module``, in place."""
        if not self.distributed:
            return
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)

    def sum_(self, *tensors: torch.Tensor) -> None:
        """Each tensor summed over the ranks, in place."""
        if self.distributed:
            for tensor in tensors:
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def average_gradients_(self, parameters) -> None:
        """Every parameter's gradient replaced by the mean of the ranks' gradients (one
        all-reduce of them all, flattened); a parameter without a gradient counts as zero."""
        if not self.distributed:
            return
        parameters = list(parameters)
        for p in parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world
        offset = 0
        for p in parameters:
            n = p.grad.numel()
            p.grad.copy_(flat[offset: offset + n].view_as(p.grad))
            offset += n

    def any(self, flag: bool, device) -> bool:
        """Whether ``flag`` holds on any rank (every rank gets the same answer)."""
        if not self.distributed:
            return flag
        value = torch.tensor([1.0 if flag else 0.0], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def parameters_agree(self, module: torch.nn.Module) -> bool:
        """Whether every rank holds the same parameters as rank 0 (their sums and sums of
        squares, gathered): the check that averaged gradients kept the ranks together."""
        if not self.distributed:
            return True
        with torch.no_grad():
            flat = torch.cat([p.detach().double().reshape(-1) for p in module.parameters()])
            mine = torch.stack([flat.sum(), flat.square().sum()])
            gathered = [torch.zeros_like(mine) for _ in range(self.world)]
            dist.all_gather(gathered, mine)
        return all(torch.equal(g, gathered[0]) for g in gathered)
