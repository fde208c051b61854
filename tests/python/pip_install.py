# SPDX-License-Identifier: MIT
"""tests/python/pip_install.py - the Python package installed as users do

Into a fresh virtual environment (python3 -m venv --system-site-packages,
so that Debian's torch, setuptools, wheel and pip stay visible):
``pip install --no-build-isolation --no-index .``, offline, the libraries
of the build directory O (make all ran).  Then, from another directory:
the package loads the libstalloc inside it (not the checkout's), its
version is the header's, torch_shim() is the packaged libstalloc-torch.so,
the statistics work on the host backend, the console entry points
(stalloc-lttng, stalloc-import) are declared and stalloc-lttng runs; with
torch, the packaged libstalloc-cpu.so preloaded and one stalloc.enable()
mark a training's steps into a per-rank trace.  Last, make install puts
the package into PREFIX (PYTHON=this interpreter) and its commands into
PREFIX/bin.

Prints TAP; skips when the interpreter lacks venv, pip, setuptools or
wheel.  Run with Debian's /usr/bin/python3; O: build directory.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
n = 0
failed = 0


def ok(cond, what, diag=""):
    global n, failed
    n += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n, what))
    if not cond:
        failed += 1
        for line in str(diag).splitlines()[-25:]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


def sh(argv, **kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STALLOC_") and k not in
           ("LD_PRELOAD", "PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(kw.pop("env", {}))
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=kw.pop("timeout", 300), **kw)


def header_version():
    with open(os.path.join(ROOT, "include", "stalloc", "stalloc.h")) as f:
        text = f.read()
    return ".".join(re.search(r"#define STALLOC_VERSION_%s (\d+)" % k,
                              text).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))


CHECK = r'''
import ctypes, os, sys
import importlib.metadata as md
import stalloc
pkg = os.path.dirname(stalloc.__file__)
lib = stalloc.library()
print("pkg", pkg)
print("lib", lib.stalloc_path)
print("version", stalloc.__version__, stalloc.version())
print("shim", stalloc.torch_shim())
p = lib.stalloc_malloc(3 << 20, 0, None)
print("allocated", stalloc.memory_stats()["allocated_bytes.all.current"])
lib.stalloc_free(p, 3 << 20, 0, None)
eps = md.entry_points()
eps = eps.select(group="console_scripts") if hasattr(eps, "select") \
    else eps.get("console_scripts", [])
print("entry", sorted("%s=%s" % (e.name, e.value) for e in eps
                      if e.name.startswith("stalloc")))
'''

TRAIN = r'''
import stalloc, torch
stalloc.enable()
print("lib", stalloc.library().stalloc_path)
m = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad()
    m(torch.randn(16, 256)).sum().backward()
    opt.step()
print("done")
'''


def venv_suite(tmp, build):
    venv = os.path.join(tmp, "venv")
    r = sh([sys.executable, "-m", "venv", "--without-pip",
            "--system-site-packages", venv])
    if not ok(r.returncode == 0, "a fresh venv", r.stderr):
        return
    py = os.path.join(venv, "bin", "python")
    r = sh([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
            "--no-deps", "--no-cache-dir", "."], cwd=ROOT,
           env={"STALLOC_O": build})
    if not ok(r.returncode == 0, "pip install --no-build-isolation "
              "--no-index . into it (offline)", r.stdout + r.stderr):
        return
    away = os.path.join(tmp, "elsewhere")
    os.mkdir(away)
    r = sh([py, "-c", CHECK], cwd=away,
           env={"STALLOC_BACKEND": "host", "STALLOC_HOST_MEM": "1G",
                "STALLOC_VA_SIZE": "4G"})
    out = dict((ln.split(" ", 1) + [""])[:2] for ln in r.stdout.splitlines())
    pkg = out.get("pkg", "")
    ok(r.returncode == 0 and pkg.startswith(venv + os.sep),
       "imported from another directory: the venv's package", r.stderr)
    ok(out.get("lib") == os.path.join(pkg, "libstalloc.so." +
                                      header_version().split(".")[0]),
       "library() loads the libstalloc inside the package (%s)"
       % out.get("lib"), r.stdout + r.stderr)
    v = header_version()
    ok(out.get("version") == "%s %s" % (v, v),
       "version %s, the header's, in the package and the library" % v,
       r.stdout)
    ok(out.get("shim") == os.path.join(pkg, "libstalloc-torch.so"),
       "torch_shim(): the packaged libstalloc-torch.so", r.stdout)
    ok(out.get("allocated") == str(3 << 20),
       "memory_stats() from the installed package", r.stdout + r.stderr)
    ok("'stalloc-import=stalloc.importer:main'" in out.get("entry", "") and
       "'stalloc-lttng=stalloc.lttng:main'" in out.get("entry", ""),
       "console entry points stalloc-import and stalloc-lttng declared",
       r.stdout)
    r = sh([os.path.join(venv, "bin", "stalloc-lttng"), "--help"], cwd=away)
    ok(r.returncode == 0 and "stalloc-lttng record" in r.stdout,
       "the stalloc-lttng command runs", r.stdout + r.stderr)
    imp = os.path.join(venv, "bin", "stalloc-import")
    ok(os.access(imp, os.X_OK), "the stalloc-import command is installed")

    cpu = os.path.join(pkg, "libstalloc-cpu.so")
    probe = sh([py, "-c", "import torch"])
    if probe.returncode != 0 or not os.path.exists(cpu):
        print("ok %d # SKIP no torch or no packaged libstalloc-cpu.so"
              % (n + 1))
        globals()["n"] += 1
        return
    r = sh([py, "-c", TRAIN], cwd=away,
           env={"LD_PRELOAD": cpu, "STALLOC_MODE": "trace", "RANK": "1",
                "STALLOC_TRACE": os.path.join(tmp, "t-r%r.trace")})
    marks = 0
    trace = os.path.join(tmp, "t-r1.trace")
    if os.path.exists(trace):
        with open(trace) as f:
            marks = sum(1 for ln in f if ln.startswith("m ") and
                        ln.split()[2] == "iteration")
    ok(r.returncode == 0 and "lib " + os.path.join(pkg, "libstalloc.so.0")
       in r.stdout and marks == 4,
       "packaged libstalloc-cpu.so preloaded + stalloc.enable(): %d steps "
       "marked in the rank's trace" % marks, r.stdout + r.stderr)


def install_suite(tmp, build):
    prefix = os.path.join(tmp, "prefix")
    r = sh(["make", "--no-print-directory", "install", "O=" + build,
            "PREFIX=" + prefix, "PYTHON=" + sys.executable], cwd=ROOT)
    site = [os.path.join(dp, "stalloc") for dp, dn, _ in os.walk(prefix)
            if "stalloc" in dn and dp.endswith("-packages")]
    ok(r.returncode == 0 and len(site) == 1 and
       os.path.exists(os.path.join(prefix, "bin", "stalloc-lttng")) and
       os.path.exists(os.path.join(prefix, "bin", "stalloc-plan")),
       "make install: the library, the tools, the Python package (%s) and "
       "its commands" % (site[0][len(prefix):] if site else None),
       r.stdout + r.stderr)
    if not site:
        return
    r = sh([sys.executable, "-c", "import stalloc; "
            "print(stalloc.library().stalloc_path)"], cwd=tmp,
           env={"PYTHONPATH": os.path.dirname(site[0])})
    ok(r.returncode == 0 and r.stdout.strip().startswith(site[0]),
       "the installed package loads its own libstalloc", r.stdout + r.stderr)


def main():
    build = os.path.abspath(os.environ.get("O", os.path.join(ROOT, "build")))
    probe = sh([sys.executable, "-c",
                "import setuptools, wheel, pip, venv"])
    if probe.returncode != 0:
        print("1..1\nok 1 # SKIP %s lacks setuptools, wheel, pip or venv "
              "(make deps)" % sys.executable)
        return 0
    tmp = tempfile.mkdtemp(prefix="stalloc-pip-")
    try:
        venv_suite(tmp, build)
        install_suite(tmp, build)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
