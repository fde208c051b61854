# SPDX-License-Identifier: MIT
"""Install libstalloc as PyTorch's CUDA allocator.

stalloc is a GPU memory manager for deep-learning training: it records the
allocation requests of a few iterations, plans where every tensor lives and
then hands out the planned addresses.  This package is the Python side of
it, in pure Python with no dependency beyond the standard library (PyTorch
is imported only by :func:`enable`)::

    import stalloc

    stalloc.enable()                 # before anything touches CUDA
    model = build_model().cuda()
    for batch in loader:
        train_step(model, batch)     # optimizer.step() marks iterations
    print(stalloc.memory_summary())

Functions
---------
:func:`library`
    find and load ``libstalloc.so`` with :mod:`ctypes` (cached).
:func:`enable`
    set the configuration and make libstalloc PyTorch's CUDA allocator.
:func:`iteration`, :func:`mark`
    mark the points of the training loop that the planner works with
    (:func:`enable` marks each optimizer step by itself; an explicit
    :func:`iteration` turns that off).
:func:`stats`
    one device's statistics, as a dict.
:func:`memory_stats`, :func:`memory_summary`, :func:`reset_peak_memory_stats`
    the same in ``torch.cuda.memory_stats()``'s keys, and stalloc's own view
    as text; :func:`enable` answers torch's memory statistics from them.
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

import collections
import ctypes
import ctypes.util
import errno
import os
import re
import sys
import threading

from . import _torch

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
    "memory_stats",
    "memory_summary",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "__version__",
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


def _package_version():
    """The version: written into the installed package by setup.py, else
    read from include/stalloc/stalloc.h of the checkout (the one place it
    is kept)."""
    try:
        from ._version import version as v
        return v
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    header = os.path.join(here, "..", "..", "..", "include", "stalloc",
                          "stalloc.h")
    try:
        with open(header) as f:
            text = f.read()
        return ".".join(re.search(r"#define STALLOC_VERSION_%s (\d+)" % k,
                                  text).group(1)
                        for k in ("MAJOR", "MINOR", "PATCH"))
    except (OSError, AttributeError):
        return "unknown"


__version__ = _package_version()


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
        ("alloc_retries", ctypes.c_uint64),
        ("allocated_total", ctypes.c_uint64),
        ("freed_total", ctypes.c_uint64),
        ("device_syncs", ctypes.c_uint64),
        ("host_waits", ctypes.c_uint64),
        ("driver_allocs", ctypes.c_uint64),
        ("driver_alloc_bytes", ctypes.c_uint64),
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
    "stalloc_reset_peak": (ctypes.c_int, [ctypes.c_int]),
    "stalloc_shutdown": (None, []),
}

_LIBNAME = "libstalloc.so"
_lock = threading.Lock()
_loaded = None  # the ctypes.CDLL library() loaded; it has a .stalloc_path


def _package_path():
    """Return the libstalloc shipped inside an installed package, or None.

    ``pip install`` puts ``libstalloc.so.MAJOR`` (the name the shims link
    to) beside this file.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        names = sorted(n for n in os.listdir(here)
                       if n.startswith(_LIBNAME + "."))
    except OSError:
        return None
    return os.path.join(here, names[0]) if names else None


def _mapped_path(prefix=_LIBNAME, maps="/proc/self/maps"):
    """Return the file of a library whose name starts with @prefix that is
    already mapped into this process (LD_PRELOAD of libstalloc-cpu.so brings
    libstalloc in before Python runs), or None."""
    try:
        with open(maps) as f:
            for line in f:
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if os.path.basename(path).startswith(prefix) and \
                        os.path.isfile(path):
                    return path
    except OSError:
        return None
    return None


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
    found = [("already in this process", _mapped_path()),
             ("the installed package", _package_path()),
             ("repository build", _build_path())]
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
        variable; without that, the libstalloc already in the process (put
        there by ``LD_PRELOAD`` of ``libstalloc-cpu.so``: one process has
        one allocator); without that, the copy inside the installed package
        (``pip install``); without that, ``build/libstalloc.so`` of the
        repository checkout this package lives in; without that,
        ``ctypes.util.find_library("stalloc")`` (``make install``).
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


def _import_torch():
    """Import torch; nothing else."""
    try:
        import torch
    except ImportError as exc:
        raise StallocError("stalloc.enable() needs PyTorch %d.%d or later, "
                           "and torch cannot be imported: %s"
                           % (MIN_TORCH + (exc,))) from exc
    return torch


def _check_cuda_torch(torch):
    """Check that @torch can take libstalloc as its CUDA allocator."""
    text = str(getattr(torch, "__version__", "unknown"))
    ver = _torch_version(text)
    if ver is None or ver < MIN_TORCH:
        raise StallocError("stalloc.enable() needs PyTorch %d.%d or later "
                           "(CUDAPluggableAllocator); this is torch %s"
                           % (MIN_TORCH + (text,)))
    tv = getattr(torch, "version", None)
    if getattr(tv, "cuda", None) is None and \
            getattr(tv, "hip", None) is None:
        raise StallocError(
            "torch %s is a CPU-only build (torch.version.cuda is None): "
            "stalloc.enable() installs a CUDA allocator.  For CPU tensors, "
            "run the job with LD_PRELOAD=libstalloc-cpu.so "
            "(Documentation/cpu-preload.rst) and stalloc.enable() marks "
            "its iterations" % text)
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    for name in ("CUDAPluggableAllocator", "change_current_allocator"):
        if not hasattr(memory, name):
            raise StallocError("torch %s has no torch.cuda.memory.%s: "
                               "stalloc cannot be installed" % (text, name))
    if torch.cuda.is_initialized():
        raise StallocError("stalloc.enable() must run before CUDA is "
                           "initialised: call it before the first tensor "
                           "is put on a GPU")


def _preloaded():
    """The libstalloc-cpu.so preloaded into this process, or None."""
    return _mapped_path("libstalloc-cpu.so")


# What enable() did, for a second call to refuse; None until it succeeded.
_enabled = None


def enable(mode=None, plan=None, trace=None, auto_iters=None,
           backend=None, library=None, log=None, step_markers=True,
           torch_stats=True):
    """Make libstalloc PyTorch's CUDA allocator: the one line a job adds.

    Call it once, before anything allocates CUDA memory or otherwise
    initialises CUDA in this process: PyTorch cannot change its allocator
    afterwards, and libstalloc reads its configuration when a device is
    first used.

    :param mode: ``"off"`` (the dynamic allocator only), ``"trace"``
        (also record every request), ``"plan"`` (serve a plan made offline
        by ``stalloc-plan``) or ``"auto"`` (trace the first iterations,
        plan them in the background and switch to the plan).  Sets
        ``STALLOC_MODE``; ``None``: what ``STALLOC_MODE`` says, else
        ``"auto"``.
    :param plan: the plan file for ``"plan"`` mode (``STALLOC_PLAN``); a
        pattern where ``%p`` is the pid, ``%d`` the device and ``%r`` the
        rank (``RANK``, else ``LOCAL_RANK``, else 0).
    :param trace: where traces go (``STALLOC_TRACE``, same pattern).
    :param auto_iters: iterations to trace in ``"auto"`` mode before
        planning (``STALLOC_AUTO_ITERS``).
    :param backend: ``"cuda"``, ``"host"`` (host memory, for tests) or
        ``"auto"`` (``STALLOC_BACKEND``).
    :param library: the libstalloc to load; see :func:`library`.
    :param log: what libstalloc prints to stderr: ``"none"``, ``"error"``,
        ``"warn"``, ``"info"`` or ``"debug"`` (``STALLOC_LOG``).
    :param step_markers: mark an iteration at each step of the first
        optimizer that steps (a global optimizer step hook; see
        :func:`iteration`), so that the training loop needs no edit.
    :param torch_stats: answer ``torch.cuda.memory_stats()``,
        ``memory_allocated()``, ``max_memory_allocated()``,
        ``memory_reserved()``, ``max_memory_reserved()``,
        ``reset_peak_memory_stats()``, ``memory_summary()`` and their
        relatives from :func:`memory_stats`: under a pluggable allocator
        torch's own raise.

    An argument left ``None`` leaves its environment variable as it is.

    :returns: the ``torch.cuda.memory.CUDAPluggableAllocator`` installed
        (``None`` under ``libstalloc-cpu.so``, see below).
    :raises ValueError: for a bad argument.
    :raises StallocError: when torch cannot be imported, is older than 2.1,
        is a CPU-only build, has already initialised CUDA, when enable()
        already ran, or the library or its torch shim cannot be loaded.
        Every check is made before anything is changed: a failed call
        leaves the environment, torch and the process as they were.

    The allocation functions come from ``libstalloc-torch.so`` (beside the
    library): out of memory raises ``torch.OutOfMemoryError("CUDA out of
    memory (stalloc) ...")`` (a ``RuntimeError``), as PyTorch's own
    allocator does, with stalloc's figures instead of handing PyTorch a
    NULL (``STALLOC_OOM=abort`` stops the process with the report instead).
    The hooks ``init``, ``reset`` (:func:`empty_cache`), ``memory fraction``,
    ``record stream`` and, from torch 2.3, the CUDA graph pool hooks
    (``begin/end_allocate_to_pool``, ``release_pool``) are installed where
    the torch version has them.

    Under ``LD_PRELOAD=libstalloc-cpu.so`` (CPU tensors, any torch) the
    preloaded library is the allocator already and read its settings from
    the environment when the process started: enable() then only adds the
    step markers, and refuses a setting that differs from the environment.
    """
    global _enabled

    # every check first ...
    if _enabled is not None:
        raise StallocError("stalloc.enable() was already called (%s): one "
                           "process has one allocator, enabled once"
                           % _enabled)
    env = _settings(mode, plan, trace, auto_iters, backend, log)
    torch = _import_torch()
    preload = _preloaded()
    if preload:
        clash = sorted("%s=%s" % kv for kv in env.items()
                       if os.environ.get(kv[0], "").lower() != kv[1].lower())
        if clash:
            raise StallocError(
                "%s is preloaded and took its settings from the "
                "environment when the process started; set %s there "
                "instead of passing it to stalloc.enable()"
                % (preload, ", ".join(clash)))
        lib = _load_library(library)
        markers = _torch.StepMarkers(torch, _auto_mark) \
            if step_markers else None
        # ... then the changes, which cannot fail
        if markers:
            markers.install()
        _enabled = "libstalloc-cpu.so preloaded"
        return None
    if mode is None and not os.environ.get("STALLOC_MODE"):
        env["STALLOC_MODE"] = "auto"
    _check_cuda_torch(torch)
    lib = _load_library(library)
    shim_path = torch_shim(lib)
    try:
        shim = ctypes.CDLL(shim_path)
    except OSError as exc:
        raise StallocError("cannot load %s: %s" % (shim_path, exc)) from exc
    markers = _torch.StepMarkers(torch, _auto_mark) if step_markers else None
    stats = _torch.CudaStats(torch, _module()) if torch_stats else None

    # ... then the changes; the environment goes back if torch refuses
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
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
    except BaseException:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        raise
    if markers:
        markers.install()
    if stats:
        stats.install()
    _enabled = "CUDA allocator, %s" % shim_path
    return alloc


def _module():
    return sys.modules[__name__]


# True once the user marked an iteration: the step markers stand down.
_explicit_marks = False


def _auto_mark():
    """Mark an iteration for the step markers; False once the user marks."""
    if _explicit_marks:
        return False
    library().stalloc_mark(b"iteration")
    return True


def mark(label):
    """Mark a point of the training loop with one word.

    The label goes into the trace of every device in use (spaces become
    ``_``); ``"iteration"`` starts an iteration, see :func:`iteration`.
    """
    global _explicit_marks

    if not isinstance(label, str) or not label:
        raise ValueError("label %r: want a non-empty str" % (label,))
    if label == "iteration":
        _explicit_marks = True
    library().stalloc_mark(label.encode("utf-8"))


def iteration():
    """Mark the start of a training iteration.

    Call it at the same point of every step, before the step's first
    allocation: iterations are what ``auto`` mode counts and what a plan
    repeats.  Without it, :func:`enable` marks an iteration at each step of
    the first optimizer that steps; the first explicit call turns those
    markers off for good (explicit markers win), so call it from the first
    step on.
    """
    global _explicit_marks

    _explicit_marks = True
    library().stalloc_mark(b"iteration")


def stats(device=0):
    """Return one device's statistics as a dict.

    The keys are the fields of ``struct stalloc_stats`` in its order:
    ``allocated``, ``allocated_peak``, ``reserved``, ``reserved_peak``,
    ``mapped``, ``mapped_peak``, ``plan_hits``, ``plan_misses``,
    ``dynamic_bytes``, ``allocs``, ``frees``, ``bad_frees``, ``oom``,
    ``driver_calls``, ``alloc_retries``, ``allocated_total``,
    ``freed_total``, ``device_syncs``, ``host_waits``, ``driver_allocs``
    and ``driver_alloc_bytes``; all ints (bytes or counts).

    :raises StallocError: for a device out of range or never used.
    """
    lib = library()
    st = StallocStats()
    err = lib.stalloc_stats(int(device), ctypes.byref(st))
    if err:
        raise StallocError("stalloc_stats(device %d) failed: %s"
                           % (device, _last_error(lib, err)))
    return st.as_dict()


# The counters reset_accumulated_memory_stats() started again from, per
# device: libstalloc's counters only grow, so the reset is an offset.
_ACCUMULATED = ("allocs", "frees", "oom", "plan_hits", "plan_misses",
                "bad_frees", "driver_calls", "alloc_retries",
                "allocated_total", "freed_total", "device_syncs",
                "host_waits", "driver_allocs", "driver_alloc_bytes")
_accumulated_base = {}


def _device_stats(device):
    """stats(@device), all zeros for a device in range but never used."""
    lib = library()
    st = StallocStats()
    err = lib.stalloc_stats(int(device), ctypes.byref(st))
    if err == -errno.ENOENT:
        return StallocStats().as_dict()
    if err:
        raise StallocError("stalloc_stats(device %d) failed: %s"
                           % (device, _last_error(lib, err)))
    d = st.as_dict()
    for k, v in _accumulated_base.get(int(device), {}).items():
        d[k] -= min(v, d[k])
    return d


def memory_stats(device=0):
    """Return one device's statistics in ``torch.cuda.memory_stats()``'s keys.

    An ordered dict of ints, with the keys of PyTorch's caching allocator
    that libstalloc can answer: ``allocated_bytes.all.current`` and
    ``.peak`` (bytes handed out, as requested), ``active_bytes.all.*`` and
    ``requested_bytes.all.*`` (the same: stalloc holds no freed block back
    for a stream), ``reserved_bytes.all.current`` and ``.peak`` (physical
    memory held), ``allocation.all.current``, ``.allocated`` and ``.freed``
    (counts), ``allocated_bytes.all.allocated`` and ``.freed`` (bytes ever
    handed out and freed), ``num_alloc_retries`` and ``num_ooms``; and
    stalloc's own under ``stalloc.``:
    ``plan_hits``, ``plan_misses``, ``dynamic_bytes``,
    ``mapped_bytes.current`` and ``.peak``, ``bad_frees``, ``driver_calls``.  Keys stalloc has
    no figure for (the small and large pools, split blocks) are left out
    rather than made up.  A device never used gives zeros.

    :raises StallocError: for a device out of range.
    """
    s = _device_stats(device)
    out = collections.OrderedDict()
    for key in ("active_bytes", "allocated_bytes", "requested_bytes"):
        out[key + ".all.current"] = s["allocated"]
        out[key + ".all.peak"] = s["allocated_peak"]
    out["allocation.all.allocated"] = s["allocs"]
    out["allocation.all.current"] = s["allocs"] - min(s["frees"], s["allocs"])
    out["allocation.all.freed"] = s["frees"]
    for key in ("active_bytes", "allocated_bytes", "requested_bytes"):
        out[key + ".all.allocated"] = s["allocated_total"]
        out[key + ".all.freed"] = s["freed_total"]
    out["num_alloc_retries"] = s["alloc_retries"]
    out["num_ooms"] = s["oom"]
    out["reserved_bytes.all.current"] = s["reserved"]
    out["reserved_bytes.all.peak"] = s["reserved_peak"]
    out["stalloc.bad_frees"] = s["bad_frees"]
    out["stalloc.driver_calls"] = s["driver_calls"]
    out["stalloc.dynamic_bytes"] = s["dynamic_bytes"]
    out["stalloc.mapped_bytes.current"] = s["mapped"]
    out["stalloc.mapped_bytes.peak"] = s["mapped_peak"]
    out["stalloc.plan_hits"] = s["plan_hits"]
    out["stalloc.plan_misses"] = s["plan_misses"]
    return out


def reset_peak_memory_stats(device=0):
    """Start the device's peaks (allocated, reserved, mapped) from now.

    :raises StallocError: for a device out of range.
    """
    lib = library()
    err = lib.stalloc_reset_peak(int(device))
    if err and err != -errno.ENOENT:
        raise StallocError("stalloc_reset_peak(device %d) failed: %s"
                           % (device, _last_error(lib, err)))


def reset_accumulated_memory_stats(device=0):
    """Start the device's counters (allocations, frees, OOMs, plan hits and
    misses, driver calls) from zero, as torch's function of that name."""
    s = _device_stats(device)
    base = _accumulated_base.setdefault(int(device), {})
    for k in _ACCUMULATED:
        base[k] = base.get(k, 0) + s[k]


def _mib(n):
    return "%.1f MiB" % (n / 1048576.0)


def memory_summary(device=0):
    """Return stalloc's own view of a device as text, for a log.

    The mode and plan in use, plan hits and misses (and the hit fraction),
    memory allocated, reserved and mapped now and at their peaks, the
    dynamic region's share, and the counters.
    """
    s = _device_stats(device)
    served = s["plan_hits"] + s["plan_misses"]
    mode = os.environ.get("STALLOC_MODE") or "off"
    rows = [
        ("mode (STALLOC_MODE)", mode),
        ("plan hits", "%d of %d requests (%.1f%%), %d misses"
         % (s["plan_hits"], s["allocs"],
            100.0 * s["plan_hits"] / max(s["allocs"], 1),
            s["plan_misses"])),
        ("allocated now / peak", "%s / %s" % (_mib(s["allocated"]),
                                              _mib(s["allocated_peak"]))),
        ("  of it dynamic (not planned)", _mib(s["dynamic_bytes"])),
        ("reserved now / peak", "%s / %s" % (_mib(s["reserved"]),
                                             _mib(s["reserved_peak"]))),
        ("mapped now / peak", "%s / %s" % (_mib(s["mapped"]),
                                           _mib(s["mapped_peak"]))),
        ("allocations / frees", "%d / %d" % (s["allocs"], s["frees"])),
        ("bad frees, out of memory", "%d, %d" % (s["bad_frees"], s["oom"])),
        ("driver calls", "%d" % s["driver_calls"]),
    ]
    if not served and mode == "auto":
        rows[1] = ("plan hits", "none yet (auto mode plans after "
                   "STALLOC_AUTO_ITERS iterations)")
    width = max(len(k) for k, _ in rows)
    lines = ["stalloc %s, device %d" % (version(), int(device))]
    lines += ["  %-*s  %s" % (width, k, v) for k, v in rows]
    return "\n".join(lines) + "\n"


def empty_cache():
    """Give every device's cached, unused memory back to the driver.

    ``torch.cuda.empty_cache()`` does the same where torch has the reset
    hook.
    """
    library().stalloc_empty_cache()


def version():
    """Return the loaded library's version, ``"MAJOR.MINOR.PATCH"``."""
    return _text(library().stalloc_version_string())
