# SPDX-License-Identifier: MIT
"""tests/torch/run_oom.py - out of memory as real PyTorch sees it (TAP)

Loads torch (its libc10 and its Python bindings), then libstalloc-torch.so
on the host backend with a 64 MiB pretend device, and asks the shim for
1 GiB the way PyTorch's pluggable allocator does; what the shim throws goes
through PyTorch's own translation into Python (tests/torch-oom-probe.cc).
Checks: the Python exception is torch's OutOfMemoryError (a RuntimeError),
its message is the shim's report, a second out of memory is the same, and
allocating after it works.  Run with /usr/bin/python3; O is the build
directory.  Skips when that interpreter cannot import torch or its
bindings do not export the translation.
"""
import ctypes
import os
import sys

from tap import done, note, ok

TRANSLATE = ("_ZN5torch29translate_exception_to_pythonERKNSt15__"
             "exception_ptr13exception_ptrE")


def loaded(prefix):
    """Path of the first object mapped here whose name starts @prefix."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(prefix):
                return path
    return None


def main():
    build = os.environ.get("O", "build")
    try:
        import torch
    except ImportError as exc:
        print("1..1\nok 1 # SKIP %s cannot import torch: %s"
              % (sys.executable, exc))
        return 0
    bindings = loaded("libtorch_python.so")
    translate = None
    if bindings:
        translate = getattr(ctypes.CDLL(bindings), TRANSLATE, None)
    if translate is None:
        print("1..1\nok 1 # SKIP torch %s: no %s in %s"
              % (torch.__version__, TRANSLATE, bindings))
        return 0
    oom_type = getattr(torch, "OutOfMemoryError",
                       getattr(torch.cuda, "OutOfMemoryError", None))
    note("torch %s, %s" % (torch.__version__, bindings))
    os.environ.update(STALLOC_BACKEND="host", STALLOC_HOST_MEM="64M",
                      STALLOC_CTL="0", STALLOC_LOG="none")
    shim = ctypes.CDLL(os.path.join(build, "libstalloc-torch.so"))
    probe = ctypes.PyDLL(os.path.join(build, "tests",
                                      "libtorch-oom-probe.so"))
    probe.stalloc_probe_alloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_void_p)]
    malloc = ctypes.cast(shim.stalloc_torch_malloc, ctypes.c_void_p)
    translate = ctypes.cast(translate, ctypes.c_void_p)
    ptr = ctypes.c_void_p()

    def alloc(size):
        return probe.stalloc_probe_alloc(malloc, size, translate,
                                         ctypes.byref(ptr))

    ok(alloc(1 << 20) == 0 and ptr.value, "1 MiB is allocated")
    keep = ptr.value
    for attempt in ("the first", "a second"):
        raised = None
        try:
            alloc(1 << 30)
        except Exception as exc:  # pylint: disable=broad-except
            raised = exc
        ok(oom_type is not None and isinstance(raised, oom_type),
           "%s out of memory raises torch's OutOfMemoryError" % attempt,
           repr(raised))
        msg = str(raised)
        ok(isinstance(raised, RuntimeError) and
           msg.startswith("CUDA out of memory (stalloc). Tried to allocate "
                          "1024.00 MiB") and "reserved" in msg,
           "%s: a RuntimeError with the shim's report" % attempt, msg)
        note("%s: %s" % (type(raised).__name__, msg[:160]))
    ok(alloc(1 << 20) == 0 and ptr.value and ptr.value != keep,
       "allocating after it works")
    return done()


if __name__ == "__main__":
    sys.exit(main())
