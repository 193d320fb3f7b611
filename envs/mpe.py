"""VMAS's MPE world for torchrl-warp: entities, physics, groups and ``MPEEnv``, the
drop-in for TorchRL's ``VmasEnv``.

A scenario is a :class:`MPEScenario`: it lists its agents and landmarks
(:class:`Agent`, :class:`Landmark`, VMAS's names and properties), its world
(:class:`World`), and its own kernels (placing entities on reset, observations and
rewards after the physics: :class:`ScenarioKernels`). The base class does the rest
once for every scenario: VMAS's action spaces (continuous with communication,
categorical, multi-categorical, one-hot), its physics (``torchrl_warp.cuda.mpe``), its
default grouping of agents (``VmasEnv``'s), ``max_steps``, ``clamp_actions``,
``terminated_truncated`` and ``render``, and what ``VmasEnv`` users read off the env
besides specs and keys: ``env.world`` (a read-only :class:`WorldView`: ``dt``,
``dim_p``, ``agents`` with their names and properties, ...), ``env.scenario`` (a
:class:`ScenarioView`), ``max_steps``, ``continuous_actions``, ``het_specs``...

State: ``pos`` and ``vel`` ``[num_envs, n_entities, 2]``, the agents first (VMAS's
agent order), then the landmarks (VMAS's ``world.entities`` lists landmarks first;
the order only changes float32 rounding in sums); ``comm`` ``[num_envs, n_agents,
max(dim_c, 1)]``, each agent's last message (VMAS's ``agent.state.c``).

Examples:
    >>> env = MPEEnv("simple_spread", num_envs=2, max_steps=25)
    >>> env.group_map, env.done_keys
    ({'agents': ['agent_0', 'agent_1', 'agent_2']}, ['done', 'terminated'])
    >>> env.rollout(3)["next", "agents", "observation"].shape
    torch.Size([2, 3, 3, 14])
    >>> env.world.dt, env.world.dim_p, [a.name for a in env.world.agents], env.scenario.name
    (0.1, 2, ['agent_0', 'agent_1', 'agent_2'], 'simple_spread')
"""
from __future__ import annotations

import importlib
import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import torch
from torchrl.data import Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot
from torchrl.envs.utils import MarlGroupMapType, check_marl_grouping

from torchrl_warp.cuda.mpe import (CATEGORICAL, CONTINUOUS, MULTI_CATEGORICAL, MULTI_ONE_HOT, ONE_HOT,
                                   collision_force, integrate, integrate_first, mpe_action, mpe_action_index, mpe_done,
                                   pad_observation, quiet)
from torchrl_warp.env import WarpEnv
from torchrl_warp.layout import Field, GroupSpec, Layout
from torchrl_warp.params import Param
from torchrl_warp.names import SCENARIO_NAMES

#: VMAS's entity colours (RGB in [0, 1])
COLORS = {"red": (0.75, 0.25, 0.25), "green": (0.25, 0.75, 0.25), "blue": (0.25, 0.25, 0.75),
          "light_green": (0.45, 0.95, 0.45), "white": (0.75, 0.75, 0.75), "gray": (0.25, 0.25, 0.25),
          "black": (0.15, 0.15, 0.15)}

__all__ = ["COLORS", "Agent", "Landmark", "Sphere", "World", "WorldView", "ScenarioView", "ScenarioKernels",
           "MPEScenario", "MPEEnv", "SCENARIOS", "SCENARIO_NAMES", "common_parameters", "default_group_map"]


@dataclass(frozen=True)
class Sphere:
    """An entity's shape, as VMAS's ``Sphere``: ``entity.shape.radius``."""

    radius: float


@dataclass(frozen=True)
class Landmark:
    """A VMAS entity that is not an agent (a sphere). Defaults are VMAS's ``Landmark``'s."""

    name: str
    radius: float = 0.05
    collide: bool = True
    movable: bool = False
    mass: float = 1.0
    max_speed: float | None = None
    color: tuple = (0.25, 0.25, 0.25)

    @property
    def shape(self) -> Sphere:
        """VMAS's ``entity.shape`` (every MPE entity is a sphere of ``radius``)."""
        return Sphere(self.radius)


@dataclass(frozen=True)
class Agent(Landmark):
    """A VMAS agent: a sphere with an action (defaults are VMAS's ``Agent``'s).

    Args:
        observation_size: the length of its observation vector.
        u_multiplier: force per unit of action; u_range: the action bound.
        silent: whether it has no communication action (VMAS's ``silent``).
    """

    collide: bool = True
    movable: bool = True
    observation_size: int = 0
    u_multiplier: float = 1.0
    u_range: float = 1.0
    silent: bool = True


@dataclass(frozen=True)
class World:
    """What a scenario sets on VMAS's ``World``: communication size and world bounds
    (``None``: unbounded). Time step, drag, substeps and contact forces are parameters
    (:func:`common_parameters`)."""

    dim_c: int = 0
    x_semidim: float | None = None
    y_semidim: float | None = None


class _ReadOnly:
    """Attributes set once, by the constructor; assigning one later raises ``AttributeError``."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__}.{name} is read-only: it shows the env as it was built "
                             f"(build a new env to change it; env.state holds what a step changes)")

    def _set(self, **values):
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setstate__(self, state):  # copy and pickle set the slots through here
        dict_state, slots = state if isinstance(state, tuple) else (state, None)
        self._set(**(dict_state or {}), **(slots or {}))


class _EntityState(_ReadOnly):
    """VMAS's ``entity.state``: ``pos``, ``vel`` ``[num_envs, 2]`` (and an agent's last message
    ``c`` ``[num_envs, dim_c]``, ``None`` if silent or ``dim_c`` is 0), views of ``env.state``."""

    __slots__ = ("_env", "_index", "_talks")

    def __init__(self, env, index: int, talks: bool):
        self._set(_env=env, _index=index, _talks=talks)

    @property
    def pos(self):
        return self._env.state["pos"][:, self._index]

    @property
    def vel(self):
        return self._env.state["vel"][:, self._index]

    @property
    def c(self):
        return self._env.state["comm"][:, self._index] if self._talks else None


class _EntityView(_ReadOnly):
    """An agent or landmark of :class:`WorldView`: its declaration's attributes (``name``,
    ``shape.radius``, ``mass``, ``max_speed``, ``u_range``, ``silent``, ``color``...) and
    ``state`` (VMAS's ``entity.state``: positions and velocities of every env)."""

    __slots__ = ("_declared", "state")

    def __init__(self, declared, state):
        self._set(_declared=declared, state=state)

    def __getattr__(self, name):
        declared = object.__getattribute__(self, "_declared")  # AttributeError before __init__ (a copy)
        try:
            return getattr(declared, name)
        except AttributeError:
            raise AttributeError(f"{type(declared).__name__} {declared.name!r} has no attribute {name!r}") from None

    def __repr__(self):
        return f"{type(self._declared).__name__}({self._declared.name!r})"


class WorldView(_ReadOnly):
    """What ``VmasEnv`` users read off ``env.world``, read-only, with VMAS's values for the same
    scenario and arguments: ``dt``, ``dim_p`` (2), ``dim_c``, ``x_semidim``, ``y_semidim``
    (``None``: unbounded), ``agents`` and ``policy_agents`` (``name``, ``shape.radius``,
    ``mass``, ``max_speed``, ``u_range``, ``u_multiplier``, ``silent``, ``color``, and
    ``state.pos`` / ``state.vel`` of every env), ``landmarks``, ``entities`` (landmarks first,
    VMAS's order), ``scripted_agents`` (none), ``joints`` (none), ``batch_dim`` (``num_envs``)
    and ``device``; and the physics VMAS keeps private: ``substeps``, ``sub_dt``, ``drag``,
    ``collision_force``, ``contact_margin``.

    Examples:
        >>> env = MPEEnv("simple_tag", num_envs=2)
        >>> world = env.world
        >>> 1 / world.dt, world.substeps, world.x_semidim, world.agents[0].name, world.agents[0].shape.radius
        (10.0, 10, 1.0, 'adversary_0', 0.075)
        >>> world.agents[0].state.pos.shape
        torch.Size([2, 2])
    """

    __slots__ = ("dt", "substeps", "sub_dt", "drag", "collision_force", "contact_margin", "dim_p", "dim_c",
                 "x_semidim", "y_semidim", "agents", "landmarks", "batch_dim", "device")

    def __init__(self, env, world: World, agents, landmarks, p):
        talk = world.dim_c > 0
        n = len(agents)
        self._set(
            dt=p.dt, substeps=p.substeps, sub_dt=p.dt / p.substeps, drag=p.drag,
            collision_force=p.collision_force, contact_margin=p.contact_margin, dim_p=2, dim_c=world.dim_c,
            x_semidim=world.x_semidim, y_semidim=world.y_semidim,
            agents=tuple(_EntityView(a, _EntityState(env, i, talk and not a.silent)) for i, a in enumerate(agents)),
            landmarks=tuple(_EntityView(lm, _EntityState(env, n + i, False)) for i, lm in enumerate(landmarks)),
            batch_dim=env.num_envs, device=env.device)

    @property
    def policy_agents(self) -> tuple:
        """The agents a policy acts for: all of them (VMAS's ``world.policy_agents``)."""
        return self.agents

    @property
    def scripted_agents(self) -> tuple:
        """Agents moved by a script: none in MPE."""
        return ()

    @property
    def entities(self) -> tuple:
        """The landmarks, then the agents (VMAS's ``world.entities``)."""
        return self.landmarks + self.agents

    @property
    def joints(self) -> tuple:
        """None in MPE."""
        return ()

    def __repr__(self):
        return (f"WorldView(dt={self.dt}, substeps={self.substeps}, dim_p={self.dim_p}, dim_c={self.dim_c}, "
                f"agents={[a.name for a in self.agents]}, landmarks={len(self.landmarks)})")


class ScenarioView(_ReadOnly):
    """``env.scenario`` on an instance: what ``VmasEnv``'s scenario object answers of it. ``name``
    (VMAS's scenario name; ``str()`` of the view), ``world`` (``env.world``), ``info(agent)``
    (``{}``: MPE scenarios report no info, so no ``(group, "info")`` spec, as ``VmasEnv``), and the
    scenario's own parameters as attributes (``env.scenario.n_agents``). On the class,
    ``SimpleTagEnv.scenario`` is the name.

    Examples:
        >>> env = MPEEnv("simple_spread", num_envs=2, n_agents=4)
        >>> str(env.scenario), env.scenario.n_agents, env.scenario.world is env.world
        ('simple_spread', 4, True)
    """

    __slots__ = ("name", "world", "_params")

    def __init__(self, name: str, world: WorldView, params: dict):
        self._set(name=name, world=world, _params=dict(params))

    def __getattr__(self, name):
        params = object.__getattribute__(self, "_params")
        if name in params:
            return params[name]
        raise AttributeError(f"scenario {self.name!r} has no attribute {name!r}; its parameters: "
                             f"{', '.join(params) or 'none'}")

    def info(self, agent) -> dict:
        """VMAS's ``scenario.info(agent)``: the agent's info entries; none in these scenarios."""
        return {}

    def __str__(self):
        return self.name

    def __repr__(self):
        return f"ScenarioView({self.name!r})"


class _ScenarioName:
    """``scenario``: the VMAS name on the class (``SimpleTagEnv.scenario == "simple_tag"``), the
    env's :class:`ScenarioView` on an instance (``VmasEnv``'s ``env.scenario``)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, env, owner=None):
        if env is None:
            return self.name
        view = env.__dict__.get("_scenario_view")
        if view is None:
            raise AttributeError(f"{type(env).__name__}.scenario is set once the env is built")
        return view


@dataclass
class ScenarioKernels:
    """A scenario's own part of the kernels.

    Args:
        reset: phases that place the entities on reset (the start state).
        observe: phases that derive the first observation from it.
        step: phases after the physics: observations, rewards.
        fields: the scenario's extra state fields.
        constants: its extra kernel constants.
    """

    reset: tuple
    step: tuple
    observe: tuple = ()
    fields: list = field(default_factory=list)
    constants: dict = field(default_factory=dict)


#: registers per thread the MPE step and reset kernels may use (``Layout.max_registers``):
#: ptxas takes 166 for simple_tag's step (occupancy 19%); capped, it runs faster (H200,
#: step kernel alone: simple_tag 3+1 30k envs 109 -> 82 us, 100k 297 -> 231 us, 10+100 at 1k
#: envs 1484 -> 1146 us; simple_spread unchanged; docs/benchmarks.md)
MPE_MAX_REGISTERS = 64

#: with more than one substep, the step as two kernels: the physics' substeps, then the
#: scenario's phases (observations, rewards, done flags). ptxas (sm_90) gives simple_tag's
#: physics 63 registers and its scenario phases 150, which in one kernel capped at 64 spill
#: ~670 bytes per thread, reloaded in every substep; with one substep the split saves nothing.
#: Off: measured on an H100, +5% at 100k envs of simple_tag 3 + 1, -16% at 10 + 100
#: (``bench --env simple_tag --split-step fused 20``; docs/benchmarks.md)
SPLIT_SUBSTEPS = False


def common_parameters(substeps: int = 1, collision_force: float = 100.0, max_steps: int = 0, dt: float = 0.1,
                      drag: float = 0.25, contact_margin: float = 1e-3) -> dict:
    """The parameters every MPE scenario has: VmasEnv's arguments and VMAS's World physics,
    with a scenario's own defaults for those it changes (simple_tag: 10 substeps, force 500).
    ``max_steps`` defaults to 0, no time limit: ``VmasEnv``'s (and ``MPEEnv``'s) ``max_steps=None``."""
    return {
        "continuous_actions": Param(True, "continuous forces (and messages) if True, else discrete choices"),
        "categorical_actions": Param(True, "discrete actions as indices (Categorical) if True, else one-hot"),
        "multidiscrete_actions": Param(False, "discrete actions as one index per component (MultiCategorical)"),
        "clamp_actions": Param(False, "clamp out-of-range continuous actions (VMAS's clamp_actions); else "
                                      "check_actions refuses them"),
        "terminated_truncated": Param(False, "the time limit sets truncated (else terminated, as VMAS's single done)"),
        "max_steps": Param(max_steps, "episode length; 0: no limit (VmasEnv's max_steps=None)", ge=0),
        "dt": Param(dt, "seconds per step (VMAS World.dt)", gt=0),
        "substeps": Param(substeps, "physics substeps per step (VMAS World.substeps)", ge=1, le=100),
        "drag": Param(drag, "velocity lost at each step (VMAS World.drag)", ge=0, le=1),
        "collision_force": Param(collision_force, "contact force multiplier (VMAS World.collision_force)", ge=0),
        "contact_margin": Param(contact_margin, "softness of contacts (VMAS World.contact_margin)", gt=0),
    }


def default_group_map(agent_names: list[str]) -> dict[str, list[str]]:
    """``VmasEnv``'s grouping: agents named ``<group>_<int>`` grouped by ``<group>``, else all
    in ``"agents"``; a lone group ``"agent"`` is called ``"agents"``.

    >>> default_group_map(["adversary_0", "adversary_1", "agent_0"])
    {'adversary': ['adversary_0', 'adversary_1'], 'agent': ['agent_0']}
    """
    groups: dict[str, list[str]] = {}
    for name in agent_names:
        parts = name.split("_")
        if len(parts) == 1 or not parts[-1].isdigit():
            return {"agents": list(agent_names)}
        groups.setdefault("_".join(parts[:-1]), []).append(name)
    if list(groups) == ["agent"]:
        return {"agents": groups["agent"]}
    return groups


def _resolve_group_map(owner: str, agent_names: list[str], group_map) -> dict[str, list[str]]:
    if group_map is None:
        return default_group_map(agent_names)
    if isinstance(group_map, MarlGroupMapType):
        group_map = group_map.get_group_map(agent_names)
    if not isinstance(group_map, dict):
        raise TypeError(f"{owner}: group_map must be None, a MarlGroupMapType or a dict of group name -> agent "
                        f"names, got {type(group_map).__name__}")
    group_map = {g: list(names) for g, names in group_map.items()}
    try:
        check_marl_grouping(group_map, agent_names)
    except Exception as err:  # noqa: BLE001 - TorchRL raises bare Exceptions here
        raise ValueError(f"{owner}: invalid group_map: {err}") from None
    order = [name for names in group_map.values() for name in names]
    if order != list(agent_names):
        raise ValueError(f"{owner}: group_map must list the agents in the scenario's order, each group a run of "
                         f"consecutive agents ({', '.join(agent_names)}); got {', '.join(order)}")
    return group_map


class MPEScenario(WarpEnv):
    """Base class of the MPE scenarios (see the module docstring).

    Args:
        num_envs: as :class:`WarpEnv`'s.
        device: as :class:`WarpEnv`'s.
        group_map: ``VmasEnv``'s: ``None`` (its default grouping), a
            ``MarlGroupMapType``, or a dict of group -> agent names (each group a run of
            consecutive agents); agents of one group must agree in observation size and
            action space (VmasEnv would stack them lazily).
        **kwargs: :class:`WarpEnv`'s other arguments (``seed``, ``check_actions``,
            ``cuda_graphs``, ``backend``, ...), the scenario's parameters (VMAS's scenario
            kwargs) and :func:`common_parameters`.

    As VMAS's, the env is reset when it is built: a step before any ``reset()`` steps from
    that start (other envs refuse it), and the first ``reset()`` draws the same start again.

    A subclass sets ``scenario`` (VMAS's name) and ``parameters``, and implements
    ``_agents(p)``, ``_landmarks(p)``, ``_world(p)`` and ``_kernels(p)``.
    """

    scenario: str = ""
    parameters = common_parameters()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("scenario")
        if isinstance(name, str):
            cls.scenario = _ScenarioName(name)

    def __init__(self, num_envs: int = 1, device="cpu", *, group_map=None, _built_as: str | None = None, **kwargs):
        self._group_map_arg = group_map
        self._built_as = _built_as  # MPEEnv's name for the env, in its errors
        super().__init__(num_envs, device, **kwargs)
        # VMAS resets its world when it is built (a step before any reset steps from there);
        # the episode counters restart, so the first reset() draws this same start again
        self._reset()
        self.state["episode"].zero_()

    @classmethod
    def scenario_parameters(cls) -> dict:
        """The parameters that are the scenario's own, or whose defaults it changes (the rest are
        :func:`common_parameters`, documented once)."""
        common = common_parameters()
        return {name: p for name, p in cls.parameters.items() if common.get(name) != p}

    # ----- what a scenario provides ------------------------------------------------------
    def _agents(self, p) -> list[Agent]:
        raise NotImplementedError

    def _landmarks(self, p) -> list[Landmark]:
        raise NotImplementedError

    def _world(self, p) -> World:
        return World()

    def _kernels(self, p) -> ScenarioKernels:
        raise NotImplementedError

    # ----- the layout every scenario shares -----------------------------------------------
    def _check_params(self, p) -> None:
        if p.clamp_actions and not p.continuous_actions:
            raise ValueError(f"{self._owner}: clamp_actions applies to continuous actions only "
                             f"(VMAS checks discrete ones and never clamps them)")

    def _action_spec(self, agent: Agent, p, dim_c: int):
        talk = dim_c if (not agent.silent and dim_c > 0) else 0
        if p.continuous_actions:
            low = torch.tensor([-agent.u_range] * 2 + [0.0] * talk)
            high = torch.tensor([agent.u_range] * 2 + [1.0] * talk)
            return Bounded(low, high, (2 + talk,), dtype=torch.float32)
        nvec = [3, 3] + ([talk] if talk else [])
        if p.multidiscrete_actions:
            return MultiCategorical(nvec) if p.categorical_actions else MultiOneHot(nvec, dtype=torch.long)
        n = math.prod(nvec)
        return Categorical(n) if p.categorical_actions else OneHot(n, dtype=torch.long)

    def _action_encoding(self, p) -> int:
        if p.continuous_actions:
            return CONTINUOUS
        if p.multidiscrete_actions:
            return MULTI_CATEGORICAL if p.categorical_actions else MULTI_ONE_HOT
        return CATEGORICAL if p.categorical_actions else ONE_HOT

    def _layout(self, p):
        name = self._owner
        agents, landmarks, world = self._agents(p), self._landmarks(p), self._world(p)
        self.agents, self.landmarks = agents, landmarks
        self.world = WorldView(self, world, agents, landmarks, p)
        common = common_parameters()
        own = {k: v for k, v in vars(p).items() if k not in common}
        self._scenario_view = ScenarioView(type(self).scenario, self.world, own)
        self.clamps_actions = p.clamp_actions
        self.agent_names = [a.name for a in agents]
        self.group_map = _resolve_group_map(name, self.agent_names, self._group_map_arg)
        self.n_agents = len(agents)
        specs = [self._action_spec(a, p, world.dim_c) for a in agents]
        groups, group_specs, start = {}, {}, 0
        for group, names in self.group_map.items():
            members = range(start, start + len(names))
            sizes = {agents[i].observation_size for i in members}
            kinds = {repr(specs[i]) for i in members}
            if len(sizes) > 1 or len(kinds) > 1:
                raise ValueError(
                    f"{name}: group {group!r} mixes agents whose observation sizes or action spaces differ "
                    f"({', '.join(names)}); VmasEnv would need lazy stacks for it: group them apart")
            groups[group] = len(names)
            group_specs[group] = GroupSpec((agents[start].observation_size,), specs[start])
            start += len(names)

        entities = list(agents) + list(landmarks)
        f64 = torch.float64
        scenario = self._kernels(p)
        encoding = self._action_encoding(p)
        act = mpe_action_index if encoding == CATEGORICAL else mpe_action  # [E, N] indices, or rows
        step = [(act, collision_force), integrate_first]
        for _ in range(p.substeps - 1):
            step += [collision_force, integrate]
        physics = len(step)  # the physics' phases, then the scenario's: a kernel each (SPLIT_SUBSTEPS)
        step += list(scenario.step) + [(pad_observation, mpe_done)]
        semidim = [math.inf if s is None else s for s in (world.x_semidim, world.y_semidim)]
        if getattr(p, "dim_c", world.dim_c) != world.dim_c:
            raise ValueError(f"{name}: parameter dim_c ({p.dim_c}) must be the world's ({world.dim_c})")
        first = next(iter(group_specs.values()))
        return Layout(
            groups=groups,
            observation_shape=first.observation_shape,
            action_spec=first.action_spec,
            group_specs=group_specs,
            fields=[
                Field("pos", (len(entities), 2)),
                Field("vel", (len(entities), 2)),
                Field("u", (2,), per_agent=True),
                Field("comm", (max(world.dim_c, 1),), per_agent=True),
                Field("force", (2,), per_agent=True, scratch=True),
                *scenario.fields,
            ],
            reset=(quiet,) + tuple(scenario.reset),
            observe=tuple(scenario.observe) + (pad_observation,),
            step=tuple(step),
            outputs_from_state=True,
            truncation=p.terminated_truncated,
            max_registers=MPE_MAX_REGISTERS,
            split_step=(physics,) if SPLIT_SUBSTEPS and p.substeps > 1 else False,
            constants={
                "entity_size": torch.tensor([e.radius for e in entities], dtype=f64),
                "entity_collide": torch.tensor([float(e.collide) for e in entities], dtype=f64),
                "entity_movable": torch.tensor([float(e.movable) for e in entities], dtype=f64),
                "entity_mass": torch.tensor([e.mass for e in entities], dtype=f64),
                "entity_max_speed": torch.tensor([e.max_speed or 0.0 for e in entities], dtype=f64),
                "agent_u_multiplier": torch.tensor([a.u_multiplier for a in agents], dtype=f64),
                "agent_u_range": torch.tensor([a.u_range for a in agents], dtype=f64),
                "agent_talks": torch.tensor([float(not a.silent) for a in agents], dtype=f64),
                "agent_observation_size": torch.tensor([a.observation_size for a in agents], dtype=torch.int32),
                "semidim": torch.tensor(semidim, dtype=torch.float32),
                "action_encoding": encoding,
                "collision_force_multiplier": p.collision_force,
                "sub_dt": p.dt / p.substeps,
                **scenario.constants,
                # the world's message size, unless it is a parameter of that name (simple_crypto's)
                **({} if hasattr(p, "dim_c") else {"dim_c": world.dim_c}),
            },
        )

    # ----- VmasEnv's action reading -------------------------------------------------------
    def _step(self, tensordict):
        """A one-hot action of floats is read as ``VmasEnv`` reads it (its spec's
        ``to_categorical``, whatever the dtype): torch's ``OneHotCategorical`` samples floats,
        and TorchRL's discrete SAC example steps them. Its values must be 0 or 1 (under
        ``check_actions``); it is then taken as the spec's int64. The caller's tensordict
        keeps its floats."""
        if self.continuous_actions or self.categorical_actions:
            return super()._step(tensordict)
        floats = [k for k in self._actions
                  if isinstance(v := tensordict.get(k, None), torch.Tensor) and v.is_floating_point()]
        if floats:
            tensordict = tensordict.copy()  # shallow: the caller's entries stay as they were
            for key in floats:
                value = tensordict.get(key)
                if self.check_actions and bool(((value != 0) & (value != 1)).any()):
                    raise ValueError(f"{self._owner}.step: one-hot action {key!r} of dtype {value.dtype} has values "
                                     f"other than 0 and 1 (VmasEnv would take their argmax): pass a one-hot, or "
                                     f"indices with categorical_actions=True")
                tensordict.set(key, value.to(self._action_specs[key].dtype))
        return super()._step(tensordict)

    # ----- VmasEnv's attributes and rendering ---------------------------------------------
    @property
    def scenario_name(self) -> str:
        """VMAS's name of the scenario (``VmasEnv.scenario_name``)."""
        return type(self).scenario

    @property
    def max_steps(self) -> int | None:
        """The episode length, ``None`` without a limit (``VmasEnv.max_steps``)."""
        return self.params.max_steps or None

    @property
    def continuous_actions(self) -> bool:
        return self.params.continuous_actions

    @property
    def categorical_actions(self) -> bool:
        return self.params.categorical_actions

    @property
    def multidiscrete_actions(self) -> bool:
        return self.params.multidiscrete_actions

    @property
    def terminated_truncated(self) -> bool:
        return self.params.terminated_truncated

    @property
    def clamp_action(self) -> bool:
        """VMAS's name of ``clamp_actions`` (``Environment.clamp_action``)."""
        return self.params.clamp_actions

    #: VmasEnv's: tuple spaces, no gradients, no pixels (refused as arguments, see MPEEnv)
    dict_spaces = grad_enabled = from_pixels = pixels_only = False

    @property
    def het_specs(self) -> bool:
        """Whether a group stacks agents of different specs lazily: never (such groups are refused)."""
        return False

    @property
    def het_specs_map(self) -> dict:
        return {group: False for group in self.group_map}

    @property
    def agent_names_to_indices_map(self) -> dict:
        return {name: i for i, name in enumerate(self.agent_names)}

    def render(self, mode: str = "rgb_array", env_index: int = 0, agent_index_focus=None,
               visualize_when_rgb: bool = False, resolution: int = 400, **kwargs) -> np.ndarray:
        """An RGB frame ``[resolution, resolution, 3]`` (uint8) of env ``env_index``: every entity a
        disc of its colour and radius (VMAS's view: the world's bounds, else [-1, 1]^2 grown to
        fit every entity). Only ``mode="rgb_array"``: there is no window."""
        from torchrl_warp.render import draw_discs

        if mode != "rgb_array":
            raise ValueError(f"{type(self).__name__}.render: only mode='rgb_array' is supported (no display), "
                             f"got {mode!r}")
        if agent_index_focus is not None or visualize_when_rgb or kwargs:
            given = [k for k, v in (("agent_index_focus", agent_index_focus),
                                    ("visualize_when_rgb", visualize_when_rgb)) if v] + sorted(kwargs)
            raise ValueError(f"{type(self).__name__}.render does not support {', '.join(given)}")
        if isinstance(env_index, bool) or not isinstance(env_index, numbers.Integral):
            raise TypeError(f"{type(self).__name__}.render: env_index must be an int, got {env_index!r}")
        if not 0 <= env_index < self.num_envs:
            raise IndexError(f"env_index {env_index} is outside [0, {self.num_envs})")
        env_index = int(env_index)
        entities = list(self.agents) + list(self.landmarks)
        pos = self.state["pos"][env_index].detach().cpu().double().numpy()
        radii = np.array([e.radius for e in entities])
        bounds = [s for s in (self.world.x_semidim, self.world.y_semidim) if s is not None]
        extent = max(bounds) if bounds else max(1.0, float(np.abs(pos).max() + radii.max()))
        # landmarks under agents, as VMAS draws them
        order = list(range(len(self.agents), len(entities))) + list(range(len(self.agents)))
        return draw_discs(pos[order], radii[order], [entities[i].color for i in order], extent, resolution)


#: VMAS scenario name -> its class (each scenario module adds itself when imported)
SCENARIOS: dict[str, type] = {}

#: VmasEnv/make_env arguments that cannot apply to kernels, and why
_UNSUPPORTED = {
    "dict_spaces": "TorchRL's VmasEnv reads tuple spaces only (its outputs are the same either way)",
    "grad_enabled": "the kernels compute no gradients",
    "from_pixels": "rendering is on the host: use env.render(mode='rgb_array')",
    "pixels_only": "rendering is on the host: use env.render(mode='rgb_array')",
    "wrapper": "MPEEnv is the TorchRL env itself",
}


def MPEEnv(scenario: str, num_envs: int = 1, device="cpu", continuous_actions: bool = True,
           categorical_actions: bool = True, max_steps: int | None = None, group_map=None, seed: int | None = None,
           scenario_kwargs: dict | None = None, **kwargs) -> MPEScenario:
    """An MPE scenario with ``torchrl.envs.libs.vmas.VmasEnv``'s arguments and outputs.

    ``VmasEnv(scenario, num_envs=..., ...)`` becomes ``MPEEnv(scenario, num_envs=..., ...)``:
    the same group names, keys, specs, ``group_map``, ``n_agents``, ``reward_key``,
    ``done_keys`` (``done`` and ``terminated``; ``truncated`` too with
    ``terminated_truncated=True``). ``clamp_actions``, ``multidiscrete_actions``,
    ``terminated_truncated`` are VMAS's ``make_env`` arguments; ``scenario_kwargs`` and
    other keyword arguments are the scenario's (``n_agents``, ``num_adversaries``...) or
    :class:`WarpEnv`'s (``check_actions``, ``cuda_graphs``, ``backend``).
    ``dict_spaces``, ``grad_enabled``, ``from_pixels`` and ``wrapper`` are refused.

    Examples:
        >>> env = MPEEnv("simple_tag", num_envs=4, continuous_actions=False, max_steps=100)
        >>> env.group_map
        {'adversary': ['adversary_0', 'adversary_1', 'adversary_2'], 'agent': ['agent_0']}
        >>> env.full_action_spec["adversary", "action"]
        Categorical(...)
    """
    if not isinstance(scenario, str):
        raise TypeError(f"MPEEnv: scenario must be a scenario name (one of {', '.join(SCENARIO_NAMES)}), "
                        f"got {type(scenario).__name__}")
    name = scenario[:-3] if scenario.endswith(".py") else scenario
    if name not in SCENARIO_NAMES:
        raise ValueError(f"MPEEnv: unknown scenario {scenario!r}; available: {', '.join(SCENARIO_NAMES)}")
    importlib.import_module(f"torchrl_warp.envs.{name}")  # adds it to SCENARIOS
    for key, why in _UNSUPPORTED.items():
        if kwargs.get(key):
            raise ValueError(f"MPEEnv: {key}=True is not supported: {why}")
        kwargs.pop(key, None)
    params = {**(scenario_kwargs or {}), **kwargs}
    owner = f"MPEEnv({name!r})"
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral)
                                  or max_steps < 1):
        raise ValueError(f"{owner}: max_steps must be a positive int or None, got {max_steps!r}")
    return SCENARIOS[name](num_envs=num_envs, device=device, continuous_actions=continuous_actions,
                           categorical_actions=categorical_actions, max_steps=int(max_steps or 0),
                           group_map=group_map, seed=seed, _built_as=owner, **params)
