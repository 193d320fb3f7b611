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

from types import SimpleNamespace

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase

from torchrl_warp.backends import make_backend
from torchrl_warp.checks import check_action, check_memory, check_params, resolve_device
from torchrl_warp.codegen import BUILTIN_ARGUMENTS, DRIVER_NAMES, KernelSpec
from torchrl_warp.layout import Layout
from torchrl_warp.specs import build_specs, output_views

__all__ = ["WarpEnv"]

_SEED_MASK = (1 << 64) - 1


class WarpEnv(EnvBase):
    """Base class of torchrl-warp environments.

    Args:
        num_envs: number of environments stepped together (the env's batch size).
        device: ``"cpu"`` (numba CPU backend, or the CUDA simulator when
            ``NUMBA_ENABLE_CUDASIM=1``) or ``"cuda"``/``"cuda:N"`` (Numba-CUDA kernels).
        backend: force ``"cuda"``, ``"cpu"`` or ``"cudasim"``; ``None`` picks from ``device``.
        check_actions: check that action values lie in their spec. Shape, dtype and
            device are always checked (metadata only); the value check syncs with
            the device, so switch it off for full speed (kernels clamp indices anyway).
        cuda_graphs: on the CUDA backend, replay each kernel launch from a captured
            CUDA graph instead of launching it from Python (same kernel, less overhead).
        seed: the RNG seed; ``None`` draws one from torch's global generator.
        **params: the environment's parameters (see its ``defaults``); unknown
            names and wrong types raise ``TypeError``, invalid values ``ValueError``.

    Subclasses set ``defaults`` (parameter name -> default value) and implement
    ``_check_params(p)`` (raise ``ValueError`` on bad values) and ``_layout(p)``.
    """

    defaults: dict = {}

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        *,
        backend: str | None = None,
        check_actions: bool = True,
        cuda_graphs: bool = True,
        seed: int | None = None,
        **params,
    ):
        name = type(self).__name__
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"{name}: num_envs must be a positive int, got {num_envs!r}")
        self.params = SimpleNamespace(**check_params(name, self.defaults, params))
        self._check_params(self.params)
        device = resolve_device(device)
        super().__init__(device=device, batch_size=[num_envs])
        self.num_envs = num_envs
        self.check_actions = check_actions
        self.layout: Layout = self._layout(self.params)
        self.num_agents = self.layout.num_agents

        fields = self.layout.all_fields()
        self._kernels = {
            kind: KernelSpec(kind, tuple(getattr(self.layout, kind))) for kind in ("reset", "step")
        }
        self._check_kernel_names([f.name for f in fields])
        needed = sum(f.nbytes(num_envs, self.num_agents) for f in fields)
        check_memory(name, 2 * needed, device, f"num_envs={num_envs}, {self.num_agents} agents per env")

        self._backend = make_backend(backend, device, cuda_graphs)
        self.backend = self._backend.name
        self.state = TensorDict(
            {f.name: torch.zeros(f.full_shape(num_envs, self.num_agents), dtype=f.dtype, device=device) for f in fields},
            batch_size=[num_envs],
            device=device,
        )
        self._reset_mask = torch.ones(num_envs, dtype=torch.bool, device=device)
        self._constants = {
            k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in self.layout.constants.items()
        }

        specs = build_specs(self.layout, num_envs, device)
        self.full_observation_spec = specs["observation"]
        self.full_action_spec = specs["action"]
        self.full_reward_spec = specs["reward"]
        self.full_done_spec = specs["done"]
        self._outputs, self._rewards, self._actions = output_views(self.layout, self.state)
        self._action_specs = {k: self.full_action_spec[k] for k in self._actions}

        self._views = {k: self._backend.view(v) for k, v in self.state.items()}
        self._views["reset_mask"] = self._backend.view(self._reset_mask)
        self._views.update(
            {k: self._backend.view(v) for k, v in self._constants.items() if isinstance(v, torch.Tensor)}
        )
        self._compiled = {kind: self._backend.compile(spec) for kind, spec in self._kernels.items()}
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self._set_seed(seed)

    # ----- what a subclass provides ---------------------------------------------------
    def _check_params(self, p: SimpleNamespace) -> None:
        """Raise ``ValueError`` for invalid parameter values."""

    def _layout(self, p: SimpleNamespace) -> Layout:
        raise NotImplementedError

    # ----- kernels -----------------------------------------------------------------------
    def _check_kernel_names(self, field_names: list[str]) -> None:
        """Every name a phase asks for resolves to exactly one thing; none shadows a driver's."""
        env = type(self).__name__
        sources = {"state field": field_names, "parameter": list(vars(self.params)),
                   "constant": list(self.layout.constants)}
        seen: dict[str, str] = {}
        for kind, names in sources.items():
            for name in names:
                if name in DRIVER_NAMES or name.startswith("phase_"):
                    raise ValueError(f"{env}: {kind} {name!r} takes a name the generated kernels use "
                                     f"({', '.join(sorted(DRIVER_NAMES))}, phase_*): rename it")
                if name in seen:
                    raise ValueError(f"{env}: {name!r} is both a {seen[name]} and a {kind}: rename one")
                seen[name] = kind
        for spec in self._kernels.values():
            for name in spec.arguments:
                if name not in seen and name not in ("seed", "reset_mask"):
                    raise TypeError(
                        f"{env}: a {spec.kind} phase asks for {name!r}, which is no state field, "
                        f"parameter, constant or builtin ({', '.join(BUILTIN_ARGUMENTS)})"
                    )

    def _kernel_args(self, spec: KernelSpec) -> tuple:
        scalars = {"seed": np.uint64(self._seed)}
        args = []
        for name in spec.arguments:
            if name in self._views:
                args.append(self._views[name])
            elif name in scalars:
                args.append(scalars[name])
            elif name in self._constants:
                args.append(self._constants[name])
            else:
                args.append(getattr(self.params, name))
        return tuple(args)

    def _launch(self, kind: str) -> None:
        self._backend.launch(self._compiled[kind], self.num_envs, self.num_agents, self._args[kind], key=kind)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self._seed = int(seed) & _SEED_MASK
        self.state["episode"].zero_()
        self._backend.forget_graphs()  # captured launches hold the old seed
        self._args = {kind: self._kernel_args(spec) for kind, spec in self._kernels.items()}

    # ----- TorchRL interface ---------------------------------------------------------------
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = [(k, tensordict.get(k, None)) for k in self._actions]
        for key, value in actions:
            if value is None:
                raise KeyError(f"the input tensordict has no action {key!r}; expected {self._action_specs[key]}")
            check_action(key, value, self._action_specs[key], self.device, self.check_actions)
        for key, value in actions:
            self._actions[key].copy_(value)
        self._launch("step")
        return self._output(with_reward=True)

    def _output(self, with_reward: bool) -> TensorDictBase:
        """A fresh TensorDict of outputs (clones: rollouts keep references to them).

        Built with ``TensorDict._new_unsafe``: the shapes, dtypes and device are the
        specs' by construction (``output_views``), and skipping per-key validation
        makes this ~6x cheaper, which matters at small batch sizes.
        """
        sources = (self._outputs, self._rewards) if with_reward else (self._outputs,)
        root, groups = {}, {g: {} for g in (self.layout.groups or ())}
        for source in sources:
            for key, view in source.items():
                if isinstance(key, tuple):
                    groups[key[0]][key[1]] = view.clone()
                else:
                    root[key] = view.clone()
        for group, entries in groups.items():
            root[group] = TensorDict._new_unsafe(
                entries, batch_size=(self.num_envs, self.layout.groups[group]), device=self.device
            )
        return TensorDict._new_unsafe(root, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        mask = self._reset_request(tensordict)
        if mask is None:
            self._reset_mask.fill_(True)
        else:
            self._reset_mask.copy_(mask)
        self._launch("reset")
        return self._output(with_reward=False)

    def _reset_request(self, tensordict) -> torch.Tensor | None:
        """The per-env reset mask asked for by ``"_reset"`` keys, or None for all envs.

        A root ``"_reset"`` decides; without one, an env is reset if any ``(group,
        "_reset")`` entry of it is set (agents are never reset one by one).
        """
        if tensordict is None:
            return None
        root = tensordict.get("_reset", None)
        if root is not None:
            return root.reshape(self.num_envs)
        mask = None
        for group in self.layout.groups or ():
            r = tensordict.get((group, "_reset"), None)
            if r is not None:
                r = r.reshape(self.num_envs, -1).any(-1)
                mask = r if mask is None else mask | r
        return mask

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
        self._reset_mask.copy_(done.reshape(self.num_envs))
        self._launch("reset")
        tensordict.update(self._output(with_reward=False))
        return tensordict
