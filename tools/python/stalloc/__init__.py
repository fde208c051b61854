# SPDX-License-Identifier: MIT
"""Install libstalloc as PyTorch's CUDA allocator.

stalloc is a GPU memory manager for deep-learning training: it records the
allocation requests of a few iterations, plans where every tensor lives and
then hands out the planned addresses.  This package is the Python side of
it, in pure Python with no dependency beyond the standard library (PyTorch
is imported only by :func:`enable`)::

    import stalloc

    stalloc.enable(mode="auto")      # before anything touches CUDA
    model = build_model().cuda()
    for batch in loader:
        stalloc.iteration()          # one call at the top of each step
        train_step(model, batch)
    print(stalloc.stats())

Functions
---------
:func:`library`
    find and load ``libstalloc.so`` with :mod:`ctypes` (cached).
:func:`enable`
    set the configuration and make libstalloc PyTorch's CUDA allocator.
:func:`iteration`, :func:`mark`
    mark the points of the training loop that the planner works with.
:func:`stats`
    one device's statistics, as a dict.
:func:`empty_cache`
    give cached device memory back to the driver.
:func:`version`
    the loaded library's version string.

Every failure raises :class:`StallocError` (a :class:`RuntimeError`) with a
message that says what to do about it.

Configuration is by environment variables, which libstalloc reads when a
device is first used: ``STALLOC_MODE``, ``STALLOC_PLAN``, ``STALLOC_TRACE``,
``STALLOC_AUTO_ITERS``, ``STALLOC_BACKEND`` and ``STALLOC_LOG`` (see
Documentation/mapper.rst).  :func:`enable` sets them from its arguments; an
argument left ``None`` keeps what the environment already says.
"""

import ctypes
import ctypes.util
import os
import re
import threading

__all__ = [
    "StallocError",
    "StallocStats",
    "library",
    "enable",
    "iteration",
    "mark",
    "stats",
    "empty_cache",
    "torch_shim",
    "version",
]

#: Oldest PyTorch :func:`enable` supports (CUDAPluggableAllocator with the
#: allocator's native hooks).
MIN_TORCH = (2, 1)

MODES = ("off", "trace", "plan", "auto")
BACKENDS = ("cuda", "host", "auto")
LOG_LEVELS = ("none", "error", "warn", "info", "debug")

# The PyTorch hooks, in the order enable() sets them: the setter on the
# native allocator object, and the libstalloc function it is given.
_HOOKS = (
    ("set_init_fn", "stalloc_init"),
    ("set_reset_fn", "stalloc_empty_cache"),
    ("set_memory_fraction_fn", "stalloc_memory_fraction"),
    ("set_record_stream_fn", "stalloc_record_stream"),
)

# The CUDA graph pool hooks (torch >= 2.3), from libstalloc-torch.so: their
# types are C++ (a MempoolId_t and a std::function), so the shim takes them.
_POOL_HOOKS = (
    ("set_begin_allocate_to_pool", "stalloc_torch_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "stalloc_torch_end_allocate_to_pool"),
    ("set_release_pool", "stalloc_torch_release_pool"),
)
_SHIM = "libstalloc-torch.so"


class StallocError(RuntimeError):
    """A stalloc operation failed; the message says what and why."""


class StallocStats(ctypes.Structure):
    """``struct stalloc_stats`` of include/stalloc/stalloc.h (all uint64_t)."""

    _fields_ = [
        ("allocated", ctypes.c_uint64),
        ("allocated_peak", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64),
        ("reserved_peak", ctypes.c_uint64),
        ("mapped", ctypes.c_uint64),
        ("mapped_peak", ctypes.c_uint64),
        ("plan_hits", ctypes.c_uint64),
        ("plan_misses", ctypes.c_uint64),
        ("dynamic_bytes", ctypes.c_uint64),
        ("allocs", ctypes.c_uint64),
        ("frees", ctypes.c_uint64),
        ("bad_frees", ctypes.c_uint64),
        ("oom", ctypes.c_uint64),
        ("driver_calls", ctypes.c_uint64),
    ]

    def as_dict(self):
        """Return the fields as a dict, in the struct's order."""
        return {name: getattr(self, name) for name, _ in self._fields_}


# name: (restype, argtypes) for every function of include/stalloc/stalloc.h
_PROTOTYPES = {
    "stalloc_version": (ctypes.c_int, []),
    "stalloc_version_string": (ctypes.c_char_p, []),
    "stalloc_last_error": (ctypes.c_char_p, []),
    "stalloc_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "stalloc_set_log_level": (ctypes.c_int, [ctypes.c_int]),
    "stalloc_malloc": (ctypes.c_void_p,
                       [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]),
    "stalloc_free": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p]),
    "stalloc_init": (None, [ctypes.c_int]),
    "stalloc_empty_cache": (None, []),
    "stalloc_memory_fraction": (None, [ctypes.c_double, ctypes.c_int]),
    "stalloc_record_stream": (None, [ctypes.c_void_p, ctypes.c_void_p]),
    "stalloc_mark": (None, [ctypes.c_char_p]),
    "stalloc_stats": (ctypes.c_int,
                      [ctypes.c_int, ctypes.POINTER(StallocStats)]),
    "stalloc_shutdown": (None, []),
}

_LIBNAME = "libstalloc.so"
_lock = threading.Lock()
_loaded = None  # the ctypes.CDLL library() loaded; it has a .stalloc_path


def _build_path():
    """Return where a repository checkout's ``make all`` puts the library.

    The package lives in ``tools/python/stalloc/``: three levels below the
    repository root, whose ``build/`` holds ``libstalloc.so``.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    return os.path.join(root, "build", _LIBNAME)


def _candidates(path):
    """Return ``(how, path)`` pairs to try, best first.

    An explicit choice (the argument, else ``STALLOC_LIBRARY``) is the only
    candidate: a wrong setting must fail, not quietly load another library.
    A directory stands for the ``libstalloc.so`` in it.
    """
    if path is None and os.environ.get("STALLOC_LIBRARY"):
        path, how = os.environ["STALLOC_LIBRARY"], "STALLOC_LIBRARY"
    else:
        how = "path argument"
    if path is not None:
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, _LIBNAME)
        return [(how, path)]
    found = [("repository build", _build_path())]
    name = ctypes.util.find_library("stalloc")
    found.append(("ctypes.util.find_library('stalloc')",
                  name if name else None))
    return found


def _declare(lib):
    """Set restype and argtypes of every function; complain of missing ones."""
    missing = []
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise StallocError("%s is not a usable libstalloc: it lacks %s"
                           % (lib.stalloc_path, ", ".join(missing)))


def library(path=None):
    """Find and load libstalloc, once per process.

    :param path: the shared library (or a directory holding
        ``libstalloc.so``).  Without it, the ``STALLOC_LIBRARY`` environment
        variable; without that, ``build/libstalloc.so`` of the repository
        checkout this package lives in; without that,
        ``ctypes.util.find_library("stalloc")`` (an installed library).
    :returns: the :class:`ctypes.CDLL`, its functions declared with the
        prototypes of ``stalloc.h`` (``stalloc_malloc``, ``stalloc_free``,
        ``stalloc_stats``, ...).  Its ``stalloc_path`` attribute is the path
        or name it was loaded by.
    :raises StallocError: when no library is found (the message lists every
        place tried), when it does not load or lacks a function, or when a
        different libstalloc is already loaded: one process has one
        allocator.

    The first library loaded is cached; later calls without a path return
    it, and calls naming the same file return it too.
    """
    global _loaded

    with _lock:
        if path is None and _loaded is not None:
            return _loaded
        tried = []
        chosen = None
        for how, cand in _candidates(path):
            if cand is None:
                tried.append("%s: not found" % how)
            elif os.sep not in cand or os.path.isfile(cand):
                # a bare name comes from find_library: dlopen searches it
                chosen = cand
                break
            else:
                tried.append("%s: %s: no such file" % (how, cand))
        if chosen is None:
            raise StallocError(
                "cannot find libstalloc; tried %s.  Build it (make all) or "
                "set STALLOC_LIBRARY to its path" % "; ".join(tried))
        if _loaded is not None:
            if _same_file(chosen, _loaded.stalloc_path):
                return _loaded
            raise StallocError(
                "libstalloc is already loaded from %s; cannot also load %s "
                "(one process has one allocator)"
                % (_loaded.stalloc_path, chosen))
        if os.sep in chosen:
            chosen = os.path.abspath(chosen)
        try:
            lib = ctypes.CDLL(chosen)
        except OSError as exc:
            raise StallocError("cannot load libstalloc from %s: %s"
                               % (chosen, exc)) from exc
        lib.stalloc_path = chosen
        _declare(lib)
        _loaded = lib
        return lib


# enable() has a parameter named library
_load_library = library


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


def _text(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def _last_error(lib, err=None):
    """The calling thread's stalloc_last_error(), else strerror(@err)."""
    msg = _text(lib.stalloc_last_error())
    if not msg and err is not None:
        msg = _text(lib.stalloc_strerror(err))
    return msg or "unknown error"


def _settings(mode, plan, trace, auto_iters, backend, log):
    """Check enable()'s arguments; return the environment they stand for."""
    env = {}
    if mode is not None:
        if str(mode).lower() not in MODES:
            raise ValueError("mode %r: want one of %s"
                             % (mode, ", ".join(MODES)))
        env["STALLOC_MODE"] = str(mode).lower()
    if plan is not None:
        env["STALLOC_PLAN"] = os.fspath(plan)
    if trace is not None:
        env["STALLOC_TRACE"] = os.fspath(trace)
    if auto_iters is not None:
        if isinstance(auto_iters, bool) or not isinstance(auto_iters, int) \
                or auto_iters < 1:
            raise ValueError("auto_iters %r: want a positive int"
                             % (auto_iters,))
        env["STALLOC_AUTO_ITERS"] = str(auto_iters)
    if backend is not None:
        if str(backend).lower() not in BACKENDS:
            raise ValueError("backend %r: want one of %s"
                             % (backend, ", ".join(BACKENDS)))
        env["STALLOC_BACKEND"] = str(backend).lower()
    if log is not None:
        if str(log).lower() not in LOG_LEVELS:
            raise ValueError("log %r: want one of %s"
                             % (log, ", ".join(LOG_LEVELS)))
        env["STALLOC_LOG"] = str(log).lower()
    merged = dict(os.environ, **env)
    if merged.get("STALLOC_MODE", "").lower() == "plan" \
            and not merged.get("STALLOC_PLAN"):
        raise ValueError("mode 'plan' needs a plan: pass plan= or set "
                         "STALLOC_PLAN")
    return env


def _torch_version(text):
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _import_torch():
    """Import torch and check that it can take a pluggable allocator."""
    try:
        import torch
    except ImportError as exc:
        raise StallocError("stalloc.enable() needs PyTorch %d.%d or later, "
                           "and torch cannot be imported: %s"
                           % (MIN_TORCH + (exc,))) from exc
    text = str(getattr(torch, "__version__", "unknown"))
    ver = _torch_version(text)
    if ver is None or ver < MIN_TORCH:
        raise StallocError("stalloc.enable() needs PyTorch %d.%d or later "
                           "(CUDAPluggableAllocator); this is torch %s"
                           % (MIN_TORCH + (text,)))
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    for name in ("CUDAPluggableAllocator", "change_current_allocator"):
        if not hasattr(memory, name):
            raise StallocError("torch %s has no torch.cuda.memory.%s: "
                               "stalloc cannot be installed" % (text, name))
    return torch


def _fn_ptr(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def torch_shim(lib=None):
    """Return the path of libstalloc-torch.so, the C++ shim PyTorch loads.

    It sits beside the libstalloc :func:`library` loaded (the build
    directory, or the installed library directory).

    :raises StallocError: when it is not there.
    """
    lib = lib or library()
    path = os.path.join(os.path.dirname(os.path.abspath(lib.stalloc_path))
                        if os.sep in lib.stalloc_path else "", _SHIM)
    if os.sep in path and os.path.isfile(path):
        return path
    name = ctypes.util.find_library("stalloc-torch")
    if name:
        return name
    raise StallocError("cannot find %s beside %s: build it (make all) or "
                       "install it (make install)" % (_SHIM,
                                                      lib.stalloc_path))


def enable(mode="auto", plan=None, trace=None, auto_iters=None,
           backend=None, library=None, log=None):
    """Make libstalloc PyTorch's CUDA allocator.

    Call it once, before anything allocates CUDA memory or otherwise
    initialises CUDA in this process: PyTorch cannot change its allocator
    afterwards, and libstalloc reads its configuration when a device is
    first used.

    :param mode: ``"off"`` (the dynamic allocator only), ``"trace"``
        (also record every request), ``"plan"`` (serve a plan made offline
        by ``stalloc-plan``) or ``"auto"`` (trace the first iterations,
        plan them in the background and switch to the plan).  Sets
        ``STALLOC_MODE``.
    :param plan: the plan file for ``"plan"`` mode (``STALLOC_PLAN``); a
        pattern where ``%p`` is the pid, ``%d`` the device and ``%r`` the
        ``RANK`` environment variable.
    :param trace: where traces go (``STALLOC_TRACE``, same pattern).
    :param auto_iters: iterations to trace in ``"auto"`` mode before
        planning (``STALLOC_AUTO_ITERS``).
    :param backend: ``"cuda"``, ``"host"`` (host memory, for tests) or
        ``"auto"`` (``STALLOC_BACKEND``).
    :param library: the libstalloc to load; see :func:`library`.
    :param log: what libstalloc prints to stderr: ``"none"``, ``"error"``,
        ``"warn"``, ``"info"`` or ``"debug"`` (``STALLOC_LOG``).

    An argument left ``None`` leaves its environment variable as it is.

    :returns: the ``torch.cuda.memory.CUDAPluggableAllocator`` installed.
    :raises ValueError: for a bad argument.
    :raises StallocError: when torch cannot be imported, is older than 2.1,
        has already initialised CUDA, or the library cannot be loaded.
        Nothing is changed then, not even the environment.

    The allocation functions come from ``libstalloc-torch.so`` (beside the
    library): out of memory raises ``RuntimeError("CUDA out of memory
    (stalloc) ...")`` with stalloc's figures instead of handing PyTorch a
    NULL (``STALLOC_OOM=abort`` stops the process with the report instead).
    The hooks ``init``, ``reset`` (:func:`empty_cache`), ``memory fraction``,
    ``record stream`` and, from torch 2.3, the CUDA graph pool hooks
    (``begin/end_allocate_to_pool``, ``release_pool``) are installed where
    the torch version has them.
    """
    env = _settings(mode, plan, trace, auto_iters, backend, log)
    torch = _import_torch()
    if torch.cuda.is_initialized():
        raise StallocError("stalloc.enable() must run before CUDA is "
                           "initialised: call it before the first tensor "
                           "is put on a GPU")
    lib = _load_library(library)
    shim_path = torch_shim(lib)
    try:
        shim = ctypes.CDLL(shim_path)
    except OSError as exc:
        raise StallocError("cannot load %s: %s" % (shim_path, exc)) from exc
    os.environ.update(env)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(
        shim_path, "stalloc_torch_malloc", "stalloc_torch_free")
    native = alloc.allocator() if hasattr(alloc, "allocator") \
        else getattr(alloc, "_allocator", None)
    for setter, fn in _HOOKS:
        if hasattr(native, setter):
            getattr(native, setter)(_fn_ptr(lib, fn))
    for setter, fn in _POOL_HOOKS:
        if hasattr(native, setter):
            getattr(native, setter)(_fn_ptr(shim, fn))
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def mark(label):
    """Mark a point of the training loop with one word.

    The label goes into the trace of every device in use (spaces become
    ``_``); ``"iteration"`` starts an iteration, see :func:`iteration`.
    """
    if not isinstance(label, str) or not label:
        raise ValueError("label %r: want a non-empty str" % (label,))
    library().stalloc_mark(label.encode("utf-8"))


def iteration():
    """Mark the start of a training iteration.

    Call it at the same point of every step, before the step's first
    allocation: iterations are what ``auto`` mode counts and what a plan
    repeats.
    """
    library().stalloc_mark(b"iteration")


def stats(device=0):
    """Return one device's statistics as a dict.

    The keys are the fields of ``struct stalloc_stats`` in its order:
    ``allocated``, ``allocated_peak``, ``reserved``, ``reserved_peak``,
    ``mapped``, ``mapped_peak``, ``plan_hits``, ``plan_misses``,
    ``dynamic_bytes``, ``allocs``, ``frees``, ``bad_frees``, ``oom`` and
    ``driver_calls``; all ints (bytes or counts).

    :raises StallocError: for a device out of range or never used.
    """
    lib = library()
    st = StallocStats()
    err = lib.stalloc_stats(int(device), ctypes.byref(st))
    if err:
        raise StallocError("stalloc_stats(device %d) failed: %s"
                           % (device, _last_error(lib, err)))
    return st.as_dict()


def empty_cache():
    """Give every device's cached, unused memory back to the driver.

    ``torch.cuda.empty_cache()`` does the same where torch has the reset
    hook.
    """
    library().stalloc_empty_cache()


def version():
    """Return the loaded library's version, ``"MAJOR.MINOR.PATCH"``."""
    return _text(library().stalloc_version_string())
