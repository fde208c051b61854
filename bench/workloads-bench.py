#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make bench-workloads: plan and replay real and synthetic training traces.

For every shared cpu-torch trace and a set of stalloc-synth configurations
(dense 1F1B, interleaved with 2 virtual stages, selective and full
recomputation, MoE with 8 experts, and a trace of about one million events
for scaling), plan with stalloc-plan --json and replay with stalloc-replay
under three policies: stalloc (with the plan), caching (PyTorch's caching
allocator) and expandable (the same with expandable segments).  Prints one
table: events, lower bound, planned peak and its gap, planning time, the
fragmentation (peak reserved - peak requested) / peak reserved under each
policy, and stalloc's peak reserved as a ratio of the caching allocator's,
the baseline replayed in the same run.  "n/a" where stalloc-replay is not
built.  Asserts nothing.  Usage: workloads-bench.py BUILD_DIR SHARED_DIR
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

# name, stalloc-synth options (all rank 0, the first pipeline stage)
BASE = ["--layers", "24", "--hidden", "2048", "--heads", "16", "--seq",
        "1024", "--stages", "4", "--micro-batches", "8"]
SYNTH = [
    ("synth-dense-1f1b", BASE),
    ("synth-interleaved-v2", BASE + ["--schedule", "interleaved",
                                     "--virtual-stages", "2"]),
    ("synth-selective", BASE + ["--recompute", "selective"]),
    ("synth-full-recompute", BASE + ["--recompute", "full"]),
    ("synth-moe-8x2", BASE + ["--experts", "8", "--top-k", "2"]),
    # scaling: 32 layers on the rank, 170 micro-batches, small tensors
    ("synth-1M-events", ["--layers", "128", "--hidden", "512", "--heads",
                         "8", "--seq", "512", "--stages", "4",
                         "--micro-batches", "170", "--flash-attn"]),
]
POLICIES = ["stalloc", "caching", "expandable"]


def count_events(path):
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += line[:2] in (b"a ", b"f ", b"m ")
    return n


def plan(build, trace, out):
    r = subprocess.run([os.path.join(build, "stalloc-plan"), "--json",
                        "-o", out, trace], capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def replay(tool, policy, trace, plan_file):
    if not tool:
        return None
    cmd = [tool, "--policy", policy, "--json"]
    if policy == "stalloc":
        cmd += ["--plan", plan_file]
    r = subprocess.run(cmd + [trace], capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(f"stalloc-replay --policy {policy} "
                         f"{os.path.basename(trace)}: exit {r.returncode}: "
                         f"{r.stderr.strip()[:200]}\n")
        return None
    return json.loads(r.stdout)


def mib(b):
    return f"{b / 2**20:.1f}"


def main():
    build, shared = sys.argv[1], sys.argv[2]
    tool = os.path.join(build, "stalloc-replay")
    if not os.access(tool, os.X_OK):
        tool = None
    traces = [(os.path.basename(t)[:-6], t) for t in sorted(
        glob.glob(os.path.join(shared, "workloads", "cpu-torch",
                               "*.trace")))]
    print("workloads: planned by stalloc-plan, replayed by stalloc-replay")
    if not tool:
        print(f"  ({build}/stalloc-replay not built: replay columns n/a)")
    hdr = (f"{'workload':<22} {'events':>8} {'LOAD MiB':>9} "
           f"{'peak MiB':>9} {'gap %':>6} {'plan ms':>8} "
           f"{'frag stalloc':>12} {'caching':>8} {'expand':>8} "
           f"{'rsv/cach':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, opts in SYNTH:
            path = os.path.join(tmp, name + ".trace")
            t0 = time.monotonic()
            subprocess.run([os.path.join(build, "stalloc-synth"), "-o",
                            path] + opts, check=True)
            ms = (time.monotonic() - t0) * 1e3
            traces.append((name, path))
            if "1M" in name:
                gen_note = (f"{name}: {count_events(path)} events "
                            f"generated in {ms:.0f} ms, "
                            f"{os.path.getsize(path) / 2**20:.0f} MiB")
        print(hdr)
        for name, path in traces:
            events = count_events(path)
            pfile = os.path.join(tmp, name + ".plan")
            p, err = plan(build, path, pfile)
            if p is None:
                print(f"{name:<22} {events:>8} plan failed: {err}")
                continue
            frag = {}
            rsv = {}
            for pol in POLICIES:
                r = replay(tool, pol, path, pfile)
                frag[pol] = f"{r['fragmentation']:.3f}" if r else "n/a"
                rsv[pol] = r["peak_reserved_bytes"] if r else None
            ratio = (f"{rsv['stalloc'] / rsv['caching']:.3f}"
                     if rsv["stalloc"] and rsv["caching"] else "n/a")
            print(f"{name:<22} {events:>8} {mib(p['lower_bound']):>9} "
                  f"{mib(p['peak']):>9} {100 * p['gap']:>6.3f} "
                  f"{p['plan_ms']:>8.1f} {frag['stalloc']:>12} "
                  f"{frag['caching']:>8} {frag['expandable']:>8} "
                  f"{ratio:>8}")
        print(gen_note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
