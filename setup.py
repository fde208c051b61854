# SPDX-License-Identifier: MIT
"""setup.py - the Python package's build step (metadata: pyproject.toml).

build_py runs the Makefile ("make all" in $STALLOC_O, default build/) and
copies into the package: libstalloc as libstalloc.so.MAJOR (the name its
shims link to; they find it beside them through their $ORIGIN run path),
libstalloc-torch.so, libstalloc-cpu.so and libstalloc-lttng.so where built,
stalloc-replay (auto mode replays its plan's trace with it before using the
plan; the library looks for it beside itself) and _version.py.  The version is the one in include/stalloc/stalloc.h.
setuptools' own scratch files go under build/python/, beside the Makefile's
outputs.  The wheel holds native code, so it is tagged for the platform.
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
SCRATCH = os.path.join("build", "python")
SHIMS = ("libstalloc-torch.so", "libstalloc-cpu.so", "libstalloc-lttng.so")


def header_version():
    with open(os.path.join(ROOT, "include", "stalloc", "stalloc.h")) as f:
        text = f.read()
    parts = []
    for k in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define STALLOC_VERSION_%s (\d+)$" % k, text, re.M)
        if not m:
            sys.exit("setup.py: include/stalloc/stalloc.h has no "
                     "STALLOC_VERSION_%s" % k)
        parts.append(m.group(1))
    return ".".join(parts)


class BuildWithMake(build_py):
    """build_py, then the Makefile's libraries copied into the package."""

    def run(self):
        super().run()
        ver = header_version()
        out = os.environ.get("STALLOC_O", "build")
        jobs = os.environ.get("STALLOC_MAKE_JOBS", "2")
        cmd = ["make", "--no-print-directory", "-j" + jobs, "O=" + out, "all"]
        print("setup.py: " + " ".join(cmd))
        if subprocess.call(cmd, cwd=ROOT) != 0:
            sys.exit("setup.py: %s failed: see the messages above (make "
                     "deps installs what the build needs)" % " ".join(cmd))
        src = os.path.join(ROOT, out)
        dest = os.path.join(self.build_lib, "stalloc")
        lib = os.path.join(src, "libstalloc.so." + ver)
        if not os.path.isfile(lib):
            sys.exit("setup.py: make all left no %s" % lib)
        shutil.copyfile(lib, os.path.join(
            dest, "libstalloc.so." + ver.split(".")[0]))
        for name in SHIMS:
            if os.path.isfile(os.path.join(src, name)):
                shutil.copyfile(os.path.join(src, name),
                                os.path.join(dest, name))
        replay = os.path.join(src, "stalloc-replay")
        if os.path.isfile(replay):
            shutil.copyfile(replay, os.path.join(dest, "stalloc-replay"))
            os.chmod(os.path.join(dest, "stalloc-replay"), 0o755)
        with open(os.path.join(dest, "_version.py"), "w") as f:
            f.write("# written by setup.py from include/stalloc/stalloc.h\n"
                    "version = %r\n" % ver)


class BinaryDistribution(Distribution):
    """The package ships shared libraries: not a pure-Python wheel."""

    def has_ext_modules(self):
        return True


os.makedirs(os.path.join(ROOT, SCRATCH), exist_ok=True)
setup(
    version=header_version(),
    cmdclass={"build_py": BuildWithMake},
    distclass=BinaryDistribution,
    options={"build": {"build_base": SCRATCH},
             "egg_info": {"egg_base": SCRATCH}},
)
