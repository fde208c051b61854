# SPDX-License-Identifier: MIT
"""tests/torch/tap.py - TAP for the torch test scripts

run_test.py, run_ddp.py and run_e2e.py print TAP through these: ok() one
test line (with up to 30 lines of diagnostics when it fails), note() a
comment, done() the plan line last, returning the exit status;
cleanup() removes a scratch directory unless STALLOC_TEST_KEEP is set.
"""
import os
import shutil
import sys

_tests = 0
_failed = 0


def ok(cond, what, diag=None):
    """One test: "ok N - WHAT" or "not ok N - WHAT" and the diagnostics."""
    global _tests, _failed
    _tests += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", _tests, what))
    if not cond:
        _failed += 1
        for line in str(diag or "").splitlines()[-30:]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


def note(msg):
    """A comment, one "# " line per line of @msg."""
    for line in msg.splitlines():
        print("# " + line)
    sys.stdout.flush()


def done():
    """The plan line; 1 if a test failed, else 0."""
    print("1..%d" % _tests)
    return 1 if _failed else 0


def cleanup(tmp):
    """Remove the scratch directory @tmp, or say where it was kept."""
    if os.environ.get("STALLOC_TEST_KEEP"):
        note("scratch files kept in " + tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
