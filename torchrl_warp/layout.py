"""What an environment declares: its state fields, agent groups, specs and kernels.

Examples:
    >>> import torch
    >>> from torchrl.data import Categorical
    >>> pos = Field("pos", (2,), per_agent=True)
    >>> pos.full_shape(num_envs=8, num_agents=3)
    (8, 3, 2)
    >>> layout = Layout(groups={"walkers": 3}, observation_shape=(4,),
    ...                 action_spec=Categorical(3), fields=[pos],
    ...                 reset=(), step=())
    >>> layout.num_agents
    3
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torchrl.data import TensorSpec

__all__ = ["Field", "GroupSpec", "Layout", "CORE_FIELDS", "DONE_KEYS", "group_view"]

#: the done flags of every environment (and of every agent, when agents can leave early)
DONE_KEYS = ("done", "terminated", "truncated")


@dataclass(frozen=True)
class Field:
    """One state tensor.

    Args:
        name: the name kernels use for it (a phase parameter of the same name receives it).
        shape: trailing shape of one element (``()`` for a scalar).
        dtype: torch dtype.
        per_agent: ``[num_envs, num_agents, *shape]`` if True, else ``[num_envs, *shape]``.
        scratch: working space of a kernel (a search's sorted lists, a grid), not part of
            the env's state proper: it may hold sentinels (NaN, infinities) between steps,
            and checks of the state (:mod:`~torchrl_warp.soak`) leave it out.
        derived: computed by the kernels from the rest of the state (counts, tallies of a
            step), so no start state of its own: a reset pool may not hold it.
    """

    name: str
    shape: tuple = ()
    dtype: torch.dtype = torch.float32
    per_agent: bool = False
    scratch: bool = False
    derived: bool = False

    def full_shape(self, num_envs: int, num_agents: int) -> tuple:
        lead = (num_envs, num_agents) if self.per_agent else (num_envs,)
        return lead + tuple(self.shape)

    def nbytes(self, num_envs: int, num_agents: int) -> int:
        n = 1
        for s in self.full_shape(num_envs, num_agents):
            n *= s
        return n * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class GroupSpec:
    """What one agent group has of its own, where groups differ (``Layout.group_specs``).

    Args:
        observation_shape: one agent's observation shape in this group (float32);
            ``None``: the layout's ``observation_shape``.
        action_spec: one agent's action spec in this group, without batch dims;
            ``None``: the layout's ``action_spec``. Every group's action spec must
            have the same dtype (all int64 indices, or all float32 values).

    Kernels see one ``observation`` field ``[E, N, D]`` and one ``action`` field
    ``[E, N, A]``, ``D`` and ``A`` the largest flattened sizes of any group: an agent
    writes the first ``prod(observation_shape)`` entries of its row and reads the first
    ``prod(action_spec.shape)`` of its action row (its group follows from its index).

    Examples:
        >>> from torchrl.data import Bounded, Categorical
        >>> layout = Layout({"speaker": 1, "listener": 2}, (3,), Categorical(3), [], (), (),
        ...                 group_specs={"listener": GroupSpec((5,), Categorical(5))})
        >>> layout.observation_shape_of("listener"), layout.field_shape("observation")
        ((5,), (5,))
    """

    observation_shape: tuple | None = None
    action_spec: TensorSpec | None = None


@dataclass
class Layout:
    """An environment's declaration, returned by ``WarpEnv._layout()``.

    Args:
        groups: agent groups in kernel order, name -> number of agents; agents of the
            first group have kernel indices ``0..n0-1``, then the next group, etc.
            ``None`` for a single-agent environment: its data sits at the root
            (``"observation"`` of shape ``[num_envs, *observation_shape]``).
        observation_shape: per-agent observation shape (float32).
        action_spec: per-agent action spec without batch dims (e.g. ``Categorical(2)``
            or ``MultiCategorical([21, 21])``); expanded to ``[num_envs, n, ...]``.
        fields: the environment's own state fields.
        reset: phases of the reset kernel that draw an env's start state, in order: phase
            functions, or tuples of them that run back to back with no barrier between
            (see :mod:`torchrl_warp.codegen`).
        step: phases of the step kernel.
        observe: phases the reset kernel runs after ``reset``: they derive from the start
            state what is not part of it (observations, counts, search structures). A
            reset pool's start states (:mod:`~torchrl_warp.reset_pool`) are copied in
            between, so an env takes a reset pool only if it declares them.
        agent_done: per-agent ``done``/``terminated``/``truncated`` inside each group
            (agents that leave the game early). Kernels write them as the fields
            ``agent_done``, ``agent_terminated``, ``agent_truncated``.
        constants: extra kernel arguments: Python scalars, or tensors that are
            moved to the env's device once (lookup tables).
        outputs_from_state: the step kernel writes every output (observation, reward,
            done flags) of every env it steps, from state fields alone: it never reads
            an output of the previous step. The env then lets a step write into an
            uninitialised buffer instead of a copy of the last outputs (one copy less
            per step; see :mod:`torchrl_warp.outputs`). Leave it False when a phase
            reads its own outputs (CartPole keeps its state in the observation).
        group_specs: group name -> :class:`GroupSpec`, for groups whose observation
            shape or action spec differ from ``observation_shape`` / ``action_spec``.
        truncation: the env hands out a ``truncated`` flag (its specs list it). Without
            one (VMAS's convention) an env's time limit sets ``terminated``; the kernels
            still write the ``truncated`` state field (always False then).
        max_registers: a cap on the CUDA kernels' registers per thread (``None``: the
            compiler's choice). Fewer registers fit more blocks on an SM; a cap can also
            mean fewer (a block of 256 threads at 112 registers: 2 per SM where 3 fit at
            80), which some kernels run faster with (Tag's grid at 1000 agents per env,
            docs/benchmarks.md). The CPU and the simulator ignore it.
        split_step: on CUDA (and in the simulator), run the step as one kernel per phase, one
            after the other, instead of one kernel with a barrier between phases; or, a tuple
            of phase indices, as one kernel per run of phases starting at each. A kernel
            holds every array it is given (address and strides) for its whole run: a step of
            many phases over many fields then needs more registers than fit (simple_tag's,
            10 substeps: 166 per thread, where its contact phase alone takes 31), and a split
            step gives each phase its own. Each part costs a launch (a few microseconds in a
            graph) and reads its inputs from memory. ``WarpEnv(split_step=...)`` overrides it.
    """

    groups: dict[str, int] | None
    observation_shape: tuple
    action_spec: TensorSpec
    fields: list[Field]
    reset: tuple
    step: tuple
    agent_done: bool = False
    constants: dict = field(default_factory=dict)
    outputs_from_state: bool = False
    max_registers: int | None = None
    group_specs: dict = field(default_factory=dict)
    truncation: bool = True
    observe: tuple = ()
    split_step: bool | tuple = False

    def __post_init__(self):
        unknown = set(self.group_specs) - set(self.groups or ())
        if unknown:
            raise ValueError(f"group_specs name groups the layout does not have: {', '.join(sorted(unknown))}")
        dtypes = {self.action_spec_of(g).dtype for g in self.groups or ()}
        if len(dtypes) > 1:
            raise ValueError(f"every group's action spec must have one dtype, got {', '.join(map(str, dtypes))}")

    @property
    def done_keys(self) -> tuple:
        """The done flags the env hands out: ``done``, ``terminated`` (and ``truncated``)."""
        return DONE_KEYS if self.truncation else DONE_KEYS[:2]

    def observation_shape_of(self, group) -> tuple:
        """One agent's observation shape in ``group`` (``None``: the single agent's)."""
        spec = self.group_specs.get(group)
        return tuple(self.observation_shape if spec is None or spec.observation_shape is None
                     else spec.observation_shape)

    def action_spec_of(self, group) -> TensorSpec:
        """One agent's action spec in ``group`` (``None``: the single agent's)."""
        spec = self.group_specs.get(group)
        return self.action_spec if spec is None or spec.action_spec is None else spec.action_spec

    def field_shape(self, name: str) -> tuple:
        """The per-agent shape of the ``observation`` or ``action`` field the kernels see: the
        groups' shape when they agree, else one row of the largest flattened size."""
        if name == "observation":
            shapes = [self.observation_shape_of(g) for g in (self.groups or [None])]
        else:
            shapes = [tuple(self.action_spec_of(g).shape) for g in (self.groups or [None])]
        if len(set(shapes)) == 1:
            return shapes[0]
        return (max(math.prod(s) for s in shapes),)

    @property
    def num_agents(self) -> int:
        return 1 if self.groups is None else sum(self.groups.values())

    def group_slices(self) -> dict[str | None, slice]:
        """Each group's range of kernel agent indices (``{None: 0:1}`` if single-agent)."""
        if self.groups is None:
            return {None: slice(0, 1)}
        out, start = {}, 0
        for name, n in self.groups.items():
            out[name] = slice(start, start + n)
            start += n
        return out

    def all_fields(self) -> list[Field]:
        """The environment's fields plus those every environment has."""
        core = list(CORE_FIELDS)
        core.append(Field("observation", self.field_shape("observation"), torch.float32, True))
        first = next(iter(self.groups)) if self.groups else None
        core.append(Field("action", self.field_shape("action"), self.action_spec_of(first).dtype, True))
        if self.agent_done:
            core += [Field(f"agent_{k}", (), torch.bool, True) for k in DONE_KEYS]
        names = [f.name for f in core]
        for f in self.fields:
            if f.name in names:
                raise ValueError(f"state field {f.name!r} is declared twice or shadows a core field")
            names.append(f.name)
        return core + list(self.fields)


#: per-env counters and flags, and per-agent rewards, that every environment has
CORE_FIELDS = (
    Field("step_count", (), torch.int32),
    Field("episode", (), torch.int32),
    Field("done", (), torch.bool),
    Field("terminated", (), torch.bool),
    Field("truncated", (), torch.bool),
    Field("reward", (), torch.float32, per_agent=True),
)


def group_view(rows: torch.Tensor, field_shape: tuple, shape: tuple) -> torch.Tensor:
    """A group's ``[E, n, *shape]`` view of its agents' rows ``[E, n, *field_shape]`` of a field
    that every group shares: the rows themselves when the shapes agree, else the first
    ``prod(shape)`` entries of each (flat) row, unflattened."""
    if tuple(shape) == tuple(field_shape):
        return rows
    if not shape:
        return rows[..., 0]
    return rows[..., : math.prod(shape)].unflatten(-1, tuple(shape))
