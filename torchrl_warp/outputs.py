"""Where an environment's outputs live, and how one step's outputs are taken.

Every output of a step sits in one of two buffers of the state:

* ``floats`` ``[num_envs, num_agents, D + 1]``: each agent's observation (``D``
  floats, flattened) followed by its reward;
* ``flags`` ``[num_envs, 3 (+ 3 * num_agents)]`` (bool): the env's ``done``,
  ``terminated``, ``truncated``, then, for envs whose agents can leave early, each
  agent's ``done``, ``terminated`` and ``truncated``.

The state fields (``observation``, ``reward``, ``done``, ``agent_done``, ...) are
views into them, so the kernels write the outputs in place, and a snapshot of
all outputs (which rollouts keep a reference to, so it must be a fresh copy)
is two clones plus views of the clones, instead of one clone per key.

Examples:
    >>> from torchrl.data import Categorical
    >>> from torchrl_warp.layout import Layout
    >>> layout = Layout({"a": 2, "b": 3}, (4,), Categorical(3), [], (), (), agent_done=True)
    >>> out = Outputs(layout, num_envs=8, device="cpu")
    >>> out.fields["observation"].shape, out.fields["agent_done"].shape
    (torch.Size([8, 5, 4]), torch.Size([8, 5]))
    >>> td = out.snapshot(with_reward=True)
    >>> td["b", "reward"].shape, td["b", "done"].shape, td["done"].shape
    (torch.Size([8, 3, 1]), torch.Size([8, 3, 1]), torch.Size([8, 1]))
"""
from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from torchrl_warp.layout import DONE_KEYS, Layout

__all__ = ["Outputs", "OUTPUT_FIELDS"]

#: state fields that live in the output buffers
OUTPUT_FIELDS = ("observation", "reward") + DONE_KEYS + tuple(f"agent_{k}" for k in DONE_KEYS)


class Outputs:
    """The two output buffers of an environment, their state views and snapshots.

    Args:
        layout: the environment's declaration (groups, observation shape, agent_done).
        num_envs: the batch size.
        device: where the buffers live.
    """

    def __init__(self, layout: Layout, num_envs: int, device):
        E, N = num_envs, layout.num_agents
        obs_shape = tuple(layout.observation_shape)
        D = math.prod(obs_shape)
        per_agent_flags = 3 * N if layout.agent_done else 0
        self.floats = torch.zeros(E, N, D + 1, dtype=torch.float32, device=device)
        self.flags = torch.zeros(E, 3 + per_agent_flags, dtype=torch.bool, device=device)
        self.num_envs, self.device = num_envs, torch.device(device)

        fields = {
            "observation": self.floats[:, :, :D].unflatten(-1, obs_shape) if obs_shape else self.floats[:, :, 0],
            "reward": self.floats[:, :, D],
        }
        for i, k in enumerate(DONE_KEYS):
            fields[k] = self.flags[:, i]
            if layout.agent_done:
                fields[f"agent_{k}"] = self.flags[:, 3 + i * N: 3 + (i + 1) * N]
        #: state field name -> view of a buffer (what the kernels write)
        self.fields = fields

        # (group or None, key, view) of each output; a snapshot rebuilds the views on clones
        entries = [(None, k, fields[k].unsqueeze(-1)) for k in DONE_KEYS]
        rewards = []
        for group, sl in layout.group_slices().items():
            if group is None:
                entries.append((None, "observation", fields["observation"][:, 0]))
                rewards.append((None, "reward", fields["reward"][:, 0:1]))
                continue
            entries.append((group, "observation", fields["observation"][:, sl]))
            rewards.append((group, "reward", fields["reward"][:, sl].unsqueeze(-1)))
            if layout.agent_done:
                entries += [(group, k, fields[f"agent_{k}"][:, sl].unsqueeze(-1)) for k in DONE_KEYS]
        self._entries = [self._geometry(e) for e in entries]
        self._entries_with_reward = self._entries + [self._geometry(e) for e in rewards]
        self._groups = {g: (E, sl.stop - sl.start) for g, sl in layout.group_slices().items() if g is not None}

    def _geometry(self, entry):
        group, key, view = entry
        source = 0 if view.dtype == torch.float32 else 1
        return group, key, source, tuple(view.shape), view.stride(), view.storage_offset()

    def snapshot(self, with_reward: bool) -> TensorDict:
        """A fresh TensorDict of every output (``with_reward``: rewards too), as a step returns it.

        Built with ``TensorDict._new_unsafe``: shapes, dtypes and device are the specs'
        by construction, and skipping per-key validation is several times cheaper.
        """
        buffers = (self.floats.clone(), self.flags.clone())
        root = {}
        groups = {g: {} for g in self._groups}
        entries = self._entries_with_reward if with_reward else self._entries
        for group, key, source, shape, stride, offset in entries:
            value = buffers[source].as_strided(shape, stride, offset)
            (root if group is None else groups[group])[key] = value
        for group, entries_of_group in groups.items():
            root[group] = TensorDict._new_unsafe(entries_of_group, batch_size=self._groups[group], device=self.device)
        return TensorDict._new_unsafe(root, batch_size=(self.num_envs,), device=self.device)
