"""WarpEnv: a TorchRL ``EnvBase`` whose batched state is stepped in place by kernels.

A subclass declares what is specific to it (parameters, state fields, groups,
specs, phase functions: see :class:`~torchrl_warp.layout.Layout`); WarpEnv does
the rest once: validation, allocation, specs, kernel compilation and launch,
partial resets, seeding, outputs.

Examples:
    >>> from torchrl_warp.envs import CartPoleEnv
    >>> env = CartPoleEnv(num_envs=4)
    >>> td = env.rollout(3)
    >>> td["next", "observation"].shape
    torch.Size([4, 3, 4])
"""
from __future__ import annotations

import numbers
import re
from types import SimpleNamespace

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase

from torchrl_warp.backends import make_backend
from torchrl_warp.checks import check_action, check_flag, check_mask, check_memory, check_seed, resolve_device
from torchrl_warp.codegen import BUILTIN_ARGUMENTS, DRIVER_NAMES, KernelSpec
from torchrl_warp.layout import DONE_KEYS, Layout
from torchrl_warp.outputs import OUTPUT_FIELDS, Outputs
from torchrl_warp.params import Param, check_params, table_bytes
from torchrl_warp.reset_pool import POOL_PREFIX, check_reset_pool, pool_phase, with_fixed_starts
from torchrl_warp.specs import action_views, build_specs

__all__ = ["WarpEnv"]


class WarpEnv(EnvBase):
    """Base class of torchrl-warp environments.

    Args:
        num_envs: number of environments stepped together (the env's batch size).
        device: ``"cpu"`` (numba CPU backend, or the CUDA simulator when
            ``NUMBA_ENABLE_CUDASIM=1``) or ``"cuda"``/``"cuda:N"`` (Numba-CUDA kernels).
        backend: force ``"cuda"``, ``"cpu"`` or ``"cudasim"``; ``None`` picks from ``device``.
            ``"cpu_checked"``: the CPU backend's loop run as Python over arrays that check
            every index (slow: for finding bugs; :func:`~torchrl_warp.check_env` runs it).
            A phase that reads or writes outside a field raises an ``IndexError`` naming
            the env, the kernel, the phase, the field, its shape and the index.
        check_actions: check that action values lie in their spec. Shape, dtype and
            device are always checked (metadata only); the value check syncs with
            the device, so switch it off for full speed (kernels clamp indices anyway).
        cuda_graphs: on the CUDA backend, replay each kernel launch from a captured
            CUDA graph instead of launching it from Python (same kernel, less overhead).
        seed: the RNG seed, an int in ``[0, 2**64 - 1]``; ``None`` draws one from
            torch's global generator.
        reset_pool: start states that resetting envs draw from (see :meth:`set_reset_pool`).
        split_step: on CUDA (and in the simulator), step with one kernel per phase instead
            of one for the whole step, or with a tuple of phase indices one kernel per run of
            phases starting at each (``None``: the env's choice, ``Layout.split_step``); the
            same results either way. The CPU backends run one loop.
        feature_major_observations: store each env's observations feature by feature (every
            agent's feature ``k`` side by side), so that the kernels' stores of one feature by
            consecutive agents are consecutive in memory; the observations are handed out as
            the same ``[..., n, D]`` tensors, viewed with strides ``(1, n)`` over the last two
            dims (not contiguous). The values are the same either way.
        **params: the environment's parameters (see its ``parameters``); unknown
            names and wrong types raise ``TypeError``, values outside their range ``ValueError``.

    Every argument is checked before anything is allocated (NumPy ints are taken where
    ints are). An env must be reset before its first step, and again after ``close()``
    (a step is refused until then). Subclasses declare
    ``parameters`` (name -> :class:`~torchrl_warp.params.Param`: default, range, doc),
    implement ``_layout(p)``, and may implement ``_check_params(p)`` for rules that
    tie several parameters together (raise ``ValueError``). ``defaults`` (name ->
    default) is derived from ``parameters``.
    """

    parameters: dict[str, Param] = {}
    defaults: dict = {}
    #: the kernels clamp out-of-range actions as the env's reference does (VMAS's
    #: ``clamp_actions=True``): ``check_actions`` then refuses only NaN and infinities
    clamps_actions: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "defaults" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: declare parameters as `parameters = {{name: Param(default, doc, "
                            f"...)}}` (torchrl_warp.params); `defaults` is derived from them")
        cls.defaults = {name: p.default for name, p in cls.parameters.items()}

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        *,
        backend: str | None = None,
        check_actions: bool = True,
        cuda_graphs: bool = True,
        seed: int | None = None,
        reset_pool=None,
        split_step: bool | tuple | None = None,
        feature_major_observations: bool = False,
        **params,
    ):
        name = self._owner
        if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
            raise ValueError(f"{name}: num_envs must be a positive int, got {num_envs!r}")
        num_envs = int(num_envs)
        check_flag(name, "check_actions", check_actions)
        check_flag(name, "cuda_graphs", cuda_graphs)
        if split_step is not None and not isinstance(split_step, tuple):
            check_flag(name, "split_step", split_step)
        check_flag(name, "feature_major_observations", feature_major_observations)
        seed = check_seed(name, seed)
        values = check_params(name, self.parameters, params)
        self.params = SimpleNamespace(**values)
        self._check_params(self.params)
        device = resolve_device(device)
        check_memory(name, table_bytes(self.parameters, values), device, f"num_envs={num_envs}",
                     contents="lookup tables of its parameters", advice="use smaller parameters")
        super().__init__(device=device, batch_size=[num_envs])
        self.num_envs = num_envs
        self.check_actions = check_actions
        self.layout: Layout = self._layout(self.params)
        self.num_agents = self.layout.num_agents

        fields = self.layout.all_fields()
        outputs = tuple(f.name for f in fields if f.name in OUTPUT_FIELDS)
        self._reset_pool = self._checked_pool(reset_pool)
        self._kernels = {"reset": self._reset_spec(self._reset_pool, outputs),
                         "step": KernelSpec("step", tuple(self.layout.step), outputs, self.layout.max_registers)}
        self._check_kernel_names([f.name for f in fields])
        needed = sum(f.nbytes(num_envs, self.num_agents) for f in fields) + sum(
            v.numel() * v.element_size() for v in self.layout.constants.values() if isinstance(v, torch.Tensor))
        check_memory(name, 2 * needed, device, f"num_envs={num_envs}, {self.num_agents} agents per env")

        self._backend = make_backend(backend, device, cuda_graphs, label=name, fields=fields)
        self.backend = self._backend.name
        self._outputs = Outputs(self.layout, num_envs, device, feature_major=feature_major_observations)
        self.feature_major_observations = feature_major_observations
        outputs_now = self._outputs.fields
        self._state = TensorDict(
            {
                f.name: outputs_now[f.name] if f.name in OUTPUT_FIELDS
                else torch.zeros(f.full_shape(num_envs, self.num_agents), dtype=f.dtype, device=device)
                for f in fields
            },
            batch_size=[num_envs],
            device=device,
        )
        self._state_generation = self._outputs.generation
        # which envs the next launch of each kernel touches (all, unless masked)
        self._masks = {kind: torch.ones(num_envs, dtype=torch.bool, device=device) for kind in self._kernels}
        self._masks["none"] = torch.zeros(num_envs, dtype=torch.bool, device=device)  # reset_where_done's
        self._constants = {
            k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in self.layout.constants.items()
        }

        specs = build_specs(self.layout, num_envs, device)
        self.full_observation_spec = specs["observation"]
        self.full_action_spec = specs["action"]
        self.full_reward_spec = specs["reward"]
        self.full_done_spec = specs["done"]
        self._actions = action_views(self.layout, self.state)
        self._action_specs = {k: self.full_action_spec[k] for k in self._actions}

        # bytes from the output buffer the kernels were built with to the current one
        self._output_shift = torch.zeros(1, dtype=torch.int64, device=device)
        self._views = {k: self._backend.view(v) for k, v in self.state.items()}
        self._views["output_shift"] = self._backend.view(self._output_shift)
        self._views.update({spec.mask: self._backend.view(self._masks[k]) for k, spec in self._kernels.items()})
        self._no_env_mask = self._backend.view(self._masks["none"])
        self._views.update(
            {k: self._backend.view(v) for k, v in self._constants.items() if isinstance(v, torch.Tensor)}
        )
        self._view_pool()
        #: how the step is split into kernels (Layout.split_step; on CUDA and in the simulator): False,
        #: one kernel; True, one per phase; a tuple, the phases where kernels begin
        split = self.layout.split_step if split_step is None else split_step
        if isinstance(split, tuple) and split:
            self._kernels["step"].parts(split)  # where kernels begin: checked on every backend
        self.split_step = (split if isinstance(split, tuple) and split else bool(split)) if self._backend.splits \
            else False
        self._compiled = {"reset": self._backend.compile(self._kernels["reset"]),
                          "step": self._backend.compile_step(self._kernels["step"], self.split_step)}
        self._set_seed(seed)  # None: drawn there
        self._needs_reset = True  # until the first reset of every env
        self._closed = False      # set by close(), cleared by the reset that reopens the env
        self.is_closed = False    # EnvBase's flag (True until now: it is set for envs that wrap a library)

    @property
    def _owner(self) -> str:
        """What the env's errors call it: the class the user built (``MPEEnv('simple_tag')`` for
        an env that :func:`~torchrl_warp.envs.MPEEnv` built), else the class's name."""
        return self.__dict__.get("_built_as") or type(self).__name__

    # ----- what a subclass provides ---------------------------------------------------
    def _check_params(self, p: SimpleNamespace) -> None:
        """Raise ``ValueError`` for invalid parameter values."""

    def _layout(self, p: SimpleNamespace) -> Layout:
        raise NotImplementedError

    # ----- kernels -----------------------------------------------------------------------
    def _check_kernel_names(self, field_names: list[str]) -> None:
        """Every name a phase asks for resolves to exactly one thing; none shadows a driver's."""
        env = self._owner
        sources = {"state field": field_names, "parameter": list(vars(self.params)),
                   "constant": list(self.layout.constants)}
        seen: dict[str, str] = {}
        for kind, names in sources.items():
            for name in names:
                if name in DRIVER_NAMES or name.startswith(("phase_", POOL_PREFIX)):
                    raise ValueError(f"{env}: {kind} {name!r} takes a name the generated kernels use "
                                     f"({', '.join(sorted(DRIVER_NAMES))}, phase_*, {POOL_PREFIX}*): rename it")
                if name in seen:
                    raise ValueError(f"{env}: {name!r} is both a {seen[name]} and a {kind}: rename one")
                seen[name] = kind
        for spec in self._kernels.values():
            for name in spec.arguments:
                if name not in seen and name not in ("seed", "output_shift", "reset_where_done", spec.mask) \
                        and not name.startswith(POOL_PREFIX):
                    raise TypeError(
                        f"{env}: a {spec.kind} phase asks for {name!r}, which is no state field, "
                        f"parameter, constant or builtin ({', '.join(BUILTIN_ARGUMENTS)})"
                    )

    def _reset_spec(self, pool: TensorDict | None, outputs: tuple) -> KernelSpec:
        """The reset kernel: the layout's ``reset`` phases, the copy from ``pool`` (if any),
        then its ``observe`` phases; ``outputs``: its output buffers (the step kernel's)."""
        layout = self.layout
        copy = ()
        if pool is not None:
            fields = {f.name: f for f in layout.fields}
            copy = (pool_phase(tuple((name, fields[name].shape, fields[name].per_agent) for name in pool.keys())),)
        return KernelSpec("reset", tuple(layout.reset) + copy + tuple(layout.observe), outputs, layout.max_registers)

    def _fixed_starts(self) -> dict:
        """Start-state fields that every episode starts from, whatever the pool: field name ->
        one env's value. An env whose constructor takes fixed starts (TagEnv's
        ``starting_location_x``) returns them; they join every reset pool (a pool of one
        start state without one)."""
        return {}

    def _checked_pool(self, pool) -> TensorDict | None:
        """The pool resetting envs draw from: ``pool`` (or none), checked, with the fixed starts."""
        name = self._owner
        fixed = self._fixed_starts()
        if pool is None and not fixed:
            return None
        if not self.layout.observe:
            raise ValueError(
                f"{name} takes no reset pool: its Layout declares no observe phases, so its reset could "
                f"not derive observations from a pooled start state. Split its reset into reset= (the "
                f"phases that draw the start state) and observe= (those that derive the rest)")
        if fixed:  # the caller's pool is checked first (its errors name its entries), then with the fixed starts
            checked = None if pool is None else check_reset_pool(name, pool, self.layout.fields, self.num_agents,
                                                                 self.device)
            pool = with_fixed_starts(name, checked, fixed)
        return check_reset_pool(name, pool, self.layout.fields, self.num_agents, self.device)

    def _view_pool(self) -> None:
        for key in [k for k in self._views if k.startswith(POOL_PREFIX)]:
            del self._views[key]
        if self._reset_pool is not None:
            self._views.update({POOL_PREFIX + k: self._backend.view(v) for k, v in self._reset_pool.items()})

    @property
    def reset_pool(self) -> TensorDict | None:
        """The start states resetting envs draw from (the env's own copy), or None."""
        return self._reset_pool

    def set_reset_pool(self, pool) -> None:
        """Make resetting envs start from ``pool``: a TensorDict (or dict) of start states.

        Each entry is one of the env's own state fields with a leading pool dimension
        ``P``: ``pool[name].shape == (P, *env.state[name].shape[1:])``, of the field's
        dtype. Each env that resets draws one of the ``P`` entries, uniformly, from its
        counter-based RNG (on the device, no host sync, the same draws for the same seed
        on every backend), and takes those fields from it; the fields the pool lacks get
        the env's own random start. Observations and the rest are derived from the start
        state as usual. ``None`` removes the pool. The env keeps a copy: later edits of
        ``pool`` change nothing. A wrong entry (not a state field, a scratch field, a
        wrong shape or dtype, NaN or infinite values) is refused before anything changes.

        Examples:
            >>> import torch
            >>> from torchrl_warp.envs import PendulumEnv
            >>> env = PendulumEnv(num_envs=3, seed=0)
            >>> env.set_reset_pool({"kinematics": torch.tensor([[[3.1, 0.0]]])})  # P = 1: all upright
            >>> env.reset()["observation"][:, :2]  # cos, sin of the angle
            tensor([[-0.9991,  0.0416],
                    [-0.9991,  0.0416],
                    [-0.9991,  0.0416]])
        """
        checked = self._checked_pool(pool)
        self._reset_pool = checked
        self._kernels["reset"] = self._reset_spec(checked, self._kernels["reset"].outputs)
        self._view_pool()
        self._compiled["reset"] = self._backend.compile(self._kernels["reset"])
        self._backend.forget_graphs(("reset", "reset_where_done"))  # a new kernel: launched anew
        self._build_args()

    def _kernel_args(self, spec: KernelSpec, where_done: bool = False) -> tuple:
        """The launch arguments of ``spec``; ``where_done``: a reset of exactly the envs whose
        ``done`` output is set (its mask all False)."""
        scalars = {"seed": np.uint64(self._seed), "reset_where_done": where_done}
        views = {**self._views, spec.mask: self._no_env_mask} if where_done else self._views
        args = []
        for name in spec.arguments:
            if name in scalars:
                args.append(scalars[name])
            elif name in views:
                args.append(views[name])
            elif name in self._constants:
                args.append(self._constants[name])
            else:
                args.append(getattr(self.params, name))
        return tuple(args)

    @property
    def state(self) -> TensorDict:
        """Every state field, batched over envs; the outputs (``observation``, ``reward``,
        ``done``...) as views of the output buffer the env writes now (:mod:`~torchrl_warp.outputs`)."""
        if self._state_generation != self._outputs.generation:
            for name, view in self._outputs.fields.items():
                self._state._set_str(name, view, validated=True, inplace=False)
            self._state_generation = self._outputs.generation
        return self._state

    def _launch(self, kind: str, copy_outputs: bool = True) -> None:
        """Run the ``kind`` kernel. Its outputs go to the current output buffer, or, if that
        was handed out, to a new one: a copy of it (``copy_outputs``), or an uninitialised
        one when the launch writes every output itself."""
        self._own_outputs(copy_outputs)
        self._backend.launch(self._compiled[_LAUNCH_SPECS.get(kind, kind)], self.num_envs, self.num_agents,
                             self._args[kind], key=kind)

    def _own_outputs(self, copy: bool) -> None:
        """Make the env's output buffer one it has not handed out (:meth:`Outputs.prepare`)
        and point the kernels at it: on CUDA a new ``output_shift`` (the arguments, and
        the graphs captured with them, stay), elsewhere new views."""
        if not self._outputs.prepare(copy):
            return
        if self._backend.moves_outputs:
            self._output_shift.fill_(self._outputs.shift)
            return
        fields = self._outputs.fields
        for name in self._kernels["step"].outputs:
            self._views[name] = self._backend.view(fields[name])
        for kind, args in self._args.items():  # swap the output views into the arguments
            spec = self._kernels[_LAUNCH_SPECS.get(kind, kind)]
            self._args[kind] = tuple(self._views[name] if name in spec.outputs else arg
                                     for name, arg in zip(spec.arguments, args))

    def _set_seed(self, seed: int | None) -> None:
        """Seeds are ints in ``[0, 2**64 - 1]`` (``None``: drawn from torch's generator); a
        rejected seed changes nothing. A new seed restarts the episode counters."""
        seed = check_seed(self._owner, seed)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self._seed = seed
        self.state["episode"].zero_()
        self._backend.forget_graphs()  # captured launches hold the old seed
        self._build_args()

    def _build_args(self) -> None:
        self._args = {kind: self._kernel_args(spec) for kind, spec in self._kernels.items()}
        self._args["reset_where_done"] = self._kernel_args(self._kernels["reset"], where_done=True)

    # ----- TorchRL interface ---------------------------------------------------------------
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._needs_reset or self._closed:
            self._refuse("step")
        actions = [(k, tensordict.get(k, None)) for k in self._actions]
        for key, value in actions:
            if value is None:
                raise KeyError(f"{self._owner}.step: the input tensordict has no action {key!r}; expected "
                               f"{self._action_specs[key]}")
            check_action(key, value, self._action_specs[key], self.device, self.check_actions,
                         not self.clamps_actions, owner=f"{self._owner}.step", agents=self._agents_of(key))
        partial = tensordict.get("_step", None)
        if partial is not None:
            check_mask("_step", partial, self._env_mask_shapes, self.device)
        for key, value in actions:
            self._actions[key].copy_(value)
        if partial is None:
            self._launch("step", copy_outputs=not self.layout.outputs_from_state)
            return self._outputs.hand_out(with_reward=True)
        # TorchRL's partial step: only envs whose "_step" is set move; the others keep
        # their state and outputs, with a zero reward
        mask = self._masks["step"]
        mask.copy_(partial.reshape(self.num_envs))
        self._launch("step")
        self._outputs.view("reward").mul_(mask.unsqueeze(-1))
        mask.fill_(True)
        return self._outputs.hand_out(with_reward=True)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        self._reopen()
        mask = self._reset_request(tensordict)
        if mask is None:
            self._masks["reset"].fill_(True)
        else:
            self._masks["reset"].copy_(mask)
        self._launch("reset")
        self._note_reset(mask)
        return self._outputs.hand_out(with_reward=False)

    def _note_reset(self, mask: torch.Tensor | None) -> None:
        """Clear the before-the-first-reset flag once every env was reset, by one reset or by
        partial ones (a host sync only while it is set, and only for partial resets)."""
        if not self._needs_reset:
            return
        if mask is not None:
            seen = self.__dict__.get("_reset_seen")
            seen = mask.reshape(self.num_envs).clone() if seen is None else seen | mask.reshape(self.num_envs)
            self._reset_seen = seen
            if not bool(seen.all()):
                return
        self._needs_reset = False
        self.__dict__.pop("_reset_seen", None)

    def _refuse(self, what: str) -> None:
        """Raise the error of a ``what`` (a step) that the env's life cycle does not allow."""
        if self._closed:
            raise RuntimeError(f"{self._owner}.{what}: the env was closed (env.close(), which TorchRL's collectors "
                               f"call when they finish): call env.reset() to start it again before stepping")
        raise RuntimeError(f"{self._owner}.{what}: the env has not been reset yet: call env.reset() before "
                           f"its first step (TorchRL's rollout and collectors do)")

    def _reopen(self) -> None:
        """A reset of a closed env starts it again (as TorchRL's batched envs restart on use);
        every env must then be reset before the next step."""
        if self._closed:
            self._closed = False
            self.is_closed = False
            self._needs_reset = True

    def _agents_of(self, key) -> int | None:
        """The number of agents of the group whose action ``key`` is (``None``: a root key)."""
        if isinstance(key, tuple) and self.layout.groups:
            return self.layout.groups.get(key[0])
        return None

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the env (``is_closed`` becomes True): a step is refused until a ``reset()``
        starts it again (then every env must be reset before the next step).

        TorchRL's ``Collector`` closes its env when it has collected ``total_frames`` (and at
        ``shutdown()``), and TorchRL's batched envs restart on their next use: so a closed
        env is not dead. A later ``rollout`` resets it first and runs; a bare ``step`` from
        a stale TensorDict is refused instead of continuing episodes that were given up.

        Examples:
            >>> from torchrl_warp.envs import CartPoleEnv
            >>> env = CartPoleEnv(num_envs=2)
            >>> td = env.reset()
            >>> env.close()
            >>> env.is_closed, env.rollout(2).batch_size, env.is_closed
            (True, torch.Size([2, 2]), False)
        """
        self._closed = True
        super().close(raise_if_closed=raise_if_closed)

    def rollout(self, max_steps: int, *args, **kwargs) -> TensorDictBase:
        """``EnvBase.rollout``, with ``max_steps`` checked first (a positive int; NumPy ints
        too): TorchRL's fails with ``list_of_tensordicts cannot be empty`` for 0 or fewer.
        A policy that writes an entry without a group's agent dimension gets an error
        naming the group and the shapes instead of TensorDict's batch-size error.

        Examples:
            >>> from torchrl_warp.envs import CartPoleEnv
            >>> CartPoleEnv(num_envs=2).rollout(0)
            Traceback (most recent call last):
            ...
            ValueError: CartPoleEnv.rollout: max_steps must be a positive int, got 0
        """
        if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) or max_steps < 1:
            raise ValueError(f"{self._owner}.rollout: max_steps must be a positive int, got {max_steps!r}")
        try:
            return super().rollout(int(max_steps), *args, **kwargs)
        except RuntimeError as err:
            shapes = _BATCH_MISMATCH.search(str(err))
            if shapes is None or not self.layout.groups:
                raise
            raise ValueError(self._mismatch_message(*shapes.groups(), err)) from err

    def _mismatch_message(self, lead: str, got: str, err: Exception) -> str:
        """What a TensorDict batch-size error inside a rollout means for this env's groups."""
        lead = tuple(int(x) for x in lead.split(",") if x.strip())
        got = tuple(int(x) for x in got.split(",") if x.strip())
        groups = [g for g, n in self.layout.groups.items() if lead == (self.num_envs, n)] or list(self.layout.groups)
        expected = [f"{key}: {tuple(self._action_specs[key].shape)}" for key in self._actions
                    if isinstance(key, tuple) and key[0] in groups]
        which = f"group {groups[0]!r}" if len(groups) == 1 else f"one of the groups {', '.join(map(repr, groups))}"
        missing = len(lead) == 2 and got[:1] == lead[:1] and got[1:2] != lead[1:2]
        return (f"{self._owner}.rollout: the policy wrote an entry of shape {got} into {which}, whose entries "
                f"have the leading shape {lead} ([num_envs, n_agents])"
                + ("; the agent dimension is missing" if missing else "")
                + (f"; the env's actions are {'; '.join(expected)}" if expected else "")
                + f" (TensorDict: {err})")

    def _reset_request(self, tensordict) -> torch.Tensor | None:
        """The per-env reset mask asked for by ``"_reset"`` keys, or None for all envs.

        A root ``"_reset"`` decides; without one, an env is reset if any ``(group,
        "_reset")`` entry of it is set (agents are never reset one by one).
        """
        if tensordict is None:
            return None
        root = tensordict.get("_reset", None)
        if root is not None:
            return check_mask("_reset", root, self._env_mask_shapes, self.device).reshape(self.num_envs)
        mask = None
        for group, n in (self.layout.groups or {}).items():
            r = tensordict.get((group, "_reset"), None)
            if r is not None:
                shapes = self._env_mask_shapes + [(self.num_envs, n), (self.num_envs, n, 1)]
                r = check_mask((group, "_reset"), r, shapes, self.device).reshape(self.num_envs, -1).any(-1)
                mask = r if mask is None else mask | r
        return mask

    @property
    def _env_mask_shapes(self) -> list[tuple]:
        """The shapes a per-env mask may have: ``[num_envs]`` or ``[num_envs, 1]``."""
        return [(self.num_envs,), (self.num_envs, 1)]

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Reset the envs whose root ``"done"`` is set, without a host-device sync.

        TorchRL's generic version asks the host whether any env is done; here the
        masked reset kernel runs unconditionally (it skips envs that are not done)
        and every output is rewritten from the state, which for envs that were not
        reset still holds their current values.
        """
        done = tensordict.get("done", None)
        if done is None:
            return super().maybe_reset(tensordict)
        self._reopen()
        check_mask("done", done, self._env_mask_shapes, self.device)
        self._masks["reset"].copy_(done.reshape(self.num_envs))
        self._launch("reset")
        self._note_reset(done)
        tensordict.update(self._outputs.hand_out(with_reward=False))
        return tensordict

    # ----- fast paths through TorchRL's step ----------------------------------------------
    def _plain_input(self, tensordict) -> bool:
        """Whether ``tensordict`` needs none of ``EnvBase.step``'s general machinery.

        That is: a plain ``TensorDict`` on the env's device with its batch size, no
        partial ``"_step"`` mask, and type checks off. Our outputs then already have
        every done key with the spec's shape and dtype, which is all
        ``_step_proc_data`` would enforce.
        """
        return (
            type(tensordict) is TensorDict
            and tensordict.batch_size == self.batch_size
            and tensordict.device == self.device
            and not self.run_type_checks
            and "_step" not in tensordict._tensordict
        )

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``EnvBase.step``, without its generic post-processing for plain inputs.

        Examples:
            >>> from torchrl_warp.envs import CartPoleEnv
            >>> env = CartPoleEnv(num_envs=2)
            >>> td = env.step(env.rand_action(env.reset()))
            >>> td["next", "observation"].shape
            torch.Size([2, 4])
        """
        if not self._plain_input(tensordict):
            return super().step(tensordict)
        self._set_next(tensordict, self._step(tensordict))
        return tensordict

    @staticmethod
    def _set_next(tensordict: TensorDict, outputs: TensorDict) -> None:
        """``tensordict["next"] = outputs``, keeping what a preset ``"next"`` has that outputs lack."""
        preset = tensordict._tensordict.get("next", None)
        if preset is not None:
            _merge_missing(preset, outputs)
        tensordict._set_str("next", outputs, validated=True, inplace=False)

    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset the envs that are done: what rollouts and collectors call.

        Same result as ``EnvBase.step_and_maybe_reset`` (step, ``step_mdp``, masked
        reset) in a handful of device ops: the masked reset kernel runs on every
        call (no host sync to ask whether any env is done), and the next root
        TensorDict is the post-reset outputs plus whatever else the input carried
        (the action, the policy's log-probabilities...), as ``step_mdp`` keeps them.

        Examples:
            >>> from torchrl_warp.envs import CartPoleEnv
            >>> env = CartPoleEnv(num_envs=2)
            >>> data, next_root = env.step_and_maybe_reset(env.rand_action(env.reset()))
            >>> sorted(next_root.keys())  # as EnvBase's, the next root keeps the action
            ['action', 'done', 'observation', 'terminated', 'truncated']
        """
        if (
            not self._plain_input(tensordict)
            or self._post_step_mdp_hooks is not None
            or "_compiled_step_and_maybe_reset" in self.__dict__
        ):
            return super().step_and_maybe_reset(tensordict)
        self._set_next(tensordict, self._step(tensordict))
        # into a copy of the outputs just handed out (the one copy), where they say done
        self._launch("reset_where_done")
        root = self._outputs.hand_out(with_reward=False)
        self._carry_other_entries(tensordict, root)
        return tensordict, root

    def _carry_other_entries(self, source: TensorDict, target: TensorDict) -> None:
        """Copy into ``target`` what ``step_mdp`` keeps of ``source``: all but outputs, "next", resets.

        Entries are carried, not cloned (TensorDicts are shallow-copied), as ``step_mdp`` does.
        """
        groups = self.layout.groups or ()
        for key, value in source._tensordict.items():
            if key in _STEP_MDP_SKIP:
                continue
            if key in groups and isinstance(value, TensorDictBase):
                group = target._get_str(key, None)
                for sub, sub_value in value.items():
                    if sub not in _STEP_MDP_SKIP:
                        group._set_str(sub, _copy_collection(sub_value), validated=True, inplace=False)
                continue
            target._set_str(key, _copy_collection(value), validated=True, inplace=False)


#: TensorDict's error for an entry whose leading dims are not the (sub-)TensorDict's batch size
_BATCH_MISMATCH = re.compile(r"batch dimension mismatch, got self\.batch_size=torch\.Size\(\[([\d, ]*)\]\) and "
                             r"value\.shape=torch\.Size\(\[([\d, ]*)\]\)")

#: launches that run another launch's kernel with other arguments
_LAUNCH_SPECS = {"reset_where_done": "reset"}

# keys that EnvBase's step_mdp does not carry from the input root to the next one: the
# outputs (the next root gets fresh ones) and reset requests; it keeps actions and the rest
_STEP_MDP_SKIP = frozenset(("next", "reward", "observation", "_reset") + DONE_KEYS)


def _copy_collection(value):
    return value.copy() if isinstance(value, TensorDictBase) else value


def _merge_missing(source: TensorDictBase, target: TensorDict) -> None:
    """Set in ``target`` the entries of ``source`` it lacks (nested TensorDicts merged)."""
    for key, value in source.items():
        have = target._get_str(key, None)
        if have is None:
            target._set_str(key, _copy_collection(value), validated=True, inplace=False)
        elif isinstance(have, TensorDictBase) and isinstance(value, TensorDictBase):
            _merge_missing(value, have)
