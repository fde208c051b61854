# SPDX-License-Identifier: MIT
"""Tests of enable()'s all-or-nothing checks, the step markers and torch's
memory statistics answered by stalloc.

Fake ``torch`` modules (tests/python/test_stalloc.py's fake_torch, plus a
fake optimizer hierarchy) stand in for PyTorch; where Debian's
/usr/bin/python3 can import the real (CPU) torch, the same is checked
against it in a child interpreter: memory statistics on torch.cuda's real
function names, and the markers under LD_PRELOAD=libstalloc-cpu.so.
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

from test_stalloc import (HOST_ENV, MiB, PKG_DIR, ROOT, clean_environ,
                          fake_torch, reset_enabled)

import stalloc  # noqa: E402

TORCH_PY = "/usr/bin/python3"


def torch_python():
    """Debian's interpreter if it can import torch, else None."""
    if not os.path.exists(TORCH_PY):
        return None
    r = subprocess.run([TORCH_PY, "-c", "import torch"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       check=False)
    return TORCH_PY if r.returncode == 0 else None


def fake_optim(torch, register=False):
    """Give @torch an optim package; @register: torch 2's global hook."""
    hooks = []

    class Optimizer:
        def __init__(self, name):
            self.name = name
            self.steps = 0

        def step(self):
            for h in list(hooks):
                h(self, (), {})
            self.steps += 1

    class SGD(Optimizer):
        def step(self):
            super().step()  # a nested step must mark once

    torch.optim = types.ModuleType("torch.optim")
    torch.optim.Optimizer = Optimizer
    torch.optim.SGD = SGD
    torch.optim.optimizer = types.ModuleType("torch.optim.optimizer")
    if register:
        def register_optimizer_step_pre_hook(hook):
            hooks.append(hook)
            return types.SimpleNamespace(remove=lambda: hooks.remove(hook))
        torch.optim.optimizer.register_optimizer_step_pre_hook = \
            register_optimizer_step_pre_hook
    return hooks


def fake_cuda_stats(torch):
    """torch.cuda's memory statistics as a pluggable allocator has them."""
    def refuse(*args, **kwargs):
        raise RuntimeError("CUDAPluggableAllocator does not yet support "
                           "getDeviceStats")
    for name in stalloc._torch._STATS:
        setattr(torch.cuda, name, refuse)
        setattr(torch.cuda.memory, name, refuse)
    torch.cuda.current_device = lambda: 0


class StepMarkersTest(unittest.TestCase):
    """The markers alone, on fake optimizers, with a recording mark."""

    def markers(self, register):
        torch = types.ModuleType("torch")
        hooks = fake_optim(torch, register)
        marks = []
        self.stop_after = None

        def mark():
            if self.stop_after is not None and len(marks) >= self.stop_after:
                return False
            marks.append(1)
            return True
        m = stalloc._torch.StepMarkers(torch, mark)
        return torch, m, marks, hooks

    def check(self, register):
        torch, m, marks, hooks = self.markers(register)
        self.assertEqual(m.how, "register_optimizer_step_pre_hook"
                         if register else "Optimizer.step wrappers")
        opt = torch.optim.SGD("lead")
        opt.step()
        self.assertEqual(marks, [], "nothing before install()")
        m.install()
        for _ in range(3):
            opt.step()
        self.assertEqual(len(marks), 3, "one mark per step, nested once")
        other = torch.optim.Optimizer("second")
        other.step()
        self.assertEqual(len(marks), 3, "only the lead optimizer marks")

        class Later(torch.optim.Optimizer):  # defined after install()
            def step(self):
                super().step()
        del opt
        later = Later("later")
        later.step()  # the lead is gone: the next one to step leads
        other.step()
        self.assertEqual(len(marks), 4)
        self.assertEqual(later.steps, 1)
        self.stop_after = 4  # the user marked: stand down for good
        later.step()
        self.stop_after = None
        later.step()
        self.assertEqual(len(marks), 4)
        return hooks

    def test_global_hook(self):
        hooks = self.check(register=True)
        self.assertEqual(len(hooks), 1)

    def test_wrappers(self):
        hooks = self.check(register=False)
        self.assertEqual(hooks, [])

    def test_no_optim(self):
        m = stalloc._torch.StepMarkers(types.ModuleType("torch"), None)
        self.assertIsNone(m.how)
        m.install()  # nothing to hook, no error


class HostTest(unittest.TestCase):
    """On libstalloc's host backend (no GPU)."""

    def setUp(self):
        self.lib = stalloc.library()
        env = clean_environ(**HOST_ENV)
        env.start()
        self.addCleanup(env.stop)
        old = self.lib.stalloc_set_log_level(0)
        self.addCleanup(self.lib.stalloc_set_log_level, old)
        self.lib.stalloc_shutdown()
        self.addCleanup(self.lib.stalloc_shutdown)
        base = mock.patch.object(stalloc, "_accumulated_base", {})
        base.start()
        self.addCleanup(base.stop)

    def malloc(self, size, device=0):
        ptr = self.lib.stalloc_malloc(size, device, None)
        self.assertTrue(ptr)
        return ptr

    def free(self, ptr, size, device=0):
        self.lib.stalloc_free(ptr, size, device, None)


class MemoryStatsTest(HostTest):

    def test_keys_and_values(self):
        a, b = self.malloc(3 * MiB), self.malloc(MiB)
        self.free(a, 3 * MiB)
        ms = stalloc.memory_stats(0)
        st = stalloc.stats(0)
        self.assertEqual(ms["allocated_bytes.all.current"], MiB)
        self.assertEqual(ms["allocated_bytes.all.peak"], 4 * MiB)
        self.assertEqual(ms["active_bytes.all.current"], MiB)
        self.assertEqual(ms["reserved_bytes.all.current"], st["reserved"])
        self.assertEqual(ms["reserved_bytes.all.peak"], st["reserved_peak"])
        self.assertEqual(ms["allocation.all.allocated"], 2)
        self.assertEqual(ms["allocation.all.freed"], 1)
        self.assertEqual(ms["allocation.all.current"], 1)
        self.assertEqual(ms["num_ooms"], 0)
        self.assertEqual(ms["stalloc.plan_hits"], 0)
        self.assertEqual(ms["stalloc.mapped_bytes.current"], st["mapped"])
        self.assertTrue(all(isinstance(v, int) for v in ms.values()))
        self.assertEqual(ms["allocated_bytes.all.allocated"], 4 * MiB)
        self.assertEqual(ms["allocated_bytes.all.freed"], 3 * MiB)
        self.assertEqual(ms["num_alloc_retries"], 0)
        # no made-up figures
        self.assertNotIn("allocated_bytes.small_pool.current", ms)
        self.free(b, MiB)

    def test_unused_device_is_zero(self):
        ms = stalloc.memory_stats(3)
        self.assertEqual(set(ms.values()), {0})
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.memory_stats(-1)
        self.assertIn("out of range", str(cm.exception))
        stalloc.reset_peak_memory_stats(3)  # nothing to reset: no error

    def test_reset_peak(self):
        big = self.malloc(64 * MiB)
        keep = self.malloc(MiB)
        self.free(big, 64 * MiB)
        stalloc.empty_cache()
        before = stalloc.memory_stats(0)
        self.assertEqual(before["allocated_bytes.all.peak"], 65 * MiB)
        stalloc.reset_peak_memory_stats(0)
        after = stalloc.memory_stats(0)
        self.assertEqual(after["allocated_bytes.all.peak"], MiB)
        self.assertEqual(after["reserved_bytes.all.peak"],
                         after["reserved_bytes.all.current"])
        self.assertLess(after["reserved_bytes.all.peak"],
                        before["reserved_bytes.all.peak"])
        self.assertEqual(after["stalloc.mapped_bytes.peak"],
                         after["stalloc.mapped_bytes.current"])
        self.free(keep, MiB)

    def test_reset_accumulated(self):
        self.free(self.malloc(MiB), MiB)
        stalloc.reset_accumulated_memory_stats(0)
        ms = stalloc.memory_stats(0)
        self.assertEqual(ms["allocation.all.allocated"], 0)
        self.assertEqual(ms["allocation.all.freed"], 0)
        p = self.malloc(MiB)
        ms = stalloc.memory_stats(0)
        self.assertEqual(ms["allocation.all.allocated"], 1)
        self.assertEqual(ms["allocation.all.current"], 1)
        self.free(p, MiB)

    def test_summary(self):
        p = self.malloc(2 * MiB)
        text = stalloc.memory_summary(0)
        self.assertIn("stalloc %s, device 0" % stalloc.version(), text)
        self.assertIn("plan hits", text)
        self.assertRegex(text, r"allocated now / peak +2\.0 MiB / 2\.0 MiB")
        self.assertIn("dynamic", text)
        self.assertIn("reserved now / peak", text)
        self.free(p, 2 * MiB)


class EnableAllOrNothingTest(HostTest):
    """enable(): every check before any change; torch's statistics after."""

    def setUp(self):
        super().setUp()
        reset_enabled(self)

    def with_torch(self, torch):
        patch = mock.patch.dict(sys.modules, {
            "torch": torch, "torch.cuda": torch.cuda,
            "torch.cuda.memory": torch.cuda.memory})
        patch.start()
        self.addCleanup(patch.stop)

    def environ(self):
        return {k: v for k, v in os.environ.items()
                if k.startswith("STALLOC_")}

    def unchanged(self, torch, calls, before):
        self.assertEqual(self.environ(), before)
        self.assertNotIn("CUDAPluggableAllocator", [c[0] for c in calls])
        self.assertIsNone(stalloc._enabled)

    def test_cpu_only_torch(self):
        torch, calls = fake_torch("2.3.0+cpu", cuda=None)
        fake_optim(torch, register=True)
        self.with_torch(torch)
        before = self.environ()
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable(mode="trace", trace="/tmp/x.trace")
        self.assertIn("CPU-only build", str(cm.exception))
        self.assertIn("libstalloc-cpu.so", str(cm.exception))
        self.unchanged(torch, calls, before)

    def test_torch_too_old_checked_first(self):
        torch, calls = fake_torch("2.0.1", cuda=None)
        self.with_torch(torch)
        before = self.environ()
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable(mode="trace")
        self.assertIn("this is torch 2.0.1", str(cm.exception))
        self.unchanged(torch, calls, before)

    def test_second_call(self):
        torch, calls = fake_torch("2.3.0")
        self.with_torch(torch)
        stalloc.enable(mode="off")
        n = len(calls)
        before = self.environ()
        with self.assertRaises(stalloc.StallocError) as cm:
            stalloc.enable(mode="trace")
        self.assertIn("already called", str(cm.exception))
        self.assertEqual(len(calls), n)
        self.assertEqual(self.environ(), before)

    def test_cuda_started(self):
        torch, calls = fake_torch("2.3.0", initialized=True)
        self.with_torch(torch)
        before = self.environ()
        with self.assertRaises(stalloc.StallocError):
            stalloc.enable(mode="trace")
        self.unchanged(torch, calls, before)
        # and a later call, with CUDA not started, may still succeed
        torch2, _ = fake_torch("2.3.0")
        self.with_torch(torch2)
        self.assertIsNotNone(stalloc.enable(mode="off"))

    def test_torch_refuses_environment_restored(self):
        torch, calls = fake_torch("2.3.0")

        def change_current_allocator(alloc):
            raise RuntimeError("Can't swap an already initialized allocator")
        torch.cuda.memory.change_current_allocator = change_current_allocator
        fake_cuda_stats(torch)
        self.with_torch(torch)
        os.environ["STALLOC_MODE"] = "plan"
        os.environ["STALLOC_PLAN"] = "/a.plan"
        with self.assertRaises(RuntimeError):
            stalloc.enable(mode="trace", trace="/t.trace")
        self.assertEqual(self.environ()["STALLOC_MODE"], "plan")
        self.assertNotIn("STALLOC_TRACE", self.environ())
        self.assertIsNone(stalloc._enabled)
        with self.assertRaises(RuntimeError):  # torch's own, untouched
            torch.cuda.memory_allocated()

    def test_missing_shim(self):
        torch, calls = fake_torch("2.3.0")
        self.with_torch(torch)
        with mock.patch.object(stalloc, "torch_shim",
                               side_effect=stalloc.StallocError("no shim")):
            with self.assertRaises(stalloc.StallocError):
                stalloc.enable(mode="trace")
        self.unchanged(torch, calls, self.environ())

    def test_torch_statistics_answered(self):
        torch, calls = fake_torch("2.3.0")
        fake_cuda_stats(torch)
        fake_optim(torch, register=True)
        self.with_torch(torch)
        stalloc.enable(mode="off")
        p = self.malloc(5 * MiB)
        q = self.malloc(MiB)
        self.free(p, 5 * MiB)
        for space in (torch.cuda, torch.cuda.memory):
            self.assertEqual(space.memory_allocated(), MiB)
            self.assertEqual(space.memory_allocated(0), MiB)
            self.assertEqual(space.memory_allocated("cuda:0"), MiB)
            self.assertEqual(space.max_memory_allocated(), 6 * MiB)
            self.assertEqual(space.memory_reserved(),
                             stalloc.stats(0)["reserved"])
            self.assertEqual(space.max_memory_reserved(),
                             stalloc.stats(0)["reserved_peak"])
            self.assertEqual(space.memory_cached(), space.memory_reserved())
            st = space.memory_stats()
            self.assertEqual(st["allocated_bytes.all.current"], MiB)
            nested = space.memory_stats_as_nested_dict()
            self.assertEqual(nested["allocated_bytes"]["all"]["peak"],
                             6 * MiB)
            self.assertIn("plan hits", space.memory_summary())
            self.assertIn("plan hits", space.memory_summary(
                device=0, abbreviated=True))
        torch.cuda.reset_peak_memory_stats()
        self.assertEqual(torch.cuda.max_memory_allocated(), MiB)
        self.free(q, MiB)
        torch.cuda.memory.reset_max_memory_allocated(0)
        self.assertEqual(torch.cuda.max_memory_allocated(), 0)
        torch.cuda.reset_accumulated_memory_stats()
        self.assertEqual(
            torch.cuda.memory_stats()["allocation.all.allocated"], 0)
        with self.assertRaises(ValueError):
            torch.cuda.memory_allocated("cpu")
        with self.assertRaises(ValueError):
            torch.cuda.memory_allocated(types.SimpleNamespace(type="cpu",
                                                              index=None))

    def test_torch_statistics_off(self):
        torch, calls = fake_torch("2.3.0")
        fake_cuda_stats(torch)
        self.with_torch(torch)
        stalloc.enable(mode="off", torch_stats=False)
        with self.assertRaises(RuntimeError):
            torch.cuda.memory_allocated()

    def test_markers_in_the_trace(self):
        """enable()'s step markers reach libstalloc: iterations in a trace;
        an explicit iteration() turns them off."""
        torch, calls = fake_torch("2.3.0")
        fake_optim(torch, register=False)  # the fallback of torch < 2
        self.with_torch(torch)
        with tempfile.TemporaryDirectory() as tmp:
            pattern = os.path.join(tmp, "t-%r.trace")
            stalloc.enable(mode="trace", trace=pattern)
            keep = self.malloc(MiB)  # the device starts, tracing
            opt = torch.optim.SGD("lead")
            for _ in range(3):
                p = self.malloc(2 * MiB)
                opt.step()
                self.free(p, 2 * MiB)
            stalloc.iteration()  # the user marks: ours stand down
            opt.step()
            opt.step()
            self.free(keep, MiB)
            self.lib.stalloc_shutdown()
            with open(os.path.join(tmp, "t-0.trace")) as f:
                marks = [ln.split()[2] for ln in f if ln.startswith("m ")]
        self.assertEqual(marks, ["iteration"] * 4)


class RealTorchTest(unittest.TestCase):
    """Against the PyTorch really installed (Debian's CPU build)."""

    def setUp(self):
        self.py = torch_python()
        if not self.py:
            self.skipTest("%s cannot import torch" % TORCH_PY)
        self.lib = stalloc.library()

    def run_torch(self, code, preload=None, **env):
        full = {k: v for k, v in os.environ.items()
                if not k.startswith("STALLOC_") and k != "LD_PRELOAD"}
        full.update(PYTHONPATH=PKG_DIR, PYTHONDONTWRITEBYTECODE="1", **env)
        if preload:
            full["LD_PRELOAD"] = preload
        return subprocess.run([self.py, "-c", code], env=full,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120)

    def test_statistics_on_torch_names(self):
        """Every torch.cuda memory statistic of this torch, answered."""
        code = r'''
import ctypes, stalloc, torch
st = stalloc._torch.CudaStats(torch, stalloc)
st.install()
missing = [n for n in stalloc._torch._STATS
           if hasattr(torch.cuda, n) and
           "%s.%s" % (torch.cuda.__name__, n) not in st.replaced]
lib = stalloc.library()
p = lib.stalloc_malloc(3 << 20, 0, None)
q = lib.stalloc_malloc(1 << 20, 0, None)
lib.stalloc_free(p, 3 << 20, 0, None)
print("missing", missing)
print("allocated", torch.cuda.memory_allocated(),
      torch.cuda.memory.memory_allocated(torch.device("cuda:0")))
print("peak", torch.cuda.max_memory_allocated())
torch.cuda.reset_peak_memory_stats()
print("after reset", torch.cuda.max_memory_allocated())
print("reserved", torch.cuda.memory_reserved() > 0,
      torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved())
print("stats", torch.cuda.memory_stats()["allocated_bytes.all.current"])
print("summary", "plan hits" in torch.cuda.memory_summary())
'''
        r = self.run_torch(code, STALLOC_LIBRARY=self.lib.stalloc_path,
                           **HOST_ENV)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("missing []", r.stdout)
        self.assertIn("allocated 1048576 1048576", r.stdout)
        self.assertIn("peak 4194304", r.stdout)
        self.assertIn("after reset 1048576", r.stdout)
        self.assertIn("reserved True True", r.stdout)
        self.assertIn("stats 1048576", r.stdout)
        self.assertIn("summary True", r.stdout)

    def test_enable_under_cpu_preload(self):
        """LD_PRELOAD=libstalloc-cpu.so: enable() finds the preloaded
        library, marks each optimizer step (torch 1.13: the wrappers), and
        refuses settings the environment does not have."""
        cpu = os.path.join(os.path.dirname(self.lib.stalloc_path),
                           "libstalloc-cpu.so")
        if not os.path.exists(cpu):
            self.skipTest("no %s" % cpu)
        code = r'''
import stalloc, torch
try:
    stalloc.enable(mode="plan", plan="/x.plan")
except stalloc.StallocError as e:
    print("refused:", e)
print("enable", stalloc.enable())
print("library", stalloc.library().stalloc_path)
torch.manual_seed(0)
m = torch.nn.Linear(64, 64)
opt = torch.optim.Adam(m.parameters())
for i in range(5):
    opt.zero_grad()
    m(torch.randn(32, 64)).sum().backward()
    opt.step()
ms = stalloc.memory_stats()
print("routed", ms["allocation.all.allocated"] > 0)
'''
        with tempfile.TemporaryDirectory() as tmp:
            r = self.run_torch(code, preload=cpu, STALLOC_MODE="trace",
                               STALLOC_TRACE=os.path.join(tmp, "r%r.trace"),
                               RANK="3")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(tmp, "r3.trace")) as f:
                marks = [ln.split()[2] for ln in f if ln.startswith("m ")]
        self.assertIn("refused:", r.stdout)
        self.assertIn("STALLOC_MODE=plan", r.stdout)
        self.assertIn("enable None", r.stdout)
        self.assertIn("library " + os.path.realpath(self.lib.stalloc_path),
                      r.stdout)
        self.assertIn("routed True", r.stdout)
        self.assertEqual(marks, ["iteration"] * 5)

    def test_enable_refused_here(self):
        """Without the preload, this CPU torch 1.13 cannot take the CUDA
        allocator: a clear error, nothing changed."""
        code = r'''
import os, stalloc
before = dict(os.environ)
try:
    stalloc.enable(mode="trace")
except stalloc.StallocError as e:
    print("refused:", e)
print("unchanged", dict(os.environ) == before)
'''
        r = self.run_torch(code, STALLOC_LIBRARY=self.lib.stalloc_path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("refused:", r.stdout)
        self.assertIn("unchanged True", r.stdout)


if __name__ == "__main__":
    unittest.main()
