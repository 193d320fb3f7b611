"""The kernel cache: compiled drivers kept on disk, so that a new process's first step does not compile.

Numba caches a compiled function on disk (``cache=True``), keyed by the function's
source file; the drivers that :mod:`~torchrl_warp.codegen` writes have no file. So each
driver's source is written to a file in the cache folder, named by a hash of everything
that determines what it compiles to (:func:`driver_key`), executed from there as a
module, and compiled with ``cache=True``: Numba's own cache (an index ``.nbi`` and data
``.nbc`` files, in ``__pycache__`` beside the file, or under ``NUMBA_CACHE_DIR`` if set)
then holds the machine code, the phase functions it calls compiled into it. A second
process finds the file and Numba's entry, and loads instead of compiling (on a 2-core CPU,
Tag's two kernels: ~25 s of compiling become ~0.08 s of loading, after Numba's own set-up
of ~0.5 s once per process).

* **Folder**: ``TORCHRL_WARP_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchrl_warp/kernels``
  (``~/.cache/torchrl_warp/kernels``); :func:`cache_dir` says which.
* **Off**: ``TORCHRL_WARP_CACHE=0`` (kernels then compile in every process, as before).
* **What invalidates an entry**: it is never invalidated, only no longer found. Its key
  covers the generated source; the backend and its compile options; each phase function
  and, followed through their globals and closures, every function, overload and
  intrinsic they call: the code of each and the whole source file that defines it
  (outside Python's standard library, Numba and NumPy), with the values of the globals
  and closure cells they read; the Python, Numba, numba-cuda, llvmlite and NumPy
  versions. Change any of these and the kernel gets a new file, compiled once. Numba's
  index adds the CPU model (or the GPU's compute capability) and the argument types.
* **Clearing it**: delete the folder (``rm -rf ~/.cache/torchrl_warp/kernels``), at any
  time: processes then compile again. Old entries are never removed by themselves.
* **Concurrent processes** (pytest-xdist workers) may write the same entry: each file is
  written to a temporary name and moved into place (``os.replace``), with the same
  content and modification time whoever writes it, and Numba writes its index and data
  the same way; at worst both compile.

Compiling logs one line per env class and backend, on the logger ``torchrl_warp.kernels``
(at INFO; on stderr when the application configured no logging):
``compiling CartPoleEnv's kernels for cpu (first use; cached in ...)``. Loading from the
cache logs at DEBUG only. Silence it with
``logging.getLogger("torchrl_warp.kernels").setLevel(logging.WARNING)``.

Examples:
    >>> import numba
    >>> from torchrl_warp.codegen import KernelSpec
    >>> @numba.njit
    ... def move(env, agent, pos, speed):
    ...     pos[env, agent] += speed
    >>> spec = KernelSpec("step", (move,))
    >>> key = driver_key(spec.cpu_source(), spec.functions, "cpu", {"parallel": True})
    >>> len(key)
    32
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import types
import uuid
from importlib import metadata
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "CACHE_ENV", "switched_off", "cache_dir", "driver_key", "load_driver", "has_entry", "announce", "logger"]

#: environment variable: the cache folder
CACHE_DIR_ENV = "TORCHRL_WARP_CACHE_DIR"
#: environment variable: ``0`` (or ``off``, ``false``, ``no``) switches the cache off
CACHE_ENV = "TORCHRL_WARP_CACHE"
#: the logger of the compile lines
logger = logging.getLogger("torchrl_warp.kernels")

# bump when what a key covers or how entries are laid out changes
_FORMAT = "1"
# every entry's file gets this modification time: numba-cuda's index checks (mtime, size)
_STAMP = 1_000_000_000
# modules whose code is fixed by the versions in the key: named, not hashed
_LIBRARIES = frozenset(("numba", "numba_cuda", "llvmlite", "numpy", "torch")) | frozenset(sys.stdlib_module_names)
_announced: set = set()
_unwritable: set = set()


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` says ``0``, ``off``, ``false`` or ``no``
    (any case, blanks around): how ``TORCHRL_WARP_CACHE`` switches the cache off.

    >>> os.environ["EXAMPLE_SWITCH"] = " Off"
    >>> switched_off("EXAMPLE_SWITCH"), switched_off("EXAMPLE_SWITCH_UNSET")
    (True, False)
    >>> del os.environ["EXAMPLE_SWITCH"]
    """
    return os.environ.get(variable, "1").strip().lower() in ("0", "off", "false", "no")


def cache_dir() -> Path | None:
    """The kernel cache's folder, or None when ``TORCHRL_WARP_CACHE=0`` switches it off."""
    if switched_off(CACHE_ENV):
        return None
    folder = os.environ.get(CACHE_DIR_ENV, "").strip()
    if folder:
        return Path(folder).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchrl_warp" / "kernels"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def driver_key(source: str, functions, backend: str, options: dict, namespace: dict | None = None) -> str:
    """A hash (32 hex digits) of everything that determines a driver's machine code: its
    ``source``, the phase ``functions`` it calls (followed as the module's docstring says),
    the ``backend`` and its compile ``options``, the names it gets besides the phases
    (``namespace``), and the library versions."""
    walk = _Fingerprint()
    walk.feed("format", _FORMAT, sys.version)
    for package in ("numba", "numba-cuda", "llvmlite", "numpy"):
        walk.feed(package, _version(package))
    walk.feed("backend", backend, repr(sorted(options.items())), "source", source)
    for i, fn in enumerate(functions):
        walk.value(f"phase_{i}", fn, frozenset())
    for name, value in sorted((namespace or {}).items()):
        walk.value(name, value, frozenset())
    return walk.hexdigest()[:32]


class _Fingerprint:
    """Feeds a hash with what a function compiles from: its code, its source file, and
    what its globals and closure cells hold, functions followed (once each)."""

    def __init__(self):
        self._hash = hashlib.sha256()
        self._seen: dict[int, object] = {}  # id -> object (kept alive so ids stay unique)
        self._files: set[str] = set()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def feed(self, *parts) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode()
            self._hash.update(len(data).to_bytes(8, "little"))
            self._hash.update(data)

    def file(self, path: str | None) -> None:
        if not path or path in self._files or not os.path.isfile(path):
            return
        self._files.add(path)
        with open(path, "rb") as f:
            self.feed("file", os.path.basename(path), hashlib.sha256(f.read()).digest())

    def once(self, obj) -> bool:
        if id(obj) in self._seen:
            return False
        self._seen[id(obj)] = obj
        return True

    def function(self, fn) -> None:
        if not self.once(fn):
            self.feed("again", fn.__qualname__)
            return
        code = fn.__code__
        self.feed("function", fn.__module__, fn.__qualname__, _code_digest(code))
        if _library(fn.__module__):
            return
        self.file(code.co_filename)
        names = _names(code)
        for name in sorted(names & fn.__globals__.keys()):
            self.value(name, fn.__globals__[name], names)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                self.value(name, cell.cell_contents, names)
            except ValueError:  # an empty cell
                self.feed(name, "empty cell")
        for i, default in enumerate(fn.__defaults__ or ()):
            self.value(f"default {i}", default, names)

    def value(self, name: str, obj, names: frozenset) -> None:
        import numpy as np

        self.feed("name", name)
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
            self.feed(type(obj).__name__, repr(obj))
        elif isinstance(obj, (tuple, list)):
            self.feed(type(obj).__name__, len(obj))
            for i, item in enumerate(obj):
                self.value(f"{name}[{i}]", item, names)
        elif isinstance(obj, np.ndarray):
            self.feed("ndarray", obj.dtype.str, obj.shape, hashlib.sha256(np.ascontiguousarray(obj).tobytes()).digest())
        elif isinstance(obj, types.ModuleType):
            self.feed("module", obj.__name__)
            if not _library(obj.__name__) and self.once(obj):
                self.file(getattr(obj, "__file__", None))
                for attr in sorted(n for n in names if hasattr(obj, n)):  # what `module.attr` reads
                    self.value(f"{name}.{attr}", getattr(obj, attr), names)
        else:
            fn = getattr(obj, "py_func", None) or getattr(obj, "_defn", None) or obj  # Numba dispatchers, intrinsics
            if isinstance(fn, types.FunctionType):
                self.function(fn)
                return
            kind = type(obj)
            module = getattr(obj, "__module__", None) or kind.__module__
            self.feed("object", kind.__module__, kind.__qualname__, module,
                      getattr(obj, "__qualname__", getattr(obj, "__name__", "")))
            if not _library(module) and isinstance(module, str):
                self.file(getattr(sys.modules.get(module), "__file__", None))
            elif _library(kind.__module__) and kind.__module__.startswith("numba"):
                self.feed(str(obj))  # a Numba type (float32, ...) reads as itself


def _library(module) -> bool:
    return isinstance(module, str) and module.partition(".")[0] in _LIBRARIES


def _names(code) -> frozenset:
    """The global and attribute names a code object reads, nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return frozenset(names)


def _code_digest(code) -> str:
    h = hashlib.sha256()
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                 (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)):
        h.update(repr(part).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(_code_digest(const).encode())
        elif isinstance(const, frozenset):  # its order varies between processes
            h.update(repr(sorted(map(repr, const))).encode())
        else:
            h.update(repr(const).encode())
    return h.hexdigest()


def load_driver(source: str, fn_name: str, namespace: dict, *, key: str, label: str,
                kind: str) -> tuple[types.FunctionType, Path | None]:
    """The driver ``fn_name`` defined by ``source`` with ``namespace`` as its globals, and
    the file it was executed from (None: in memory, the cache being off or unwritable).

    From a file, the driver's module is registered in ``sys.modules`` (Numba's cache
    finds a loaded function's globals through it)."""
    folder = cache_dir()
    stem = "".join(c if c.isalnum() else "_" for c in label) + f"_{kind}_{key}"
    path = None if folder is None else folder / f"{stem}.py"
    text = source
    if path is not None:
        text = f"# {label}'s {kind} driver, generated by torchrl_warp (see torchrl_warp.kernel_cache)\n" + source
        try:
            _write_once(path, text)
        except OSError as error:
            if folder not in _unwritable:
                _unwritable.add(folder)
                logger.warning("cannot write the kernel cache in %s (%s): kernels compile in every process; "
                               "set %s to a writable folder, or %s=0", folder, error, CACHE_DIR_ENV, CACHE_ENV)
            path, text = None, source
    if path is None:
        exec(compile(source, f"<torchrl_warp {fn_name}>", "exec"), namespace)
        return namespace[fn_name], None
    module = types.ModuleType(f"torchrl_warp_kernel_{stem}")
    module.__file__ = str(path)
    module.__dict__.update(namespace)
    sys.modules[module.__name__] = module
    exec(compile(text, str(path), "exec"), module.__dict__)
    return module.__dict__[fn_name], path


def _write_once(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it holds it already, atomically, with a fixed mtime."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.utime(tmp, (_STAMP, _STAMP))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def has_entry(dispatcher) -> bool:
    """Whether Numba's cache holds a fresh entry for ``dispatcher`` (for some argument types)."""
    cache = getattr(dispatcher, "_cache", None)
    try:
        return bool(cache._cache_file._load_index())
    except Exception:  # no cache, or Numba's internals moved: say it compiles
        return False


def announce(label: str, backend: str, kind: str, dispatcher, path: Path | None) -> None:
    """Log that ``label``'s kernels compile for ``backend`` (once per label and backend),
    or, at DEBUG, that ``kind``'s kernel loads from the cache."""
    if path is not None and has_entry(dispatcher):
        logger.debug("loading %s's %s kernel for %s from the kernel cache (%s)", label, kind, backend, path)
        return
    if (label, backend) in _announced:
        return
    _announced.add((label, backend))
    where = f"cached in {path.parent}" if path is not None else \
        f"kernel cache off: {CACHE_ENV}=0" if cache_dir() is None else "kernel cache unwritable"
    _info(f"compiling {label}'s kernels for {backend} (first use; {where})")


def _info(message: str) -> None:
    if logger.hasHandlers():  # the application configured logging: its levels decide
        logger.info(message)
    elif logger.level == logging.NOTSET or logger.isEnabledFor(logging.INFO):
        # nothing configured: Python would drop an INFO line, and the compile is seconds of silence
        print(f"{logger.name}: {message}", file=sys.stderr)
