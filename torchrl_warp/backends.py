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

The ``cpu`` and ``cuda`` backends compile through the kernel cache
(:mod:`~torchrl_warp.kernel_cache`): a process loads the kernels an earlier one
compiled. The simulator runs Python and has nothing to cache.

Examples:
    >>> backend = make_backend("cpu", torch.device("cpu"))
    >>> backend.name
    'cpu'
"""
from __future__ import annotations

import types

import numba
import torch

from torchrl_warp import kernel_cache, threads
from torchrl_warp.codegen import KernelSpec
from torchrl_warp.rebase import rebase, rebase_in_python
from torchrl_warp.simulator import simulator_enabled

__all__ = ["Backend", "CpuBackend", "CpuKernel", "CudaBackend", "SimulatorBackend", "make_backend", "simulator_enabled"]

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

    def compile(self, spec: KernelSpec):
        key = (self.name, spec)
        if key not in _COMPILED:
            _COMPILED[key] = self._compile(spec)
        return _COMPILED[key]

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
            with torch.cuda.device(self.device), torch.cuda.graph(graph):
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
        # The simulator runs kernels as Python, so phases run as Python too. Jitted
        # helpers they call stay jitted; those given the simulator's fake device
        # arrays get the numpy arrays underneath instead.
        fn = getattr(phase, "py_func", phase)
        namespace = dict(fn.__globals__)
        for name, value in fn.__globals__.items():
            if isinstance(value, numba.core.registry.CPUDispatcher):
                namespace[name] = _with_numpy_arrays(value)
        return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)

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


def _with_numpy_arrays(dispatcher):
    def call(*args):
        return dispatcher(*(getattr(a, "_item", a)._ary if hasattr(a, "_item") else a for a in args))

    return call


def make_backend(name: str | None, device: torch.device, cuda_graphs: bool = True,
                 label: str | None = None) -> Backend:
    """The backend for ``device``; ``name=None`` picks the natural one.

    ``cuda`` devices run the ``cuda`` backend; the ``cpu`` device runs ``cpu``,
    or ``cudasim`` when ``NUMBA_ENABLE_CUDASIM=1``. ``label`` names whom the kernels
    are for in the compile log line (an env passes its class name).
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
    if name in ("cpu", "cudasim"):
        if device.type != "cpu":
            raise ValueError(f"backend {name!r} runs on device='cpu', got device={device}")
        if name == "cudasim":
            if not sim:
                raise RuntimeError(
                    "backend 'cudasim' needs NUMBA_ENABLE_CUDASIM=1 in the environment "
                    "before numba is first imported"
                )
            return SimulatorBackend(device, label)
        return CpuBackend(device, label)
    raise ValueError(f"unknown backend {name!r}: expected 'cuda', 'cpu' or 'cudasim'")
