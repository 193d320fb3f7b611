"""Generate the kernels around an environment's phase functions.

An environment writes its logic once, as *phase functions*: ``@numba.njit``
functions whose first two parameters are ``env`` and ``agent`` and whose other
parameters are named after state fields, parameters or constants. A step (or a
reset) is a sequence of phases with a barrier between consecutive ones: every
agent of an environment finishes phase ``i`` before any agent starts ``i + 1``.
A tuple of phase functions in that sequence is one phase: each agent runs them
back to back, with no barrier in between. Fuse phases that way when a function
reads only what was complete before the tuple and what the same agent wrote in
the tuple's earlier functions: every barrier costs the whole block a wait.

From that sequence this module writes the source of two drivers:

* a CUDA kernel: several environments per block (``threads_per_env`` lanes each,
  a power of two), lanes stride over agents, ``cuda.syncthreads()`` between phases;
* a CPU loop: ``numba.prange`` over environments, a plain loop over agents per phase.

Both drivers also keep the per-environment counters that every environment needs:
a step kernel first increments ``step_count[env]``; a reset kernel zeroes it,
increments ``episode[env]`` (the counter-based RNG is keyed by both) and clears
the env's ``done``/``terminated``/``truncated`` flags. A kernel touches only the
environments whose entry in its mask (``step_mask`` or ``reset_mask``) is set.

Examples:
    >>> import numba
    >>> @numba.njit
    ... def move(env, agent, pos, speed):
    ...     pos[env, agent] += speed
    >>> spec = KernelSpec("step", (move,))
    >>> spec.arguments
    ('step_mask', 'seed', 'step_count', 'episode', 'done', 'terminated', 'truncated', 'pos', 'speed')
    >>> print(spec.cpu_source().splitlines()[1])
        for env in prange(num_envs):
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

__all__ = ["KernelSpec", "phase_parameters", "phase_functions", "BUILTIN_ARGUMENTS", "DRIVER_NAMES"]

#: names every phase may ask for besides state fields, parameters and constants
BUILTIN_ARGUMENTS = ("num_agents", "seed", "step_count", "episode")
_LEADING = ("env", "agent")
#: names the generated drivers use themselves: no field, parameter or constant may take them
DRIVER_NAMES = frozenset(
    ("env", "agent", "tid", "lane", "live", "num_envs", "num_agents", "threads_per_env",
     "envs_per_block", "step_mask", "reset_mask", "seed", "cuda", "prange", "rebase", "output_shift",
     "lane_step", "agent_end", "agent_at", "uint32", "int64", "reset_where_done")
)
# every kernel takes these: the drivers update the counters and clear the flags
_FIXED = ("seed", "step_count", "episode", "done", "terminated", "truncated")


def phase_parameters(phase) -> tuple[str, ...]:
    """The names a phase function asks for after ``(env, agent)``."""
    fn = getattr(phase, "py_func", phase)
    names = tuple(inspect.signature(fn).parameters)
    if names[:2] != _LEADING:
        raise TypeError(
            f"phase function {fn.__qualname__} must start with parameters "
            f"(env, agent, ...), got ({', '.join(names)})"
        )
    return names[2:]


def phase_functions(phases) -> tuple:
    """The functions of a phase sequence, in order, fused tuples flattened.

    >>> phase_functions((len, (abs, min), max))
    (<built-in function len>, <built-in function abs>, <built-in function min>, <built-in function max>)
    """
    return tuple(f for phase in phases for f in (phase if isinstance(phase, tuple) else (phase,)))


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: its kind (``"step"`` or ``"reset"``), its phases (a tuple of phase
    functions is one phase: its functions run back to back for each agent), and the
    arguments that are output buffers (``outputs``): the CUDA kernel moves those by
    ``output_shift[0]`` bytes before its first phase (see :mod:`torchrl_warp.rebase`)."""

    kind: str
    phases: tuple
    outputs: tuple = ()
    #: the CUDA kernel's cap on registers per thread (``Layout.max_registers``); None: none
    max_registers: int | None = None
    #: the drivers keep the per-env counters (a step's ``step_count`` increment, a reset's
    #: counters and flags); False for the later kernels of a step split by :meth:`parts`
    counters: bool = True

    def __post_init__(self):
        if self.kind not in ("step", "reset"):
            raise ValueError(f"kernel kind must be 'step' or 'reset', got {self.kind!r}")
        if not self.phases or any(isinstance(p, tuple) and not p for p in self.phases):
            raise ValueError(f"a {self.kind} kernel needs at least one phase, and no empty tuple of phases")

    @property
    def functions(self) -> tuple:
        """The phase functions in call order (fused tuples flattened); ``phase_<i>`` in the drivers."""
        return phase_functions(self.phases)

    @functools.cached_property
    def arguments(self) -> tuple[str, ...]:
        """Kernel arguments after the launch layout, in a fixed order."""
        names = list(_FIXED) + (["reset_where_done"] if self.kind == "reset" else [])
        for phase in self.functions:
            for name in phase_parameters(phase):
                if name not in names and name != "num_agents":
                    names.append(name)
        names.insert(0, self.mask)
        if self.outputs:
            names.append("output_shift")
        return tuple(names)

    @property
    def rebased(self) -> tuple[str, ...]:
        """The output buffers among the arguments (moved by ``output_shift`` in the CUDA kernel)."""
        return tuple(name for name in self.arguments if name in self.outputs)

    @property
    def mask(self) -> str:
        """The per-env bool argument that selects the environments this kernel runs."""
        return f"{self.kind}_mask"

    def _calls(self) -> list[list[str]]:
        """For each phase, the calls its agents make (several for a fused tuple)."""
        calls, i = [], 0
        for phase in self.phases:
            group = []
            for fn in phase if isinstance(phase, tuple) else (phase,):
                group.append(f"phase_{i}({', '.join(('env', 'agent') + phase_parameters(fn))})")
                i += 1
            calls.append(group)
        return calls

    def _selected(self) -> str:
        """Whether the kernel runs env ``env``: its mask, and for a reset with
        ``reset_where_done`` also where the env's ``done`` output is set (``step_and_maybe_reset``
        resets the envs its step ended without copying their done flags into the mask)."""
        if self.kind == "reset":
            return f"{self.mask}[env] or (reset_where_done and done[env])"
        return f"{self.mask}[env]"

    def parts(self, starts: tuple[int, ...] | None = None) -> tuple["KernelSpec", ...]:
        """The step as several kernels, launched one after the other (the launch boundary is
        the barrier): one per phase, or with ``starts`` (the indices of the phases where a new
        kernel begins, increasing, in ``1..len(phases) - 1``) one per run of phases between
        them. The first keeps the counters; each part asks only for what its own phases do,
        and has no register cap (its own live values are few, where the whole step's kernel
        holds every array's address and strides at once).

        >>> import numba
        >>> @numba.njit
        ... def move(env, agent, pos):
        ...     pos[env, agent] += 1.0
        >>> first, second = KernelSpec("step", (move, move), max_registers=64).parts()
        >>> first.counters, second.counters, second.max_registers, second.arguments[-1]
        (True, False, None, 'pos')
        >>> [len(part.phases) for part in KernelSpec("step", (move,) * 5).parts(starts=(2,))]
        [2, 3]
        """
        if self.kind != "step":
            raise ValueError("only a step kernel is split into parts (a reset's later parts would find the done "
                             "flags it selects by already cleared)")
        n = len(self.phases)
        starts = tuple(range(1, n)) if starts is None else tuple(starts)
        if any(not isinstance(i, int) or isinstance(i, bool) for i in starts) or list(starts) != sorted(set(starts)) \
                or any(not 0 < i < n for i in starts):
            raise ValueError(f"a step of {n} phases splits where a phase begins: increasing ints in 1..{n - 1}, "
                             f"got {starts!r}")
        bounds = (0, *starts, n)
        return tuple(KernelSpec("step", self.phases[a:b], self.outputs, None, counters=i == 0)
                     for i, (a, b) in enumerate(zip(bounds, bounds[1:])))

    def _counter_update(self) -> list[str]:
        if not self.counters:
            return []
        if self.kind == "step":
            return ["step_count[env] += 1"]
        return [
            "step_count[env] = 0",
            "episode[env] += 1",
            "done[env] = False",
            "terminated[env] = False",
            "truncated[env] = False",
        ]

    def cuda_source(self) -> str:
        """Source of the CUDA kernel ``warp_<kind>_cuda``."""
        args = ", ".join(
            ("num_envs", "num_agents", "threads_per_env", "envs_per_block") + self.arguments
        )
        live = "env < num_envs"
        # 32-bit index arithmetic, no division per phase (threads_per_env is a power of two),
        # and env and agent zero-extended from 32 bits: the compiler then knows they are not
        # negative and drops Numba's negative-index wrap-around from every array access
        lines = [
            "from numba import int64, uint32",
            "",
            f"def warp_{self.kind}_cuda({args}):",
            "    tid = uint32(cuda.threadIdx.x)",
            "    lane_step = uint32(threads_per_env)",
            "    env = int64(uint32(cuda.blockIdx.x * envs_per_block + int64(tid // lane_step)))",
            "    lane = uint32(tid & (lane_step - uint32(1)))",
            "    agent_end = uint32(num_agents)",
            f"    live = {live}",
        ]
        if self.rebased:
            lines += [f"    {name} = rebase({name}, output_shift[0])" for name in self.rebased]
        lines.append("    if live:")
        lines.append(f"        live = {self._selected()}")
        if self.kind == "reset":  # every lane reads its env's done flag before lane 0 clears it
            lines.append("    cuda.syncthreads()")
        if self.counters:
            lines.append("    if live and lane == 0:")
            lines += [f"        {stmt}" for stmt in self._counter_update()]
        for group in self._calls():
            lines += [
                "    cuda.syncthreads()",
                "    if live:",
                "        agent_at = lane",
                "        while agent_at < agent_end:",
                "            agent = int64(agent_at)",
            ]
            lines += [f"            {call}" for call in group]
            lines.append("            agent_at = uint32(agent_at + lane_step)")
        return "\n".join(lines) + "\n"

    def cpu_source(self) -> str:
        """Source of the CPU loop ``warp_<kind>_cpu`` (parallel over environments)."""
        args = ", ".join(("num_envs", "num_agents") + self.arguments)
        lines = [f"def warp_{self.kind}_cpu({args}):", "    for env in prange(num_envs):",
                 f"        if {self._selected()}:"]
        indent = "            "
        lines += [indent + stmt for stmt in self._counter_update()]
        for group in self._calls():
            lines += [indent + "for agent in range(num_agents):"] + [indent + "    " + call for call in group]
        return "\n".join(lines) + "\n"
