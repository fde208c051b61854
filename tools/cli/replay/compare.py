#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/cli/replay/compare.py - one table: traces x replay policies

    compare.py [--ratio] BUILD_DIR TRACE...

Replays every TRACE under every policy of BUILD_DIR/stalloc-replay
(stalloc with BUILD_DIR/NAME.plan when it exists, else planned in-process;
stalloc again with STALLOC_CACHE_LIMIT=16M; off; caching; expandable) and
prints peak requested, peak reserved, fragmentation, utilisation and plan
hits/misses.  --ratio adds, per trace, stalloc's fragmentation against the
caching model's (make bench).  Used by make demo and make bench-replay.
Exit: 1 if any replay fails (its message is shown).
"""
import json
import os
import subprocess
import sys

POLICIES = [("stalloc", []), ("stalloc/limit", ["--cache-limit", "16M"]),
            ("off", []), ("caching", []), ("expandable", [])]


def replay(build, trace, policy, extra):
    cmd = [os.path.join(build, "stalloc-replay"), "--json",
           "--policy", policy.split("/")[0]] + extra
    plan = os.path.join(build, os.path.basename(trace)[:-6] + ".plan")
    if policy.startswith("stalloc") and os.path.exists(plan):
        cmd += ["--plan", plan]
    p = subprocess.run(cmd + [trace], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit("compare: %s failed (exit %d)" %
                         (" ".join(cmd + [trace]), p.returncode))
    return json.loads(p.stdout)


def mib(b):
    return "%.1f MiB" % (b / 1048576.0)


def main(argv):
    ratio = "--ratio" in argv
    args = [a for a in argv if a != "--ratio"]
    if len(args) < 2:
        raise SystemExit(__doc__)
    build, traces = args[0], args[1:]
    hdr = ("%-10s %-14s %14s %14s %8s %8s %7s %7s %8s" %
           ("trace", "policy", "peak req", "peak reserved", "frag",
            "util", "hits", "misses", "drv calls"))
    print(hdr)
    print("-" * len(hdr))
    notes = []
    for t in traces:
        name = os.path.basename(t)[:-6]
        res = {}
        for pol, extra in POLICIES:
            r = res[pol] = replay(build, t, pol, extra)
            print("%-10s %-14s %14s %14s %8.4f %8.4f %7d %7d %8d" %
                  (name, pol, mib(r["peak_requested_bytes"]),
                   mib(r["peak_reserved_bytes"]), r["fragmentation"],
                   r["utilisation"], r["plan_hits"], r["plan_misses"],
                   r["driver_calls"]))
        if ratio:
            c = res["caching"]["fragmentation"]
            for pol in ("stalloc", "stalloc/limit"):
                s = res[pol]["fragmentation"]
                notes.append("%s: %s fragmentation / caching's = %s "
                             "(reduction %s)" %
                             (name, pol,
                              "%.3f" % (s / c) if c > 0 else "n/a",
                              "%.1f%%" % (100 * (1 - s / c)) if c > 0
                              else "n/a"))
    for n in notes:
        print(n)


if __name__ == "__main__":
    main(sys.argv[1:])
