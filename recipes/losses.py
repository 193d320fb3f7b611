"""TorchRL's PPO losses without a host-device sync per call.

``ClipPPOLoss._get_entropy`` (torchrl 0.14) checks ``entropy.isfinite().all()`` to fall
back to a Monte-Carlo estimate: on a CUDA tensor that question waits for the device,
once per loss call (2 groups x 12 minibatches = 24 syncs per Tag iteration), and the
host cannot queue the backward pass while it waits. The distributions our recipes use
(``Categorical``, ``MultiCategoricalLogits``) have a closed-form entropy that is finite
for finite logits, so these subclasses return it unchecked; any other distribution
takes TorchRL's path.

Examples:
    >>> from torchrl.objectives.multiagent import MAPPOLoss
    >>> issubclass(LOSSES["mappo"], MAPPOLoss)
    True
"""
from __future__ import annotations

import torch
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

from torchrl_warp.distributions import MultiCategoricalLogits

__all__ = ["LOSSES"]

_CLOSED_FORM = (MultiCategoricalLogits, torch.distributions.Categorical)


class _UncheckedEntropy:
    def _get_entropy(self, dist, adv_shape):
        if isinstance(dist, _CLOSED_FORM):
            return dist.entropy().unsqueeze(-1)
        return super()._get_entropy(dist, adv_shape)


class ClipPPOLossNoSync(_UncheckedEntropy, ClipPPOLoss):
    """``ClipPPOLoss``, its entropy unchecked for closed-form distributions."""


class MAPPOLossNoSync(_UncheckedEntropy, MAPPOLoss):
    """``MAPPOLoss``, its entropy unchecked for closed-form distributions."""


class IPPOLossNoSync(_UncheckedEntropy, IPPOLoss):
    """``IPPOLoss``, its entropy unchecked for closed-form distributions."""


#: the recipe's ``algo.name`` -> loss class
LOSSES = {"ppo": ClipPPOLossNoSync, "mappo": MAPPOLossNoSync, "ippo": IPPOLossNoSync}
