"""Three ways to run one kernel source: CUDA, CPU, and Numba's CUDA simulator.

A backend turns a :class:`~torchrl_warp.codegen.KernelSpec` into a compiled
driver, turns torch tensors into arrays the driver can take (zero-copy, once per
buffer), and launches the driver.

* ``cuda``: ``numba.cuda`` kernels on torch's current stream, over cached
  ``__cuda_array_interface__`` views (no stream sync when a view is made).
* ``cpu``: ``numba.njit(parallel=True)``, a ``prange`` over environments, on Numba's
  threads as :mod:`~torchrl_warp.threads` chooses them (never changing torch's).
* ``cudasim``: the CUDA kernel source run by Numba's simulator on the CPU
  (``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is imported). Slow: for
  tests at tiny sizes, so that CI exercises the GPU code path without a GPU.
* ``cpu_checked``: the ``cpu`` loop run as Python over arrays that check every index,
  naming the field and phase an out-of-bounds access hits (slow: ``check_env`` runs it).

The ``cpu`` and ``cuda`` backends compile through the kernel cache
(:mod:`~torchrl_warp.kernel_cache`): a process loads the kernels an earlier one
compiled. The simulator runs Python and has nothing to cache.

Examples:
    >>> backend = make_backend("cpu", torch.device("cpu"))
    >>> backend.name
    'cpu'
"""
from __future__ import annotations

import numbers
import types

import numba
import numpy as np
import torch

from torchrl_warp import kernel_cache, threads
from torchrl_warp.capture import cuda_graph
from torchrl_warp.codegen import KernelSpec
from torchrl_warp.rebase import rebase, rebase_in_python
from torchrl_warp.simulator import simulator_enabled

__all__ = ["Backend", "BoundsCheckedBackend", "BOUNDS_CHECKED", "CpuBackend", "CpuKernel", "CudaBackend",
           "KernelSequence", "SimulatorBackend", "make_backend", "simulator_enabled"]

_COMPILED: dict = {}


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class Backend:
    """Compiles kernel specs and launches them over tensor views."""

    name = "base"
    #: whether kernels follow a new output buffer through ``output_shift`` (CUDA: launches
    #: replay captured graphs, whose arguments cannot change); else they get new views
    moves_outputs = False

    def __init__(self, device: torch.device, label: str | None = None):
        self.device = device
        #: who the kernels are for, in the compile log line (an env's class name)
        self.label = label

    #: whether :meth:`compile_step` may split a step into one kernel per phase (CUDA and its
    #: simulator; a CPU loop has no barrier to save)
    splits = False

    def compile(self, spec: KernelSpec):
        key = (self.name, spec)
        if key not in _COMPILED:
            _COMPILED[key] = self._compile(spec)
        return _COMPILED[key]

    def compile_step(self, spec: KernelSpec, split):
        """``spec``'s kernel, or with ``split`` (where the backend :attr:`splits`: ``True``, one
        kernel per phase, or the phase indices where kernels begin) its
        :meth:`~torchrl_warp.codegen.KernelSpec.parts` as one :class:`KernelSequence`, launched
        as the whole step's kernel is, with the whole step's arguments."""
        if not (split and self.splits):
            return self.compile(spec)
        parts = spec.parts(None if split is True else split)
        return KernelSequence([self.compile(part) for part in parts],
                              [tuple(spec.arguments.index(name) for name in part.arguments) for part in parts])

    def _exec(self, source: str, fn_name: str, spec: KernelSpec, namespace: dict):
        for i, phase in enumerate(spec.functions):
            namespace[f"phase_{i}"] = self._phase(phase)
        exec(compile(source, f"<torchrl_warp {fn_name}>", "exec"), namespace)
        return namespace[fn_name]

    def _cached(self, source: str, fn_name: str, spec: KernelSpec, namespace: dict, options: dict, jit,
                announce: bool = True):
        """``jit(fn, cache)`` of the driver ``fn_name`` defined in ``source``, from the kernel
        cache's file when it has one; logs the compile (:func:`~torchrl_warp.kernel_cache.announce`)
        unless ``announce`` is False."""
        key = kernel_cache.driver_key(source, spec.functions, self.name, options, namespace)
        namespace = {**namespace, **{f"phase_{i}": self._phase(p) for i, p in enumerate(spec.functions)}}
        label = self.label or _label(spec)
        fn, path = kernel_cache.load_driver(source, fn_name, namespace, key=key, label=label, kind=spec.kind)
        try:
            kernel = jit(fn, path is not None)
        except RuntimeError:  # Numba found no folder it may write its cache in
            path, kernel = None, jit(fn, False)
        if announce:
            kernel_cache.announce(label, self.name, spec.kind, kernel, path)
        return kernel

    def _phase(self, phase):
        return phase

    def _compile(self, spec: KernelSpec):
        raise NotImplementedError

    def view(self, tensor: torch.Tensor):
        """A zero-copy array over ``tensor`` that the compiled drivers accept."""
        raise NotImplementedError

    def launch(self, kernel, num_envs: int, num_agents: int, args: tuple, key: str | None = None) -> None:
        """Run ``kernel``; ``key`` names a launch that repeats with the same arguments."""
        raise NotImplementedError

    def forget_graphs(self, recompiled: tuple[str, ...] = ()) -> None:
        """Drop captured launches (their arguments changed); ``recompiled``: the keys whose
        kernel changed too (their next launch runs eagerly). Only the CUDA backend has any."""


class CpuBackend(Backend):
    """``numba.njit(parallel=True)`` loops over environments, on the threads that
    :func:`~torchrl_warp.threads.num_threads` gives each launch; at one thread, the same
    loop compiled serially runs in the calling thread (no thread pool to wake)."""

    name = "cpu"

    def __init__(self, device, label=None):
        super().__init__(device, label)
        #: Numba's threading layer (``workqueue`` unless the user chose: :mod:`~torchrl_warp.threads`)
        self.threading_layer = threads.start_numba_threads()

    def _compile(self, spec):
        source, fn_name, namespace = spec.cpu_source(), f"warp_{spec.kind}_cpu", {"prange": numba.prange}
        # Numba compiles on the first call: the variant that is never called costs nothing.
        # The log line is about the one this process's thread count picks.
        one = threads.num_threads() == 1
        return CpuKernel(
            self._cached(source, fn_name, spec, namespace, {"parallel": True},
                         lambda fn, cache: numba.njit(parallel=True, cache=cache)(fn), announce=not one),
            self._cached(source, fn_name, spec, namespace, {"parallel": False},
                         lambda fn, cache: numba.njit(cache=cache)(fn), announce=one))

    def view(self, tensor):
        return tensor.detach().numpy()

    def launch(self, kernel, num_envs, num_agents, args, key=None):
        kernel(num_envs, num_agents, *args)


class CpuKernel:
    """A CPU backend's kernel: called, it runs ``parallel`` on
    :func:`~torchrl_warp.threads.num_threads` of Numba's threads, or ``serial`` (the same
    loop, compiled without ``parallel=True``) in the calling thread when that is one.

    A one-thread ``parallel`` launch would still hand its loop to the pool and wait for it
    (``workqueue``: ~100 us per launch on a 2-core CPU, against ~1 us serially)."""

    def __init__(self, parallel, serial):
        self.parallel, self.serial = parallel, serial

    def __call__(self, *args):
        n = threads.num_threads()
        if n == 1:
            return self.serial(*args)
        with threads.numba_threads(n):
            return self.parallel(*args)

    @property
    def stats(self):
        """Numba's compile and cache statistics of the variant a call runs now."""
        return (self.serial if threads.num_threads() == 1 else self.parallel).stats


class KernelSequence:
    """Kernels launched one after the other as one (``sequence[blocks, threads, stream](...)``,
    a Numba kernel's launch), each with its own arguments out of the whole set (``picks``: their
    indices after the four launch-layout ones). On one stream each kernel starts after the last
    one ended: the launch boundary is a barrier across the whole grid."""

    def __init__(self, kernels: list, picks: list[tuple[int, ...]]):
        self.kernels, self.picks = kernels, picks

    def __getitem__(self, config):
        launches = [kernel[config] for kernel in self.kernels]

        def launch(num_envs, num_agents, threads_per_env, envs_per_block, *args):
            for run, pick in zip(launches, self.picks):
                run(num_envs, num_agents, threads_per_env, envs_per_block, *[args[i] for i in pick])
        return launch


class _CudaLayout(Backend):
    """Launch layout shared by the GPU and its simulator.

    An env gets a power of two of lanes (its agents rounded up, at most
    ``max_threads_per_env``; lanes stride over the agents beyond), and a block holds
    ``min_block_threads`` lanes or one env, whichever is more. Blocks of 128 rather than
    256 (H200, 10k envs x 110 agents: 0.617 -> 0.594 ms per step): a block's
    barriers then wait for one env's warps, not two, and at ~120 registers per thread
    the SM fits 4 blocks of 128 where it fit 2 of 256 (the same warps, finer-grained).
    """

    max_threads_per_env = 256
    min_block_threads = 128
    splits = True

    def layout(self, num_envs: int, num_agents: int) -> tuple[int, int, int, int]:
        """``(threads_per_env, envs_per_block, blocks, threads_per_block)`` for a launch."""
        threads_per_env = min(_next_pow2(num_agents), self.max_threads_per_env)
        block_threads = max(threads_per_env, self.min_block_threads)
        envs_per_block = block_threads // threads_per_env
        blocks = -(-num_envs // envs_per_block)
        return threads_per_env, envs_per_block, blocks, block_threads

    def _compile(self, spec):
        from numba import cuda

        source = spec.cuda_source()
        if simulator_enabled():  # Python run by the simulator: nothing to cache
            return cuda.jit(self._exec(source, f"warp_{spec.kind}_cuda", spec,
                                       {"cuda": cuda, "rebase": rebase_in_python}))
        options = {} if spec.max_registers is None else {"max_registers": spec.max_registers}
        return self._cached(source, f"warp_{spec.kind}_cuda", spec, {"cuda": cuda, "rebase": rebase}, options,
                            lambda fn, cache: cuda.jit(fn, cache=cache, **options))


class CudaBackend(_CudaLayout):
    """Numba-CUDA kernels launched on torch's current stream.

    With ``graphs=True``, each kernel is launched eagerly once (Numba compiles and
    loads it), then captured into a ``torch.cuda.CUDAGraph`` and replayed: a replay
    costs a few microseconds, a launch from Python tens. The captured launch keeps
    its arguments, so :meth:`forget_graphs` must be called when any argument changes.
    """

    name = "cuda"
    moves_outputs = True

    def __init__(self, device, graphs: bool = True, label: str | None = None):
        super().__init__(device, label)
        from numba import cuda

        self._cuda = cuda
        self._gpu = cuda.gpus[device.index or 0]
        self._streams: dict[int, object] = {}
        self.graphs = graphs
        self._graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self._launched: set[str] = set()

    def view(self, tensor):
        with self._gpu:
            return self._cuda.as_cuda_array(tensor.detach(), sync=False)

    def _stream(self):
        handle = torch.cuda.current_stream(self.device).cuda_stream
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = self._cuda.external_stream(handle)
        return stream

    def launch(self, kernel, num_envs, num_agents, args, key=None):
        # a launch while torch captures a graph (a GraphedCollector's batch) becomes part of that graph
        if key is None or not self.graphs or torch.cuda.is_current_stream_capturing():
            return self._launch(kernel, num_envs, num_agents, args)
        graph = self._graphs.get(key)
        if graph is None:
            if key not in self._launched:  # first launch compiles: it cannot be captured
                self._launched.add(key)
                return self._launch(kernel, num_envs, num_agents, args)
            graph = torch.cuda.CUDAGraph()
            with cuda_graph(graph, self.device):
                self._launch(kernel, num_envs, num_agents, args)
            self._graphs[key] = graph
        graph.replay()

    def forget_graphs(self, recompiled=()) -> None:
        self._graphs.clear()
        self._launched.difference_update(recompiled)  # a new kernel compiles on its first launch

    def _launch(self, kernel, num_envs, num_agents, args):
        tpe, epb, blocks, threads = self.layout(num_envs, num_agents)
        with self._gpu:
            kernel[blocks, threads, self._stream()](
                num_envs, num_agents, tpe, epb, *args
            )


class SimulatorBackend(_CudaLayout):
    """The CUDA kernel source, run by Numba's CUDA simulator on the CPU."""

    name = "cudasim"
    # every simulated thread is a Python thread: keep blocks small
    max_threads_per_env = 16
    min_block_threads = 16

    def _phase(self, phase):
        # The simulator runs kernels as Python, so phases run as Python too; the jitted
        # helpers they call get the numpy arrays under the simulator's fake device arrays
        return _python_phase(phase, _fake_array_numpy)

    def view(self, tensor):
        # a fake device array over the numpy view: passing the numpy array itself
        # would make the simulator copy it in and out, which needs it contiguous
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(tensor.detach().numpy())

    def launch(self, kernel, num_envs, num_agents, args, key=None):
        tpe, epb, blocks, threads = self.layout(num_envs, num_agents)
        kernel[blocks, threads](num_envs, num_agents, tpe, epb, *args)


def _label(spec: KernelSpec) -> str:
    """Whom ``spec``'s kernels are for, when the backend was given no label: its first phase's module."""
    fn = spec.functions[0]
    return (getattr(fn, "__module__", None) or "kernel").rsplit(".", 1)[-1]


def _python_phase(phase, unwrap):
    """``phase`` run as Python (what the simulator and the bounds-checked backend run): the
    jitted helpers it calls stay jitted, each argument passed through ``unwrap`` first (the
    array Numba can type under the backend's own array kind)."""
    fn = getattr(phase, "py_func", phase)
    namespace = dict(fn.__globals__)
    for name, value in fn.__globals__.items():
        if isinstance(value, numba.core.registry.CPUDispatcher):
            namespace[name] = _unwrapping(value, unwrap)
    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)


def _unwrapping(dispatcher, unwrap):
    def call(*args):
        return dispatcher(*(unwrap(a) for a in args))

    return call


def _fake_array_numpy(a):
    """The numpy array under one of the simulator's fake device arrays."""
    return getattr(a, "_item", a)._ary if hasattr(a, "_item") else a


# ----- a bounds-checked run of the kernels -------------------------------------------------
#: the backend name of :class:`BoundsCheckedBackend` (``WarpEnv(backend="cpu_checked")``)
BOUNDS_CHECKED = "cpu_checked"


class _Checked(np.ndarray):
    """A numpy view of one kernel argument that raises :class:`_OutOfBounds` (naming the
    argument and the whole index) where numpy raises ``IndexError``. Views of it (``a[env]``)
    remember the index that made them, so an error shows the index into the whole array."""

    def __array_finalize__(self, obj):
        self._name = getattr(obj, "_name", "?")
        self._full_shape = getattr(obj, "_full_shape", self.shape)
        self._prefix = getattr(obj, "_prefix", ())

    def _fail(self, index, err, action):
        index = index if isinstance(index, tuple) else (index,)
        raise _OutOfBounds(self._name, self._full_shape, self._prefix + index, action, err) from None

    def __getitem__(self, index):
        try:
            out = super().__getitem__(index)
        except IndexError as err:
            self._fail(index, err, "read")
        if isinstance(out, _Checked) and out.base is not None:
            out._prefix = self._prefix + (index if isinstance(index, tuple) else (index,))
        return out

    def __setitem__(self, index, item):
        try:
            super().__setitem__(index, item)
        except IndexError as err:
            self._fail(index, err, "wrote")


class _OutOfBounds(IndexError):
    """An index outside a kernel argument (a state field, an output, a constant)."""

    def __init__(self, name, shape, index, action, err):
        super().__init__(str(err))
        self.name, self.shape, self.index, self.action, self.numpy_error = name, tuple(shape), index, action, err


def _show_index(index) -> str:
    return ", ".join(":" if isinstance(i, slice) else str(int(i)) if isinstance(i, numbers.Integral) else repr(i)
                     for i in index)


class BoundsCheckedBackend:
    """The CPU backend's loop (``KernelSpec.cpu_source``), run as Python over arrays that check
    every index: a phase that reads or writes outside a field raises ``IndexError`` naming the
    env, the kernel, the phase, the field, its declared and full shapes, and the index.

    What the CPU backend lets through silently (Numba does not check indices) and the
    simulator reports as numpy's bare ``IndexError``, this names. Phases run as Python, the
    ``@njit`` helpers they call stay compiled (as in the simulator). Slow: for tests and
    :func:`~torchrl_warp.check_env`, at small sizes. ``WarpEnv(backend="cpu_checked")``.

    Args:
        device: the CPU device.
        owner: the env's name in the errors.
        fields: the env's state fields (``Field``), for their declared shapes.
    """

    name = BOUNDS_CHECKED
    moves_outputs = False
    splits = False
    compile_step = Backend.compile_step

    def __init__(self, device, owner: str, fields=()):
        self.device = device
        self.owner = owner
        self.fields = {f.name: f for f in fields}

    def compile(self, spec):
        """A Python driver of ``spec`` (never cached: its errors name this env)."""
        namespace = {"prange": range}
        for i, phase in enumerate(spec.functions):
            namespace[f"phase_{i}"] = self._phase(spec, i, phase)
        source = spec.cpu_source()
        exec(compile(source, f"<torchrl_warp checked {spec.kind}>", "exec"), namespace)
        driver = namespace[f"warp_{spec.kind}_cpu"]
        names = ("num_envs", "num_agents") + tuple(spec.arguments)

        def run(num_envs, num_agents, *args):
            checked = [self._checked(name, a) for name, a in zip(names[2:], args)]
            driver(int(num_envs), int(num_agents), *checked)

        return run

    def _checked(self, name, value):
        if not isinstance(value, np.ndarray):
            return value
        out = value.view(_Checked)
        out._name, out._full_shape, out._prefix = name, value.shape, ()
        return out

    def _phase(self, spec, i, phase):
        fn = getattr(phase, "py_func", phase)
        python, count = _python_phase(phase, _plain_array), len(spec.functions)

        def call(env, agent, *args):
            try:
                return python(env, agent, *args)
            except _OutOfBounds as err:
                raise IndexError(self._message(spec, i, count, fn, env, agent, err)) from None

        return call

    def _message(self, spec, i, count, fn, env, agent, err) -> str:
        field = self.fields.get(err.name)
        if field is None:
            declared = "a constant or builtin argument"
        else:
            lead = "[num_envs, num_agents]" if field.per_agent else "[num_envs]"
            declared = f"declared as {lead} + {tuple(field.shape)}"
            if err.name == "observation":
                declared += " (the Layout's observation_shape)"
            elif err.name == "action":
                declared += " (the action spec's shape)"
        detail = str(err.numpy_error)
        return (f"{self.owner}: the {spec.kind} kernel's phase {fn.__qualname__} (phase {i + 1} of {count}), at env "
                f"{env}, agent {agent}, {err.action} {err.name}[{_show_index(err.index)}], outside {err.name}'s shape "
                f"{err.shape} ({declared}): {detail}")

    def view(self, tensor):
        return tensor.detach().numpy()

    def launch(self, kernel, num_envs, num_agents, args, key=None):
        kernel(num_envs, num_agents, *args)

    def forget_graphs(self, recompiled=()):
        """Nothing is captured: kernels run as Python."""


def _plain_array(a):
    """The plain numpy array under a checked one (Numba types those)."""
    return a.view(np.ndarray) if isinstance(a, _Checked) else a



def make_backend(name: str | None, device: torch.device, cuda_graphs: bool = True,
                 label: str | None = None, fields=()) -> Backend:
    """The backend for ``device``; ``name=None`` picks the natural one.

    ``cuda`` devices run the ``cuda`` backend; the ``cpu`` device runs ``cpu``,
    or ``cudasim`` when ``NUMBA_ENABLE_CUDASIM=1``; ``cpu_checked`` (asked for by name)
    is :class:`BoundsCheckedBackend`. ``label`` names whom the kernels are for in the
    compile log line and the bounds-checked errors (an env passes its class name);
    ``fields``: the env's state fields, whose declared shapes those errors give.
    """
    sim = simulator_enabled()
    if name is None:
        name = "cuda" if device.type == "cuda" else ("cudasim" if sim else "cpu")
    if name == "cuda":
        if device.type != "cuda":
            raise ValueError(f"backend 'cuda' needs a CUDA device, got device={device}")
        if sim:
            raise RuntimeError(
                "backend 'cuda' is unavailable: NUMBA_ENABLE_CUDASIM=1 replaced "
                "numba.cuda by its simulator in this process"
            )
        return CudaBackend(device, graphs=cuda_graphs, label=label)
    if name in ("cpu", "cudasim", BOUNDS_CHECKED):
        if device.type != "cpu":
            raise ValueError(f"backend {name!r} runs on device='cpu', got device={device}")
        if name == "cudasim":
            if not sim:
                raise RuntimeError(
                    "backend 'cudasim' needs NUMBA_ENABLE_CUDASIM=1 in the environment "
                    "before numba is first imported"
                )
            return SimulatorBackend(device, label)
        if name == BOUNDS_CHECKED:
            return BoundsCheckedBackend(device, label or "the env", fields)
        return CpuBackend(device, label)
    raise ValueError(f"unknown backend {name!r}: expected 'cuda', 'cpu', 'cudasim' or {BOUNDS_CHECKED!r}")
