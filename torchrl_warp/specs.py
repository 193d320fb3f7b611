"""TorchRL specs, and the TensorDict keys of an environment's inputs and outputs.

Multi-agent data sits under ``(group, key)`` with shape ``[num_envs, n_agents, ...]``;
``done``/``terminated``/``truncated`` sit at the root with shape ``[num_envs, 1]``
(and inside each group, ``[num_envs, n_agents, 1]``, when agents can leave early).
A single-agent environment keeps everything at the root.

Examples:
    >>> from torchrl.data import Categorical
    >>> from torchrl_warp.layout import Layout
    >>> layout = Layout({"a": 2, "b": 3}, (5,), Categorical(4), [], (), ())
    >>> specs = build_specs(layout, num_envs=8, device="cpu")
    >>> specs["observation"]["a", "observation"].shape
    torch.Size([8, 2, 5])
"""
from __future__ import annotations

import torch
from torchrl.data import Categorical, Composite, MultiCategorical, Unbounded
from torchrl.data.tensor_specs import BoxList

from torchrl_warp.layout import Layout, group_view

__all__ = ["BatchedMultiCategorical", "build_specs", "batched_spec", "action_views"]


def _key(group, name):
    return name if group is None else (group, name)


def _flag(shape, device):
    return Categorical(2, shape=shape, dtype=torch.bool, device=device)


class BatchedMultiCategorical(MultiCategorical):
    """A ``MultiCategorical`` with the same ``nvec`` for every batch element, fast at scale.

    TorchRL's ``MultiCategorical`` builds one Python box per element of its
    expanded ``nvec`` and samples them one by one: about a second for
    ``[2000, 43, 2]``, and millions of objects at WarpDrive's scale. This one keeps
    a box per action dimension and samples everything in one torch op. It is a
    ``MultiCategorical``: TorchRL code that checks the type accepts it.

    Examples:
        >>> spec = BatchedMultiCategorical(nvec=[21, 11], shape=(2000, 43, 2))
        >>> spec.rand().shape, len(spec.space)
        (torch.Size([2000, 43, 2]), 2)
    """

    def __init__(self, nvec, shape=None, device=None, dtype=torch.int64, mask=None, remove_singleton=True):
        nvec = torch.as_tensor(nvec)
        if nvec.ndim < 1:
            nvec = nvec.unsqueeze(0)
        shape = nvec.shape if shape is None else torch.Size(shape)
        if shape[-1] != nvec.shape[-1]:
            raise ValueError(f"the last dim of shape {tuple(shape)} must match nvec's {nvec.shape[-1]}")
        device = torch.device("cpu" if device is None else device)
        full = nvec.expand(_sample_shape(shape))
        per_dim = full.reshape(-1, shape[-1])[0]
        if not bool((full == per_dim).all()):
            raise ValueError("BatchedMultiCategorical needs the same nvec for every batch element")
        self.nvec = full.to(device)
        super(Categorical, self).__init__(
            shape, BoxList.from_nvec(per_dim), device, dtype, domain="discrete"
        )
        self.update_mask(mask)
        self.remove_singleton = remove_singleton
        self.encode = self._encode_eager

    def rand(self, shape=None) -> torch.Tensor:
        if self.mask is not None:
            return super().rand(shape)
        lead = torch.Size(() if shape is None else shape)
        u = torch.rand(lead + _sample_shape(self.shape), device=self.device)
        return torch.minimum((u * self.nvec).to(self.dtype), self.nvec - 1)


def _sample_shape(shape) -> torch.Size:
    """``shape`` with its dynamic dims (``-1``, as TorchRL's ``MultiAction`` declares
    for its stacked actions) of size 1, as TorchRL's own specs sample them."""
    return torch.Size(d if d >= 0 else 1 for d in shape)


def batched_spec(spec, lead: tuple):
    """``spec`` (one agent's) with leading batch dims ``lead``.

    Built anew rather than with ``spec.expand``, which nests ``MultiCategorical``'s
    per-dimension boxes instead of broadcasting its ``nvec``.
    """
    shape = tuple(lead) + tuple(spec.shape)
    if isinstance(spec, MultiCategorical):
        return BatchedMultiCategorical(nvec=spec.nvec.reshape(-1, spec.shape[-1])[0], shape=shape, dtype=spec.dtype)
    if isinstance(spec, Categorical):
        return Categorical(spec.space.n, shape=shape, dtype=spec.dtype)
    return spec.clone().expand(*shape)


def build_specs(layout: Layout, num_envs: int, device) -> dict[str, Composite]:
    """The env's full observation, action, reward and done specs."""
    E = num_envs
    obs, act, rew, done = ({} for _ in range(4))
    done.update({k: _flag((E, 1), device) for k in layout.done_keys})
    for group, sl in layout.group_slices().items():
        n = sl.stop - sl.start
        lead = (E,) if group is None else (E, n)
        o = Unbounded(shape=lead + layout.observation_shape_of(group), device=device)
        a = batched_spec(layout.action_spec_of(group), lead).to(device)
        r = Unbounded(shape=(E, 1) if group is None else (E, n, 1), device=device)
        if group is None:
            obs["observation"], act["action"], rew["reward"] = o, a, r
            continue
        obs[group] = Composite(observation=o, shape=lead, device=device)
        act[group] = Composite(action=a, shape=lead, device=device)
        rew[group] = Composite(reward=r, shape=lead, device=device)
        if layout.agent_done:
            done[group] = Composite(
                {k: _flag((E, n, 1), device) for k in layout.done_keys}, shape=lead, device=device
            )
    make = lambda d: Composite(d, shape=(E,), device=device)  # noqa: E731
    return {"observation": make(obs), "action": make(act), "reward": make(rew), "done": make(done)}


def action_views(layout: Layout, state) -> dict:
    """Views of ``state["action"]`` under the env's action keys, with the spec's shapes.

    A step copies each action of its input into its view, where the kernels read it.
    """
    actions = {}
    field_shape = layout.field_shape("action")
    for group, sl in layout.group_slices().items():
        if group is None:
            actions["action"] = state["action"][:, 0]
        else:
            shape = tuple(layout.action_spec_of(group).shape)
            actions[(group, "action")] = group_view(state["action"][:, sl], field_shape, shape)
    return actions
