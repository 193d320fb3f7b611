"""Action distributions for the action specs our environments use.

Examples:
    >>> import torch
    >>> dist = MultiCategoricalLogits(torch.zeros(8, 3, 42), nvec=(21, 21))
    >>> dist.sample().shape, dist.log_prob(dist.sample()).shape
    (torch.Size([8, 3, 2]), torch.Size([8, 3]))
"""
from __future__ import annotations

import torch
from torch import distributions as D

__all__ = ["MultiCategoricalLogits"]


class MultiCategoricalLogits(D.Distribution):
    """Independent categoricals, one per action dim, from one logits vector.

    The last dim of ``logits`` holds ``sum(nvec)`` logits: the first ``nvec[0]`` for
    action dim 0, and so on. Samples are ``[..., len(nvec)]`` int64 indices (what a
    ``MultiCategorical`` spec holds); ``log_prob`` and ``entropy`` sum over the dims.

    Args:
        logits: ``[..., sum(nvec)]`` unnormalized log-probabilities.
        nvec: the number of choices of each action dim.
    """

    arg_constraints = {}
    has_enumerate_support = False

    def __init__(self, logits: torch.Tensor, nvec, validate_args=None):
        self.nvec = tuple(int(n) for n in nvec)
        if logits.shape[-1] != sum(self.nvec):
            raise ValueError(f"logits have {logits.shape[-1]} entries in the last dim, expected sum(nvec)={sum(self.nvec)}")
        self.logits = logits
        self._parts = [D.Categorical(logits=part) for part in logits.split(self.nvec, dim=-1)]
        super().__init__(batch_shape=logits.shape[:-1], event_shape=(len(self.nvec),), validate_args=False)

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        return torch.stack([p.sample(sample_shape) for p in self._parts], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return sum(p.log_prob(v) for p, v in zip(self._parts, value.unbind(-1)))

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self._parts)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([p.logits.argmax(-1) for p in self._parts], dim=-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode
