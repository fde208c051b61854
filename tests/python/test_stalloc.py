# SPDX-License-Identifier: MIT
"""Tests of the Python helper package tools/python/stalloc.

Run from the repository root, after ``make all``::

    python3 -m unittest discover -s tests/python -v

The ctypes layer runs against libstalloc's host backend (host memory stands
in for device memory), so no GPU is needed; enable() runs against fake
``torch`` modules that record what is done to them, so neither PyTorch nor
CUDA is needed either.  STALLOC_LIBRARY picks the library under test
(default: build/libstalloc.so of this checkout).
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PKG_DIR = os.path.join(ROOT, "tools", "python")
sys.path.insert(0, PKG_DIR)

import stalloc  # noqa: E402

# What every host-backend test runs under: small, GPU-less, quiet.
HOST_ENV = {
    "STALLOC_BACKEND": "host",
    "STALLOC_HOST_MEM": "1G",
    "STALLOC_VA_SIZE": "4G",
    "STALLOC_MODE": "off",
}

MiB = 1 << 20


def clean_environ(**extra):
    """Patch os.environ: no STALLOC_* setting but STALLOC_LIBRARY, + extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STALLOC_") or k == "STALLOC_LIBRARY"}
    env.update(extra)
    return mock.patch.dict(os.environ, env, clear=True)


def run_python(code, **env):
    """Run @code in a fresh interpreter that imports the package."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("STALLOC_")}
    full["PYTHONPATH"] = PKG_DIR
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)


def header_version():
    with open(os.path.join(ROOT, "include", "stalloc", "stalloc.h")) as f:
        text = f.read()
    parts = [re.search(r"#define STALLOC_VERSION_%s (\d+)" % k, text)
             .group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class LibraryTest(unittest.TestCase):
    """stalloc.library(): finding, loading and declaring libstalloc."""

    def setUp(self):
        self.lib = stalloc.library()

    def test_loaded_and_cached(self):
        self.assertTrue(os.path.isabs(self.lib.stalloc_path))
        self.assertIs(stalloc.library(), self.lib)
        self.assertIs(stalloc.library(self.lib.stalloc_path), self.lib)
        self.assertIs(stalloc.library(
            os.path.dirname(self.lib.stalloc_path)), self.lib)

    def test_every_function_declared(self):
        for name, (restype, argtypes) in stalloc._PROTOTYPES.items():
            fn = getattr(self.lib, name)
            self.assertEqual(fn.restype, restype, name)
            self.assertEqual(fn.argtypes, argtypes, name)
        self.assertEqual(self.lib.stalloc_malloc.restype, ctypes.c_void_p)
        self.assertEqual(self.lib.stalloc_stats.argtypes[1],
                         ctypes.POINTER(stalloc.StallocStats))

    def test_stats_struct_matches_header(self):
        with open(os.path.join(ROOT, "include", "stalloc",
                               "stalloc.h")) as f:
            text = f.read()
        body = re.search(r"struct stalloc_stats \{(.*?)\};", text, re.S)
        fields = re.findall(r"uint64_t (\w+);", body.group(1))
        self.assertEqual([n for n, _ in stalloc.StallocStats._fields_],
                         fields)

    def test_version(self):
        self.assertEqual(stalloc.version(), header_version())
        major, minor, patch = map(int, stalloc.version().split("."))
        self.assertEqual(self.lib.stalloc_version(),
                         major * 10000 + minor * 100 + patch)

    def test_wrong_path_is_named(self):
        bad = os.path.join(tempfile.gettempdir(), "no-such-dir",
                           "libstalloc.so")
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.library(bad)
        msg = str(cm.exception)
        self.assertIn(bad, msg)
        self.assertIn("path argument", msg)
        self.assertIn("no such file", msg)
        self.assertIn("STALLOC_LIBRARY", msg)

    def test_second_library_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "libstalloc.so")
            shutil.copy(self.lib.stalloc_path, copy)
            with self.assertRaises(stalloc.StallocError) as cm:
                stalloc.library(copy)
        self.assertIn("already loaded from " + self.lib.stalloc_path,
                      str(cm.exception))

    def test_found_in_build(self):
        built = os.path.join(ROOT, "build", "libstalloc.so")
        if not os.path.isfile(built):
            self.skipTest("no %s (a build elsewhere is under test)" % built)
        r = run_python("import stalloc; print(stalloc.library().stalloc_path)")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), built)

    def test_found_by_environment(self):
        r = run_python("import stalloc; print(stalloc.library().stalloc_path)",
                       STALLOC_LIBRARY=os.path.dirname(self.lib.stalloc_path))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), self.lib.stalloc_path)

    def test_wrong_environment_is_named(self):
        bad = os.path.join(tempfile.gettempdir(), "no-such-libstalloc.so")
        r = run_python("import stalloc; stalloc.library()",
                       STALLOC_LIBRARY=bad)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("StallocError: cannot find libstalloc; tried "
                      "STALLOC_LIBRARY: %s: no such file" % bad, r.stderr)

    def test_not_a_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            bogus = os.path.join(tmp, "libstalloc.so")
            with open(bogus, "w") as f:
                f.write("not an ELF file\n")
            r = run_python("import stalloc; stalloc.library(%r)" % bogus)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot load libstalloc from " + bogus, r.stderr)


class HostBackendTest(unittest.TestCase):
    """The raw allocator and the package's wrappers on the host backend."""

    def setUp(self):
        self.lib = stalloc.library()
        env = clean_environ(**HOST_ENV)
        env.start()
        self.addCleanup(env.stop)
        # bad frees and the like are expected: keep stderr quiet
        old = self.lib.stalloc_set_log_level(0)
        self.addCleanup(self.lib.stalloc_set_log_level, old)
        # every test starts afresh; the environment is read again
        self.lib.stalloc_shutdown()
        self.addCleanup(self.lib.stalloc_shutdown)

    def malloc(self, size, device=0):
        ptr = self.lib.stalloc_malloc(size, device, None)
        self.assertTrue(ptr, "stalloc_malloc(%d): %s" % (
            size, stalloc._last_error(self.lib)))
        return ptr

    def test_alloc_write_read_free(self):
        sizes = [1, 512, 4096, 3 * MiB + 5, 64 * MiB]
        ptrs = []
        for i, size in enumerate(sizes):
            ptr = self.malloc(size)
            pattern = bytes([i + 1]) * size
            ctypes.memmove(ptr, pattern, size)
            ptrs.append((ptr, size, pattern))
        for ptr, size, pattern in ptrs:
            self.assertEqual(ctypes.string_at(ptr, size), pattern)

        st = stalloc.stats(0)
        self.assertEqual(st["allocated"], sum(sizes))
        self.assertEqual(st["allocated_peak"], sum(sizes))
        self.assertEqual(st["allocs"], len(sizes))
        self.assertEqual(st["frees"], 0)
        self.assertGreaterEqual(st["reserved"], sum(sizes))
        self.assertGreaterEqual(st["mapped"], st["reserved"])
        self.assertGreater(st["driver_calls"], 0)

        for ptr, size, _ in ptrs:
            self.lib.stalloc_free(ptr, size, 0, None)
        st = stalloc.stats(0)
        self.assertEqual(st["allocated"], 0)
        self.assertEqual(st["allocated_peak"], sum(sizes))
        self.assertEqual(st["allocs"], len(sizes))
        self.assertEqual(st["frees"], len(sizes))
        self.assertEqual(st["bad_frees"], 0)
        self.assertEqual(st["oom"], 0)

    def test_stats_dict(self):
        self.lib.stalloc_free(self.malloc(MiB), MiB, 0, None)
        st = stalloc.stats()
        self.assertEqual(list(st), [n for n, _ in
                                    stalloc.StallocStats._fields_])
        self.assertTrue(all(isinstance(v, int) for v in st.values()))

    def test_zero_size(self):
        self.assertIsNone(self.lib.stalloc_malloc(0, 0, None))

    def test_bad_free_counted(self):
        ptr = self.malloc(4096)
        self.lib.stalloc_free(ptr, 4096, 0, None)
        self.lib.stalloc_free(ptr, 4096, 0, None)  # twice
        st = stalloc.stats(0)
        self.assertEqual(st["frees"], 1)
        self.assertEqual(st["bad_frees"], 1)

    def test_stats_errors(self):
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.stats(0)
        self.assertIn("device 0 was never used", str(cm.exception))
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.stats(-1)
        self.assertIn("out of range", str(cm.exception))

    def test_two_devices(self):
        a = self.malloc(MiB, 0)
        b = self.malloc(2 * MiB, 1)
        self.assertEqual(stalloc.stats(0)["allocated"], MiB)
        self.assertEqual(stalloc.stats(1)["allocated"], 2 * MiB)
        self.lib.stalloc_free(a, MiB, 0, None)
        self.lib.stalloc_free(b, 2 * MiB, 1, None)

    def test_empty_cache(self):
        ptr = self.malloc(64 * MiB)
        self.lib.stalloc_free(ptr, 64 * MiB, 0, None)
        before = stalloc.stats(0)["reserved"]
        stalloc.empty_cache()
        after = stalloc.stats(0)["reserved"]
        self.assertGreater(before, 0)
        self.assertLess(after, before)

    def test_hooks_callable(self):
        self.lib.stalloc_init(1)
        ptr = self.malloc(MiB)
        self.lib.stalloc_record_stream(ptr, None)
        self.lib.stalloc_memory_fraction(0.5, 0)
        self.lib.stalloc_memory_fraction(1.0, 0)
        self.lib.stalloc_free(ptr, MiB, 0, None)
        self.assertEqual(stalloc.stats(0)["bad_frees"], 0)

    def test_mark_arguments(self):
        for bad in ("", None, b"iteration"):
            with self.assertRaises(ValueError):
                stalloc.mark(bad)

    def test_trace(self):
        with tempfile.TemporaryDirectory() as tmp:
            pattern = os.path.join(tmp, "t-%p-%d.trace")
            os.environ["STALLOC_MODE"] = "trace"
            os.environ["STALLOC_TRACE"] = pattern
            keep = self.malloc(MiB)  # the device starts here
            for _ in range(3):
                stalloc.iteration()
                ptr = self.malloc(4 * MiB)
                stalloc.mark("forward done")
                self.lib.stalloc_free(ptr, 4 * MiB, 0, None)
            self.lib.stalloc_free(keep, MiB, 0, None)
            self.lib.stalloc_shutdown()  # closes the trace

            path = pattern.replace("%p", str(os.getpid())).replace("%d", "0")
            self.assertEqual(os.listdir(tmp), [os.path.basename(path)])
            with open(path) as f:
                lines = f.read().splitlines()
        self.assertTrue(lines[0].startswith("stalloc-trace 1"), lines[0])
        marks = [ln.split()[2] for ln in lines if ln.startswith("m ")]
        self.assertEqual(marks, ["iteration", "forward_done"] * 3)
        self.assertEqual(sum(ln.startswith("a ") for ln in lines), 4)
        self.assertEqual(sum(ln.startswith("f ") for ln in lines), 4)


def fake_torch(version="2.3.0", hooks=None, initialized=False, cuda="12.1"):
    """Make a fake ``torch`` module; return it and the list of its calls.

    @hooks: the setters the native allocator object has (default: all
    that enable() knows).  Each call is logged as a tuple.
    """
    calls = []
    if hooks is None:
        hooks = [setter for setter, _ in stalloc._HOOKS + stalloc._POOL_HOOKS]

    native = types.SimpleNamespace()
    for name in hooks:
        def setter(ptr, name=name):
            calls.append((name, ptr))
        setattr(native, name, setter)

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            settings = {k: v for k, v in os.environ.items()
                        if k.startswith("STALLOC_")
                        and k != "STALLOC_LIBRARY"}
            calls.append(("CUDAPluggableAllocator", path, alloc_fn_name,
                          free_fn_name, settings))

        def allocator(self):
            return native

    def change_current_allocator(alloc):
        calls.append(("change_current_allocator", alloc))

    def is_initialized():
        calls.append(("is_initialized",))
        return initialized

    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch.version = types.SimpleNamespace(cuda=cuda, hip=None)
    torch.cuda = types.ModuleType("torch.cuda")
    torch.cuda.is_initialized = is_initialized
    torch.cuda.memory = types.ModuleType("torch.cuda.memory")
    torch.cuda.memory.CUDAPluggableAllocator = CUDAPluggableAllocator
    torch.cuda.memory.change_current_allocator = change_current_allocator
    return torch, calls


def reset_enabled(test):
    """Let enable() run again in this process (each test starts afresh)."""
    for name in ("_enabled", "_explicit_marks"):
        patch = mock.patch.object(stalloc, name, getattr(stalloc, name)
                                  if name != "_enabled" else None)
        patch.start()
        test.addCleanup(patch.stop)
    stalloc._explicit_marks = False


class EnableTest(unittest.TestCase):
    """stalloc.enable() against fake torch modules."""

    def setUp(self):
        self.lib = stalloc.library()
        env = clean_environ()
        env.start()
        self.addCleanup(env.stop)
        reset_enabled(self)

    def with_torch(self, torch):
        patch = mock.patch.dict(sys.modules, {
            "torch": torch,
            "torch.cuda": getattr(torch, "cuda", None),
            "torch.cuda.memory": getattr(getattr(torch, "cuda", None),
                                         "memory", None),
        })
        patch.start()
        self.addCleanup(patch.stop)

    def settings(self):
        return {k: v for k, v in os.environ.items()
                if k.startswith("STALLOC_") and k != "STALLOC_LIBRARY"}

    def fn_ptr(self, name):
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    def shim_ptr(self, name):
        shim = ctypes.CDLL(stalloc.torch_shim(self.lib))
        return ctypes.cast(getattr(shim, name), ctypes.c_void_p).value

    def test_torch_missing(self):
        self.with_torch(None)  # "import torch" raises ImportError
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable(mode="trace")
        self.assertIn("needs PyTorch 2.1 or later, and torch cannot be "
                      "imported", str(cm.exception))
        self.assertIsInstance(cm.exception.__cause__, ImportError)
        self.assertEqual(self.settings(), {})

    def test_torch_too_old(self):
        torch, calls = fake_torch("1.13.1")
        self.with_torch(torch)
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable()
        self.assertIn("needs PyTorch 2.1 or later", str(cm.exception))
        self.assertIn("this is torch 1.13.1", str(cm.exception))
        self.assertEqual(calls, [])
        self.assertEqual(self.settings(), {})

    def test_torch_without_pluggable_allocator(self):
        torch, calls = fake_torch("2.1.0")
        del torch.cuda.memory.change_current_allocator
        self.with_torch(torch)
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable()
        self.assertIn("torch.cuda.memory.change_current_allocator",
                      str(cm.exception))
        self.assertEqual(calls, [])

    def test_cuda_already_initialised(self):
        torch, calls = fake_torch("2.3.0", initialized=True)
        self.with_torch(torch)
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable(mode="trace")
        self.assertIn("before CUDA is initialised", str(cm.exception))
        self.assertEqual(calls, [("is_initialized",)])
        self.assertEqual(self.settings(), {})

    def test_installs_with_every_hook(self):
        torch, calls = fake_torch("2.3.0+cu121")
        self.with_torch(torch)
        alloc = stalloc.enable(mode="auto", trace="/tmp/t-%r-%d.trace",
                               auto_iters=5, backend="host", log="warn")
        want_env = {
            "STALLOC_MODE": "auto",
            "STALLOC_TRACE": "/tmp/t-%r-%d.trace",
            "STALLOC_AUTO_ITERS": "5",
            "STALLOC_BACKEND": "host",
            "STALLOC_LOG": "warn",
        }
        self.assertEqual(calls, [
            ("is_initialized",),
            ("CUDAPluggableAllocator", stalloc.torch_shim(self.lib),
             "stalloc_torch_malloc", "stalloc_torch_free", want_env),
            ("set_init_fn", self.fn_ptr("stalloc_init")),
            ("set_reset_fn", self.fn_ptr("stalloc_empty_cache")),
            ("set_memory_fraction_fn",
             self.fn_ptr("stalloc_memory_fraction")),
            ("set_record_stream_fn", self.fn_ptr("stalloc_record_stream")),
            ("set_begin_allocate_to_pool",
             self.shim_ptr("stalloc_torch_begin_allocate_to_pool")),
            ("set_end_allocate_to_pool_fn",
             self.shim_ptr("stalloc_torch_end_allocate_to_pool")),
            ("set_release_pool",
             self.shim_ptr("stalloc_torch_release_pool")),
            ("change_current_allocator", alloc),
        ])
        self.assertIsInstance(alloc, torch.cuda.memory.CUDAPluggableAllocator)
        self.assertEqual(self.settings(), want_env)

    def test_hooks_only_where_present(self):
        # torch 2.1 has no record_stream hook, say
        torch, calls = fake_torch("2.1.2",
                                  hooks=["set_init_fn", "set_reset_fn"])
        self.with_torch(torch)
        alloc = stalloc.enable(mode="plan", plan="/plans/job-%r.plan")
        self.assertEqual([c[0] for c in calls], [
            "is_initialized", "CUDAPluggableAllocator", "set_init_fn",
            "set_reset_fn", "change_current_allocator"])
        self.assertEqual(calls[1][4], {"STALLOC_MODE": "plan",
                                       "STALLOC_PLAN": "/plans/job-%r.plan"})
        self.assertIs(calls[-1][1], alloc)

    def test_no_hooks(self):
        torch, calls = fake_torch("2.1.0a0+git1234", hooks=[])
        self.with_torch(torch)
        stalloc.enable(mode=None)
        self.assertEqual([c[0] for c in calls], [
            "is_initialized", "CUDAPluggableAllocator",
            "change_current_allocator"])
        # mode None: the environment's, else auto
        self.assertEqual(calls[1][4], {"STALLOC_MODE": "auto"})

    def test_mode_from_environment(self):
        torch, calls = fake_torch("2.3.0")
        self.with_torch(torch)
        os.environ["STALLOC_MODE"] = "trace"
        stalloc.enable()
        self.assertEqual(calls[1][4], {"STALLOC_MODE": "trace"})

    def test_explicit_library(self):
        torch, calls = fake_torch("2.4.1")
        self.with_torch(torch)
        stalloc.enable(library=os.path.dirname(self.lib.stalloc_path))
        self.assertEqual(calls[1][1], os.path.join(
            os.path.dirname(self.lib.stalloc_path), "libstalloc-torch.so"))

    def test_bad_arguments(self):
        torch, calls = fake_torch("2.3.0")
        self.with_torch(torch)
        for kwargs in ({"mode": "fast"}, {"backend": "tpu"},
                       {"auto_iters": 0}, {"auto_iters": "3"},
                       {"log": "loud"}, {"mode": "plan"}):
            with self.assertRaises(ValueError, msg=str(kwargs)):
                stalloc.enable(**kwargs)
        self.assertEqual(calls, [])
        self.assertEqual(self.settings(), {})

    def test_plan_from_environment(self):
        torch, calls = fake_torch("2.3.0")
        self.with_torch(torch)
        os.environ["STALLOC_PLAN"] = "/plans/a.plan"
        stalloc.enable(mode="plan")
        self.assertEqual(calls[1][4], {"STALLOC_MODE": "plan",
                                       "STALLOC_PLAN": "/plans/a.plan"})

    def test_torch_versions(self):
        parse = stalloc._torch_version
        self.assertEqual(parse("2.1.0"), (2, 1))
        self.assertEqual(parse("2.10.0+cpu"), (2, 10))
        self.assertEqual(parse("1.13.1"), (1, 13))
        self.assertIsNone(parse("unknown"))

    def test_installed_torch(self):
        """The torch really installed, if any, where it cannot be used."""
        try:
            import torch
        except ImportError:
            with self.assertRaises(stalloc.StallocError):
                stalloc.enable()
            return
        if stalloc._torch_version(str(torch.__version__)) >= (2, 1):
            self.skipTest("torch %s can take the allocator: not installed "
                          "into it by a test" % torch.__version__)
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable()
        self.assertIn("this is torch", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
