#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make bench-perturb: how many misses one perturbation of a job costs.

A training job strays from its recording now and then: a metric logged
every hundred steps allocates a scalar (an inserted request), a branch not
taken leaves a request out, a variable sequence length resizes one.  The
plan must absorb each at the cost of a few misses (the realize issue asks
for at most 3), never a cascade that loses the rest of the iteration.

For each trace: plan it (stalloc-plan), replay it unchanged under the plan
(stalloc-replay --json), then replay N copies of it, each with one
perturbation at a random point after its third marker -- a request
inserted (allocated and freed at once; 512 B, 4 KiB, 1 MiB or 3 MiB), one
left out (with its free) or one resized (+512 B, 4 KiB or 64 KiB) -- and
count the misses and the hits each cost against the unchanged replay.  A
perturbation is *bad* when it costs more than 3 misses or drops the plan.
Prints per trace and kind: perturbations, bad ones, mean and worst extra
misses.  Deterministic (--seed).  Nothing is asserted: numbers only.

With --keep DIR, every bad perturbed trace is written to DIR (named for
its trace, kind and run) and what was changed is printed, for replaying
it by hand.

Usage: perturb-bench.py [--count N] [--seed S] [--keep DIR] BUILD_DIR TRACE...
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

KINDS = ("insert", "leave-out", "resize")
BAD_MISSES = 3


def replay(build, trace, plan):
    r = subprocess.run([os.path.join(build, "stalloc-replay"), "--json",
                        "--plan", plan, trace], capture_output=True,
                       text=True)
    try:
        return json.loads(r.stdout) if r.returncode in (0, 2) else None
    except ValueError:
        return None


def events(lines):
    return [i for i, ln in enumerate(lines) if ln[:2] in ("a ", "f ", "m ")]


def perturb(lines, kind, rng, start):
    """A copy of @lines with one perturbation after line @start, and what
    was changed, in words."""
    out = list(lines)
    allocs = [i for i in events(out) if i > start and out[i][:2] == "a "]
    if kind == "insert":
        i = rng.choice([i for i in events(out) if i > start])
        size = rng.choice([512, 4096, 1 << 20, 3 << 20])
        ident = 1 + max(int(out[j].split()[2], 0) for j in events(out)
                        if out[j][:2] == "a ")
        out[i:i] = ["a 0 %d %d\n" % (ident, size), "f 0 %d\n" % ident]
        what = "%d B inserted before line %d" % (size, i + 1)
    elif kind == "leave-out":
        i = rng.choice(allocs)
        ident = out[i].split()[2]
        j = next((j for j in range(i + 1, len(out))
                  if out[j][:2] == "f " and out[j].split()[2] == ident),
                 None)
        if j is not None:
            del out[j]
        del out[i]
        what = "line %d left out: %s" % (i + 1, lines[i].strip())
    else:
        i = rng.choice(allocs)
        f = out[i].split()
        f[3] = str(int(f[3]) + rng.choice([512, 4096, 65536]))
        out[i] = " ".join(f) + "\n"
        what = "line %d resized to %s B: %s" % (i + 1, f[3], lines[i].strip())
    seq = 0
    for i in events(out):  # SEQ must increase
        f = out[i].split()
        f[1] = str(seq)
        seq += 1
        out[i] = " ".join(f) + "\n"
    return out, what


def bench(build, trace, count, seed, tmp, keep):
    plan = os.path.join(tmp, "p.plan")
    r = subprocess.run([os.path.join(build, "stalloc-plan"), "-o", plan,
                        trace], capture_output=True, text=True)
    if r.returncode:
        return None, "stalloc-plan: " + r.stderr.strip()[:200]
    base = replay(build, trace, plan)
    if base is None:
        return None, "stalloc-replay failed on the trace itself"
    with open(trace) as f:
        lines = f.readlines()
    marks = [i for i, ln in enumerate(lines) if ln.startswith("m ")]
    if len(marks) < 4:
        return None, "fewer than 4 markers"
    rng = random.Random(seed)
    stats = {k: [] for k in KINDS}
    path = os.path.join(tmp, "perturbed.trace")
    for t in range(count):
        kind = KINDS[t % len(KINDS)]
        out, what = perturb(lines, kind, rng, marks[2])
        with open(path, "w") as f:
            f.writelines(out)
        r = replay(build, path, plan)
        extra = None if r is None else r["plan_misses"] - base["plan_misses"]
        bad = r is None or extra > BAD_MISSES or bool(r.get("plan_dropped"))
        stats[kind].append((extra, bad))
        if bad and keep:
            name = "%s-%s-%d.trace" % (os.path.basename(trace), kind, t)
            shutil.copy(path, os.path.join(keep, name))
            print("  kept %s: %s; %s extra misses" % (name, what, extra))
    return (base, stats), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=60,
                    help="perturbations per trace (default 60)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", metavar="DIR",
                    help="write the bad perturbed traces here")
    ap.add_argument("build")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    print("perturbations: one request inserted, left out or resized per "
          "replay; bad = more than %d extra misses or the plan dropped"
          % BAD_MISSES)
    print("%-28s %-10s %5s %5s %11s %11s" % ("trace", "kind", "runs", "bad",
                                            "mean extra", "worst extra"))
    total = bad_total = 0
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perturb-") as tmp:
        for trace in a.traces:
            name = os.path.basename(trace)
            res, err = bench(a.build, trace, a.count, a.seed, tmp, a.keep)
            if err:
                print("%-28s %s" % (name, err))
                continue
            base, stats = res
            for kind in KINDS:
                runs = stats[kind]
                got = [e for e, _ in runs if e is not None]
                bad = sum(1 for _, b in runs if b)
                total += len(runs)
                bad_total += bad
                print("%-28s %-10s %5d %5d %11.1f %11s" % (
                    name[:28], kind, len(runs), bad,
                    sum(got) / len(got) if got else 0.0,
                    max(got) if got else "-"))
            print("%-28s unperturbed: %d hits, %d misses" % (
                "", base["plan_hits"], base["plan_misses"]))
    print("summary: %d of %d perturbations bad (%.0f%%)"
          % (bad_total, total, 100.0 * bad_total / total if total else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
