"""Where an environment's outputs live, and how a launch's outputs are handed out.

Every output of a launch sits in one device buffer (one allocation) of two parts:

* ``floats`` ``[num_envs, num_agents, D + 1]``: each agent's observation (``D``
  floats, flattened) followed by its reward;
* ``flags`` ``[num_envs, 3 (+ 3 * num_agents)]`` (bool): the env's ``done``,
  ``terminated``, ``truncated``, then, for envs whose agents can leave early, each
  agent's ``done``, ``terminated`` and ``truncated``.

The state fields (``observation``, ``reward``, ``done``, ``agent_done``, ...) are
views into it, so the kernels write the outputs in place. Rollouts and collectors
keep references to what a step returns, so the env never writes a buffer again once
it has handed it out (:meth:`Outputs.hand_out`: views of the buffer, in a TensorDict).
Before the next launch, :meth:`Outputs.prepare` moves the env to a new buffer: a copy
of the last one, or, when the launch writes every output itself (a full step of an
env whose layout says ``outputs_from_state``), an uninitialised one, which costs no
copy at all. So a step hands out its outputs without copying them, and
``step_and_maybe_reset`` copies once (before the masked reset), not twice.

Examples:
    >>> from torchrl.data import Categorical
    >>> from torchrl_warp.layout import Layout
    >>> layout = Layout({"a": 2, "b": 3}, (4,), Categorical(3), [], (), (), agent_done=True)
    >>> out = Outputs(layout, num_envs=8, device="cpu")
    >>> out.fields["observation"].shape, out.fields["agent_done"].shape
    (torch.Size([8, 5, 4]), torch.Size([8, 5]))
    >>> td = out.hand_out(with_reward=True)
    >>> td["b", "reward"].shape, td["b", "done"].shape, td["done"].shape
    (torch.Size([8, 3, 1]), torch.Size([8, 3, 1]), torch.Size([8, 1]))
    >>> out.prepare(copy=True)  # the next launch writes into a copy: td stays as it is
    True
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from tensordict import TensorDict

from torchrl_warp.layout import DONE_KEYS, Layout, group_view

__all__ = ["Outputs", "OUTPUT_FIELDS"]

#: state fields that live in the output buffer
OUTPUT_FIELDS = ("observation", "reward") + DONE_KEYS + tuple(f"agent_{k}" for k in DONE_KEYS)
_ALIGN = 16


class Outputs:
    """The output buffer of an environment, its state views, and hand-outs.

    Args:
        layout: the environment's declaration (groups, observation shape, agent_done).
        num_envs: the batch size.
        device: where the buffers live.
        feature_major: per env, each feature of every agent side by side (``[D, N]``, the
            observations handed out as ``[N, D]`` views with strides ``(1, N)``), so that the
            lanes of a warp, one agent each, store one feature to consecutive addresses; else
            each agent's row of ``D`` features (``[N, D + 1]`` with its reward).
    """

    #: how :meth:`prepare` allocates a buffer it need not copy into (tests fill it with garbage)
    fresh = staticmethod(torch.empty_like)

    def __init__(self, layout: Layout, num_envs: int, device, feature_major: bool = False):
        E, N = num_envs, layout.num_agents
        obs_shape = layout.field_shape("observation")
        D = math.prod(obs_shape)
        per_agent_flags = 3 * N if layout.agent_done else 0
        floats_shape, flags_shape = (E, N, D + 1), (E, 3 + per_agent_flags)
        floats_bytes = math.prod(floats_shape) * 4
        # the flags follow the floats directly: every byte before ``used`` belongs to an output,
        # and only those are ever copied (the tail up to the alignment is never read)
        flags_offset = floats_bytes
        self.used = flags_offset + math.prod(flags_shape)
        nbytes = -(-self.used // _ALIGN) * _ALIGN
        self.num_envs, self.device = num_envs, torch.device(device)
        #: the buffer the env was built with: kernels address the current one relative to it
        self.base = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        self.buffer = self.base
        #: counts the buffers the env has written to (a new one after each hand-out)
        self.generation = 0
        self._handed_out = False

        # every output as (part, shape, stride, offset) of the buffer seen as float32 (part 0)
        # or as bool (part 1): a view of any buffer of this layout is one as_strided
        floats = self.base.view(torch.float32)[: math.prod(floats_shape)].view(floats_shape)
        flags = self.base.view(torch.bool)[flags_offset: flags_offset + math.prod(flags_shape)].view(flags_shape)
        if feature_major:  # per env the observations as [D, N] (feature k of every agent side by side), then rewards
            rows = floats.view(E, N * (D + 1))
            observations = rows.as_strided((E, N, D), (N * (D + 1), 1, N), rows.storage_offset())
            reward = rows[:, N * D:]
        else:
            observations, reward = floats[:, :, :D], floats[:, :, D]
        fields = {
            "observation": observations.unflatten(-1, obs_shape) if obs_shape else observations[:, :, 0],
            "reward": reward,
        }
        for i, k in enumerate(DONE_KEYS):
            fields[k] = flags[:, i]
            if layout.agent_done:
                fields[f"agent_{k}"] = flags[:, 3 + i * N: 3 + (i + 1) * N]
        self._fields = {name: self._geometry(view) for name, view in fields.items()}

        entries = [(None, k, fields[k].unsqueeze(-1)) for k in layout.done_keys]
        rewards = []
        for group, sl in layout.group_slices().items():
            if group is None:
                entries.append((None, "observation", fields["observation"][:, 0]))
                rewards.append((None, "reward", fields["reward"][:, 0:1]))
                continue
            entries.append((group, "observation", group_view(fields["observation"][:, sl], obs_shape,
                                                             layout.observation_shape_of(group))))
            rewards.append((group, "reward", fields["reward"][:, sl].unsqueeze(-1)))
            if layout.agent_done:
                entries += [(group, k, fields[f"agent_{k}"][:, sl].unsqueeze(-1)) for k in layout.done_keys]
        self._entries = [(g, k, self._geometry(v)) for g, k, v in entries]
        self._entries_with_reward = self._entries + [(g, k, self._geometry(v)) for g, k, v in rewards]
        # batch sizes as torch.Size: _new_unsafe keeps what it is given, and TorchRL's code
        # (TensorDict.view, VecNorm) calls torch.Size methods on it
        self._groups = {g: torch.Size((E, sl.stop - sl.start)) for g, sl in layout.group_slices().items()
                        if g is not None}
        self._batch_size = torch.Size((E,))

    @staticmethod
    def _geometry(view: torch.Tensor) -> tuple:
        part = 0 if view.dtype == torch.float32 else 1
        return part, tuple(view.shape), view.stride(), view.storage_offset()

    def _parts(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.buffer.view(torch.float32), self.buffer.view(torch.bool)

    def view(self, name: str) -> torch.Tensor:
        """The state field ``name`` (``"observation"``, ``"done"``...) in the current buffer."""
        part, shape, stride, offset = self._fields[name]
        return _at(self._parts()[part], shape, stride, offset)

    @property
    def fields(self) -> dict[str, torch.Tensor]:
        """State field name -> its view of the current buffer (what the kernels write)."""
        parts = self._parts()
        return {name: _at(parts[p], shape, stride, offset) for name, (p, shape, stride, offset) in self._fields.items()}

    @property
    def shift(self) -> int:
        """Bytes from the base buffer to the current one (what the CUDA kernels add)."""
        return self.buffer.data_ptr() - self.base.data_ptr()

    def prepare(self, copy: bool) -> bool:
        """Before a launch: if the current buffer was handed out, move to a new one (a copy
        of it if ``copy``, else uninitialised) and return True (the views changed)."""
        if not self._handed_out:
            return False
        new = self.fresh(self.buffer)
        if copy:
            new[: self.used].copy_(self.buffer[: self.used])
        self.buffer = new
        self.generation += 1
        self._handed_out = False
        return True

    @contextmanager
    def buffers_from(self, fresh):
        """In this block :meth:`prepare` takes each new buffer from ``fresh(buffer)`` instead of
        :attr:`fresh` (a GraphedCollector's slabs)."""
        self.fresh = fresh
        try:
            yield
        finally:
            del self.fresh  # the class's allocator again

    def hand_out(self, with_reward: bool) -> TensorDict:
        """Every output (``with_reward``: rewards too) as views of the current buffer, which
        the env will not write again, in a TensorDict as a step returns it.

        Built with ``TensorDict._new_unsafe``: shapes, dtypes and device are the specs'
        by construction, and skipping per-key validation is several times cheaper.
        """
        self._handed_out = True
        parts = self._parts()
        root = {}
        groups = {g: {} for g in self._groups}
        entries = self._entries_with_reward if with_reward else self._entries
        for group, key, (part, shape, stride, offset) in entries:
            value = _at(parts[part], shape, stride, offset)
            (root if group is None else groups[group])[key] = value
        for group, entries_of_group in groups.items():
            root[group] = TensorDict._new_unsafe(entries_of_group, batch_size=self._groups[group], device=self.device)
        return TensorDict._new_unsafe(root, batch_size=self._batch_size, device=self.device)


def _at(part: torch.Tensor, shape, stride, offset: int) -> torch.Tensor:
    """``part.as_strided`` at ``offset`` elements from ``part``'s start (a buffer may be one
    row of a larger allocation: ``as_strided`` counts its offset from the allocation's start)."""
    return part.as_strided(shape, stride, part.storage_offset() + offset)
