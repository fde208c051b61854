#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make bench: every shared workload through stalloc-plan, checked.

For each instance: run build/stalloc-plan --json --emit-csv, then verify the
emitted buffers with tests/check-plan.py (no code shared with the planner),
and print instance, buffers, LOAD, peak, gap %, time.  A synthetic trace of about one million events
(bench/gen-trace.py) is timed too, with the planner's peak memory.  Nothing
is asserted but validity: exit 1 if a plan does not verify.

Usage: plan-bench.py BUILD_DIR SHARED_DIR [NAME...]
With NAMEs, only the instances whose file name contains one of them are
run (e.g. "pangu S_1"), and the synthetic trace and timeline are skipped.
"""
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(build, path, tmp, limit):
    csv = os.path.join(tmp, "plan.csv")
    out = subprocess.run([os.path.join(build, "stalloc-plan"), "--json",
                          "--budget", str(limit), "--emit-csv", csv,
                          path], capture_output=True, text=True)
    if out.returncode:
        return None, out.stderr.strip()
    plan = json.loads(out.stdout)
    chk = subprocess.run([sys.executable,
                          os.path.join(HERE, "..", "tests", "check-plan.py"),
                          csv], capture_output=True, text=True)
    verdict = json.loads(chk.stdout) if chk.stdout else {"ok": False}
    ok = (chk.returncode == 0 and verdict.get("ok") and
          verdict.get("peak") == plan["peak"] and
          verdict.get("load") == plan["lower_bound"])
    return plan, ok


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: plan-bench.py BUILD_DIR SHARED_DIR [NAME...]")
    build, shared, only = sys.argv[1], sys.argv[2], sys.argv[3:]
    files = sorted(glob.glob(os.path.join(shared, "workloads", "*", "*.csv")))
    files += sorted(glob.glob(os.path.join(shared, "workloads", "*",
                                           "*.trace")))
    if only:
        files = [f for f in files
                 if any(n in os.path.basename(f) for n in only)]
        if not files:
            sys.exit(f"plan-bench.py: no instance matches {' '.join(only)}")
    bad = 0
    hdr = (f"{'instance':<28} {'buffers':>8} {'LOAD':>14} {'peak':>14} "
           f"{'gap %':>8} {'ms':>8}  check")
    rss = before = 0
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        if not only:
            big = os.path.join(tmp, "synthetic-1M.trace")
            subprocess.run([sys.executable,
                            os.path.join(HERE, "gen-trace.py"), "1000000",
                            big], check=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            plan, ok = run(build, big, tmp, 1)
            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            results.append(("synthetic-1M.trace", plan, ok))
        print("planner: every shared workload, verified independently")
        print(hdr)
        for f in files:
            name = os.path.basename(f)
            # the challenging suite gets 10 s of work, real instances the
            # default (1 s)
            plan, ok = run(build, f, tmp, 10 if "minimalloc" in f else 1)
            results.append((name, plan, ok))
        for name, plan, ok in results:
            if plan is None:
                print(f"{name:<28} failed: {ok}")
                bad += 1
                continue
            bufs = plan["requests"]
            print(f"{name:<28} {bufs:>8} {plan['lower_bound']:>14} "
                  f"{plan['peak']:>14} {100 * plan['gap']:>8.4f} "
                  f"{plan['plan_ms']:>8.1f}  {'ok' if ok else 'INVALID'}")
            bad += not ok
        if not only:
            print(f"synthetic 1M-event trace: planner peak memory "
                  f"{max(rss, before) / 1024:.0f} MiB")
    print(f"{len(results) - bad} of {len(results)} plans verified")
    if only:
        return 1 if bad else 0
    with tempfile.TemporaryDirectory() as tmp:
        tr = os.path.join(tmp, "t.trace")
        svg = os.path.join(tmp, "t.svg")
        subprocess.run([sys.executable, os.path.join(HERE, "gen-trace.py"),
                        "100000", tr], check=True)
        t0 = time.monotonic()
        subprocess.run([os.path.join(build, "stalloc-timeline"), "-o", svg,
                        tr], check=True)
        ms = (time.monotonic() - t0) * 1e3
        print(f"timeline: a 100k-event trace drawn in {ms:.0f} ms, "
              f"{os.path.getsize(svg) / 1024:.0f} KiB of SVG")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
