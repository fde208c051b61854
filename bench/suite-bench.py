#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make bench-suite: judge every allocation policy on one workload suite.

Workloads: the shared cpu-torch traces; sweeps of stalloc-synth (dense 1F1B
and interleaved, recompute none / selective / full, TP with sequence
parallelism, 1, 2 and 4 pipeline stages, scales from about 100 MiB to about
55 GiB, MoE with routing imbalance 0, 0.5, 1, 2 and 4 and several seeds,
single-step runs); the real GPU recordings of SHARED/workloads/real-gpu,
imported by BUILD/stalloc-import when it is built (skipped with a note
otherwise); and stalloc's own traces of real training runs on an H100
(bench/results/*-h100*/MODEL.trace.gz, the trace run of
tools/gpu/torch-e2e.py: 30 iterations each), "h100-MMDD-MODEL".

Plans are not oracles.  Where the job varies, the plan is made from one
recording and another is replayed: MoE from routing seed 1, replayed with
seed 2, 3, ...; a recorded run (cpu-torch, real GPU) from its first
iterations ("prefix K/N": the first K of its N iterations), replayed whole.
A deterministic synthetic run is planned from its own trace ("self"); so is a
recording of one step, for want of another ("self, oracle" wherever the plan
finds one iteration in its own trace: plan mode should equal off there, and a
figure below off is the oracle's, not the runtime's).  "nomark-" workloads
are replayed and planned without their iteration markers: the period finder
has to find the iterations.

For each workload: peak requested; peak reserved under stalloc (the plan),
off (libstalloc without a plan), caching and expandable (models of PyTorch's
caching allocator without and with expandable segments); the overhead
reserved / requested - 1 of each; stalloc's plan hits and misses; driver
calls in one steady iteration (the next-to-last one, measured as the
difference of two replays cut at iteration markers; needs 3 markers; auto
mode's too, on recordings long enough to have steady iterations after its
switch); the planning time.  Then a summary: the workloads where stalloc loses to an
online policy (its peak reserved above min(off, caching, expandable) + one
chunk), the geometric mean of each policy's overhead (of reserved /
requested, minus 1), the worst workloads, and the runs without repetition
(no steady plan: plan mode should be exactly off there).  JSON of all of it
in --json FILE.  Numbers only: asserts nothing; exit 1 only if a tool fails.

With --random N (and --random-seed S), the suite is replaced by N
stalloc-synth workloads drawn at random from wider ranges (random_sweep()):
a held-out set for the claims above, since nothing was tuned on a seed no
one has looked at.

Usage: suite-bench.py [--size default|full] [--jobs N] [--json FILE]
                      [--granularity BYTES] [--only REGEX]
                      [--random N [--random-seed S]] BUILD_DIR SHARED_DIR
"""
import argparse
import glob
import gzip
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

POLICIES = ["stalloc", "off", "caching", "expandable"]
ONLINE = ["off", "caching", "expandable"]
CHUNK = 2 << 20  # libstalloc's default chunk on the host backend

# model sizes, the stalloc-synth options that set them (rank 0)
SCALES = {
    "xs": ["--layers", "4", "--hidden", "256", "--heads", "4", "--seq",
           "512", "--vocab", "8000", "--micro-batches", "4"],
    "s": ["--layers", "8", "--hidden", "1024", "--heads", "16", "--seq",
          "1024", "--micro-batches", "8"],
    "m": ["--layers", "24", "--hidden", "2048", "--heads", "16", "--seq",
          "2048", "--micro-batches", "8"],
    "l": ["--layers", "48", "--hidden", "8192", "--heads", "64", "--seq",
          "4096", "--micro-batches", "16", "--flash-attn"],
}
# the stages a scale runs with unless a sweep sets them
SCALE_STAGES = {"xs": "2", "s": "4", "m": "4", "l": "4"}
SCALE_TP = {"xs": None, "s": None, "m": None, "l": ("4", True)}


class ToolError(Exception):
    pass


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        err = (r.stderr.strip() or r.stdout.strip())[:300]
        raise ToolError(f"{what}: {os.path.basename(cmd[0])} exit "
                        f"{r.returncode}: {err}")
    return r.stdout


def synth_opts(scale, schedule="1f1b", recompute="none", tp=None,
               stages=None):
    o = list(SCALES[scale])
    o += ["--stages", stages or SCALE_STAGES[scale]]
    if schedule == "interleaved":
        o += ["--schedule", "interleaved", "--virtual-stages", "2"]
    if recompute != "none":
        o += ["--recompute", recompute]
    tp = tp or SCALE_TP[scale]
    if tp:
        o += ["--tp", tp[0]]
        if tp[1]:
            o += ["--sequence-parallel"]
    return o


def dense_name(scale, schedule, recompute, tp, stages):
    tpn = f"tp{tp[0]}{'sp' if tp[1] else ''}" if tp else "tp1"
    sched = "1f1b" if schedule == "1f1b" else "il2"
    return f"dense-{scale}-{sched}-{recompute}-{tpn}-pp{stages}"


def dense_sweep(size):
    out = []
    seen = set()

    def add(scale, schedule="1f1b", recompute="none", tp=None, stages=None):
        stages = stages or SCALE_STAGES[scale]
        if schedule == "interleaved" and stages == "1":
            return  # interleaving needs a pipeline
        tp = tp or SCALE_TP[scale]
        name = dense_name(scale, schedule, recompute, tp, stages)
        if name in seen:
            return
        seen.add(name)
        out.append({"name": name, "kind": "synth",
                    "opts": synth_opts(scale, schedule, recompute, tp,
                                       stages)})

    # every combination at the small scale (full: the medium one too)
    for scale in (["s", "m"] if size == "full" else ["s"]):
        for sched in ["1f1b", "interleaved"]:
            for rc in ["none", "selective", "full"]:
                for tp in [None, ("2", True)]:
                    for st in ["1", "2", "4"]:
                        add(scale, sched, rc, tp, st)
    # each scale, plain and with everything on
    for scale in ["xs", "s", "m", "l"]:
        add(scale)
        add(scale, "interleaved", "selective",
            SCALE_TP[scale] or ("2", True))
        if size == "full":
            add(scale, recompute="full")
    return out


def moe_sweep(size):
    out = []
    seeds = [2, 3, 4, 5, 6, 7] if size == "full" else [2, 3, 4]
    for imb in ["0", "0.5", "1", "2", "4"]:
        for seed in seeds:
            out.append({"name": f"moe-s-e8-imb{imb}-seed{seed}",
                        "kind": "synth",
                        "opts": synth_opts("s") + ["--experts", "8",
                                                   "--top-k", "2",
                                                   "--imbalance", imb],
                        "seed": seed, "plan_seed": 1})
    # plans from other recordings too: the rules of the matcher must not
    # fit the seed-1 plan alone
    for imb in ["2", "4"]:
        for plan_seed, seed in [(3, 6), (7, 8)]:
            out.append({"name": f"moe-s-e8-imb{imb}-plan{plan_seed}-"
                                f"seed{seed}",
                        "kind": "synth",
                        "opts": synth_opts("s") + ["--experts", "8",
                                                   "--top-k", "2",
                                                   "--imbalance", imb],
                        "seed": seed, "plan_seed": plan_seed})
    # other structures around the expert runs, each planned from one seed
    # and run with another: the rules were worked out on the rows above
    s = synth_opts("s")
    moe4 = ["--top-k", "2", "--imbalance", "4"]
    for name, opts, plan_seed, seed in [
            ("moe-s-e8-imb4-selective", s + ["--experts", "8",
                                             "--recompute", "selective"]
             + moe4, 9, 3),
            ("moe-s-e8-imb4-pp2", synth_opts("s", stages="2") +
             ["--experts", "8"] + moe4, 1, 12),
            ("moe-s-e16-imb4", s + ["--experts", "16"] + moe4, 2, 9),
            ("moe-s-e8-top1-imb4", s + ["--experts", "8", "--top-k", "1",
                                        "--imbalance", "4"], 3, 10),
            ("moe-s-e8-imb4-il2", synth_opts("s", "interleaved") +
             ["--experts", "8"] + moe4, 2, 7)]:
        out.append({"name": name, "kind": "synth", "opts": opts,
                    "seed": seed, "plan_seed": plan_seed})
    if size == "full":
        # more seeds and skews than the rules were worked out on
        for imb in ["3", "4", "6"]:
            for plan_seed in [5, 11]:
                out.append({"name": f"moe-s-e8-imb{imb}-plan{plan_seed}-"
                                    f"seed{plan_seed + 4}",
                            "kind": "synth",
                            "opts": s + ["--experts", "8", "--top-k", "2",
                                         "--imbalance", imb],
                            "seed": plan_seed + 4, "plan_seed": plan_seed})
        out.append({"name": "moe-s-e16-imb2", "kind": "synth",
                    "opts": s + ["--experts", "16", "--top-k", "2",
                                 "--imbalance", "2"],
                    "seed": 5, "plan_seed": 4})
        out.append({"name": "moe-s-e8-top4-imb3", "kind": "synth",
                    "opts": s + ["--experts", "8", "--top-k", "4",
                                 "--imbalance", "3"],
                    "seed": 2, "plan_seed": 6})
    for imb in (["1", "4"] if size != "full" else ["0.5", "1", "2", "4"]):
        out.append({"name": f"moe-m-e8-imb{imb}-seed2", "kind": "synth",
                    "opts": synth_opts("m", tp=("2", True)) +
                    ["--experts", "8", "--top-k", "2", "--imbalance", imb],
                    "seed": 2, "plan_seed": 1})
    return out


def one_step_sweep():
    one = ["--iterations", "1"]
    nomark = [
        # the period finder, not the markers, finds the iterations here
        {"name": "nomark-dense-s-il2-selective-tp2sp-pp4", "kind": "synth",
         "opts": synth_opts("s", "interleaved", "selective", ("2", True)),
         "strip": True},
        {"name": "nomark-dense-s-1f1b-none-tp1-pp1", "kind": "synth",
         "opts": synth_opts("s", stages="1"), "strip": True},
        {"name": "nomark-dense-s-1f1b-none-tp1-pp1-1step", "kind": "synth",
         "opts": synth_opts("s", stages="1") + one, "strip": True},
        {"name": "nomark-dense-s-il2-none-tp1-pp4-1step", "kind": "synth",
         "opts": synth_opts("s", "interleaved") + one, "strip": True},
    ]
    return nomark + [
        {"name": "dense-s-1step", "kind": "synth",
         "opts": synth_opts("s") + one},
        {"name": "dense-m-1step", "kind": "synth",
         "opts": synth_opts("m") + one},
        {"name": "moe-s-imb2-1step", "kind": "synth",
         "opts": synth_opts("s") + ["--experts", "8", "--imbalance", "2"] +
         one},
    ]


def random_sweep(n, seed):
    """@n stalloc-synth workloads drawn with @seed from wider ranges than
    the sweeps above: other model sizes, 1 to 4 pipeline stages (3
    included) and ranks, interleaving, recomputation, TP with and without
    sequence parallelism, flash attention, gradients freed after the step,
    2-sequence micro-batches; half of them MoE (4 to 16 experts, top-1, 2
    or 4, imbalance 0.5 to 4, every layer or every second one), planned
    from one routing seed and replayed with another; half of them (drawn
    apart, so that the rest of each draw is as before) with small tensors
    at their own bytes (--small-tensors: 4-byte scalars, 8 bytes per
    routed token), named "-small".  Nothing was tuned on them: a seed no
    one has looked at is a held-out set."""
    import random
    rng = random.Random(seed)
    small = random.Random(seed * 7919 + 17)
    out = []
    for i in range(n):
        stages = rng.choice([1, 2, 3, 4])
        il = stages > 1 and rng.random() < 0.3
        mb = stages * rng.choice([2, 3, 4]) if il else \
            rng.choice([4, 6, 8, 12])
        v = stages * (2 if il else 1)
        layers = max(v, rng.choice([4, 6, 8, 12]) // v * v)
        o = ["--layers", str(layers),
             "--hidden", str(rng.choice([512, 768, 1024, 1536])),
             "--heads", str(rng.choice([8, 16])),
             "--seq", str(rng.choice([512, 1024, 2048])),
             "--micro-batches", str(mb), "--stages", str(stages),
             "--iterations", str(rng.choice([4, 5, 6]))]
        if il:
            o += ["--schedule", "interleaved", "--virtual-stages", "2"]
        if stages > 1 and rng.random() < 0.3:
            o += ["--rank", str(rng.randrange(stages))]
        rc = rng.choice(["none", "none", "selective", "full"])
        if rc != "none":
            o += ["--recompute", rc]
        if rng.random() < 0.3:
            o += ["--tp", "2"]
            if rng.random() < 0.5:
                o += ["--sequence-parallel"]
        if rng.random() < 0.3:
            o += ["--flash-attn"]
        if rng.random() < 0.2:
            o += ["--grad-free", "step"]
        if rng.random() < 0.2:
            o += ["--micro-batch-size", "2"]
        w = {"kind": "synth", "opts": o}
        if rng.random() < 0.5:
            o += ["--experts", str(rng.choice([4, 8, 16])),
                  "--top-k", str(rng.choice([1, 2, 2, 4])),
                  "--imbalance", str(rng.choice([0.5, 1, 2, 3, 4]))]
            if rng.random() < 0.3:
                o += ["--moe-every", "2"]
            w["plan_seed"] = rng.randrange(1, 50)
            w["seed"] = w["plan_seed"] + rng.randrange(1, 50)
        w["name"] = f"rnd{seed}-{i}-{'moe' if 'seed' in w else 'dense'}"
        if small.random() < 0.5:
            o += ["--small-tensors"]
            w["name"] += "-small"
        out.append(w)
    return out


def iter_marks(path):
    """Line numbers (0-based) of the trace's "iteration" markers."""
    marks = []
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            if line.startswith(b"m "):
                parts = line.split()
                if len(parts) >= 3 and parts[2] == b"iteration":
                    marks.append(i)
    return marks


def cut(path, nlines, out):
    """Write the first @nlines lines of @path to @out."""
    with open(path, "rb") as f, open(out, "wb") as g:
        for i, line in enumerate(f):
            if i >= nlines:
                break
            g.write(line)


# auto mode traces this many iterations, so that a 4-iteration recording
# switches to its plan at the fourth marker (one planned iteration)
AUTO_ITERS = 3


# --stamp: libstalloc's replays check that every allocation keeps its bytes
STAMP = False


def replay(build, policy, trace, plan, gran):
    cmd = [os.path.join(build, "stalloc-replay"), "--policy", policy,
           "--json"]
    if policy == "stalloc":
        cmd += ["--plan", plan]
    if gran and policy in ("stalloc", "off", "auto"):
        cmd += ["--granularity", str(gran)]
    if STAMP and policy in ("stalloc", "off", "auto"):
        cmd += ["--stamp"]  # a lost byte fails the row (exit 1)
    env = dict(os.environ, STALLOC_AUTO_ITERS=str(AUTO_ITERS))
    # exit 2 with a report: the runtime dropped the plan that does not
    # fit and went on in off mode, as it would in a training job
    what = f"replay --policy {policy} {os.path.basename(trace)}"
    r = subprocess.run(cmd + [trace], capture_output=True, text=True,
                       env=env)
    try:
        rep = json.loads(r.stdout) if r.returncode in (0, 2) else None
    except ValueError:
        rep = None
    if rep is None or (r.returncode and not rep.get("plan_dropped")):
        err = (r.stderr.strip() or r.stdout.strip())[:300]
        raise ToolError(f"{what}: stalloc-replay exit {r.returncode}: "
                        f"{err}")
    return rep


def strip_marks(path, out):
    """Copy @path to @out without its markers (the period finder's job)."""
    with open(path, "rb") as f, open(out, "wb") as g:
        for line in f:
            if not line.startswith(b"m "):
                g.write(line)
    return out


def prepare(w, build, tmp):
    """Make the trace to replay and the one to plan from."""
    rtrace, ptrace, src = prepare_marked(w, build, tmp)
    if not w.get("strip"):
        return rtrace, ptrace, src
    base = os.path.join(tmp, w["name"])
    r = strip_marks(rtrace, base + ".nomark")
    p = strip_marks(ptrace, base + ".plan-nomark") if ptrace != rtrace else r
    return r, p, src


def prepare_marked(w, build, tmp):
    """The same, with the markers the recording has."""
    base = os.path.join(tmp, w["name"])
    synth = os.path.join(build, "stalloc-synth")
    if w["kind"] == "synth":
        rtrace = base + ".trace"
        seed = ["--seed", str(w["seed"])] if "seed" in w else []
        run([synth, "-o", rtrace] + w["opts"] + seed, "stalloc-synth")
        if "plan_seed" in w:
            ptrace = base + ".plan-trace"
            run([synth, "-o", ptrace] + w["opts"] +
                ["--seed", str(w["plan_seed"])], "stalloc-synth")
            return rtrace, ptrace, f"seed {w['plan_seed']}->{w['seed']}"
        return rtrace, rtrace, "self"
    if w["kind"] == "import":
        rtrace = base + ".trace"
        run([os.path.join(build, "stalloc-import"), "-q", w["path"], "-o",
             rtrace], "stalloc-import")
    elif w["path"].endswith(".gz"):
        rtrace = base + ".trace"
        with gzip.open(w["path"], "rb") as f, open(rtrace, "wb") as g:
            g.write(f.read())
    else:
        rtrace = w["path"]
    # a recording: plan from its first iterations, replay it whole
    marks = iter_marks(rtrace)
    n = len(marks)
    if n < 4:
        # nothing else to plan from: the plan knows the replayed step
        return rtrace, rtrace, "self" if n > 1 else "self, oracle"
    k = max(3, n // 2)
    ptrace = base + ".plan-trace"
    cut(rtrace, marks[k], ptrace)
    return rtrace, ptrace, f"prefix {k}/{n}"


def steady_calls(build, trace, plan, gran, tmp, name):
    """Driver calls per policy in the next-to-last iteration, or None."""
    marks = iter_marks(trace)
    if len(marks) < 3:
        return None
    a = os.path.join(tmp, name + ".cut-a")
    b = os.path.join(tmp, name + ".cut-b")
    cut(trace, marks[-2], a)
    cut(trace, marks[-1], b)
    calls = {}
    for pol in POLICIES:
        ra = replay(build, pol, a, plan, gran)
        rb = replay(build, pol, b, plan, gran)
        calls[pol] = rb["driver_calls"] - ra["driver_calls"]
    # auto mode switches at marker AUTO_ITERS + 1, and its first planned
    # iteration maps the pool: steady from two iterations after that
    if len(marks) >= AUTO_ITERS + 4:
        ra = replay(build, "auto", a, None, gran)
        rb = replay(build, "auto", b, None, gran)
        calls["auto"] = rb["driver_calls"] - ra["driver_calls"]
    return calls


def measure(w, build, tmp, gran):
    res = {"name": w["name"], "kind": w["kind"]}
    try:
        rtrace, ptrace, src = prepare(w, build, tmp)
        res["plan_from"] = src
        pfile = os.path.join(tmp, w["name"] + ".plan")
        p = json.loads(run([os.path.join(build, "stalloc-plan"), "--json",
                            "-o", pfile, ptrace], "stalloc-plan"))
        if ptrace == rtrace and (p.get("iterations") or 0) < 2:
            # one step planned from itself: the plan knows what it replays
            res["plan_from"] = "self, oracle"
        res["plan"] = {k: p.get(k) for k in (
            "requests", "lower_bound", "peak", "gap", "plan_ms",
            "iterations", "steady_iterations", "iteration_source",
            "period_events", "check", "check_planned", "check_off",
            "check_online", "check_fallback", "check_ms")}
        res["replay"] = {}
        for pol in POLICIES:
            r = replay(build, pol, rtrace, pfile, gran)
            res["replay"][pol] = {k: r[k] for k in (
                "peak_requested_bytes", "peak_reserved_bytes",
                "plan_hits", "plan_misses", "plan_dropped",
                "driver_calls", "driver_allocs", "driver_alloc_bytes",
                "allocs", "replay_ms")}
        if len(iter_marks(rtrace)) > AUTO_ITERS:
            r = replay(build, "auto", rtrace, None, gran)
            res["replay"]["auto"] = {k: r[k] for k in (
                "peak_requested_bytes", "peak_reserved_bytes",
                "plan_hits", "plan_misses", "driver_calls")}
        res["steady_driver_calls"] = steady_calls(build, rtrace, pfile, gran,
                                                  tmp, w["name"])
    except (ToolError, OSError, ValueError, KeyError) as e:
        res["error"] = str(e)
        return res
    rp = res["replay"]
    req = rp["off"]["peak_requested_bytes"]
    res["peak_requested_bytes"] = req
    res["overhead"] = {pol: rp[pol]["peak_reserved_bytes"] / req - 1
                       if req else 0.0 for pol in POLICIES}
    best = min(rp[pol]["peak_reserved_bytes"] for pol in ONLINE)
    res["best_online_bytes"] = best
    res["excess_bytes"] = rp["stalloc"]["peak_reserved_bytes"] - best
    res["loses"] = res["excess_bytes"] > (gran or CHUNK)
    if "auto" in rp:
        res["overhead"]["auto"] = (rp["auto"]["peak_reserved_bytes"] / req -
                                   1 if req else 0.0)
        res["auto_excess_bytes"] = rp["auto"]["peak_reserved_bytes"] - best
        res["auto_loses"] = res["auto_excess_bytes"] > (gran or CHUNK)
    res["no_repetition"] = (p.get("iterations") or 0) < 2
    return res


def workloads(size, build, shared):
    ws = []
    for t in sorted(glob.glob(os.path.join(shared, "workloads", "cpu-torch",
                                           "*.trace"))):
        ws.append({"name": "cpu-" + os.path.basename(t)[:-6],
                   "kind": "file", "path": t})
    notes = []
    real = sorted(glob.glob(os.path.join(shared, "workloads", "real-gpu",
                                         "*")))
    real = [r for r in real if r.endswith((".pickle", ".json.gz",
                                           ".json"))]
    if os.access(os.path.join(build, "stalloc-import"), os.X_OK):
        for r in real:
            name = os.path.basename(r).split(".")[0]
            ws.append({"name": "gpu-" + name, "kind": "import", "path": r})
        for r in real:
            name = os.path.basename(r).split(".")[0]
            ws.append({"name": "nomark-gpu-" + name, "kind": "import",
                       "path": r, "strip": True})
    elif real:
        notes.append(f"{len(real)} real GPU recordings skipped: "
                     f"{build}/stalloc-import is not built")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for t in sorted(glob.glob(os.path.join(here, "bench", "results",
                                           "*-h100*", "*.trace.gz"))):
        base = os.path.basename(t)[:-len(".trace.gz")]
        if "-auto-" in base:
            continue  # what auto mode recorded: its first iterations only
        day = os.path.basename(os.path.dirname(t))[5:10].replace("-", "")
        ws.append({"name": f"h100-{day}-{base}", "kind": "file",
                   "path": t})
    ws += dense_sweep(size) + moe_sweep(size) + one_step_sweep()
    return ws, notes


def pct(x):
    return f"{100 * x:.2f}"


def mib(b):
    return f"{b / 2**20:.0f}"


def row(r):
    if "error" in r:
        return f"{r['name']:<40} error: {r['error']}"
    rp, ov, p = r["replay"], r["overhead"], r["plan"]
    sc = r["steady_driver_calls"]
    calls = (f"{sc['stalloc']}/{sc['off']}" if sc else "n/a")
    it = f"{p['steady_iterations']}/{p['iterations']}"
    hm = (f"{rp['stalloc']['plan_hits']}/{rp['stalloc']['plan_misses']}"
          if not rp["stalloc"]["plan_dropped"] else "dropped")
    verdict = f"LOSS +{mib(r['excess_bytes'])}" if r["loses"] else ""
    return (f"{r['name']:<40} {r['plan_from']:<13} {it:>5} "
            f"{mib(r['peak_requested_bytes']):>7} "
            f"{pct(ov['stalloc']):>7} {pct(ov['off']):>6} "
            f"{pct(ov['caching']):>6} {pct(ov['expandable']):>6} "
            f"{hm:>11} {calls:>9} {p['plan_ms']:>7.0f} {verdict}")


def geomean_overhead(results, pol):
    xs = [1 + r["overhead"][pol] for r in results]
    if not xs:
        return 0.0
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) - 1


def allocs_per_gib(ok, pol):
    n = sum(r["replay"][pol].get("driver_allocs", 0) for r in ok)
    b = sum(r["replay"][pol].get("driver_alloc_bytes", 0) for r in ok)
    return n / (b / (1 << 30)) if b else 0.0


def is_moe(r):
    """MoE rows: moe-*, and every row whose name has the word moe (the
    CPU and H100 recordings, the held-out rnd*-moe)."""
    return "moe" in r["name"].split("-")


def targets(ok, gran):
    """The rows over the planned run's targets: steady dense ones above
    0.25% + 2 chunks, steady MoE ones above 1% + 2 chunks, any that misses
    more than 1% of its planned requests."""
    chunk = gran or CHUNK
    dense = moe = miss = 0
    for r in ok:
        s = r["replay"]["stalloc"]
        req = r["peak_requested_bytes"]
        steady = (r["plan"].get("steady_iterations") or 0) >= 2
        if not steady:
            pass  # no plan to realize: plan mode is off mode
        elif is_moe(r) and s["peak_reserved_bytes"] > req * 1.01 + 2 * chunk:
            moe += 1
        elif (not is_moe(r) and
              s["peak_reserved_bytes"] > req * 1.0025 + 2 * chunk):
            dense += 1
        if s["plan_misses"] > 0.01 * (s["plan_hits"] + s["plan_misses"]):
            miss += 1
    return (f"over the targets: {dense} steady non-MoE rows above 0.25% + "
            f"2 chunks, {moe} steady MoE rows above 1% + 2 chunks, {miss} rows "
            f"missing more than 1% of their planned requests")


def summary(ok, gran):
    lines = []
    losses = [r for r in ok if r["loses"]]
    lines.append(f"summary: {len(ok)} workloads, stalloc loses to an online "
                 f"policy (reserved > min(off, caching, expandable) + "
                 f"{mib(gran or CHUNK)} MiB chunk) on {len(losses)}")
    lines.append("geometric-mean overhead (reserved/requested - 1): " +
                 ", ".join(f"{pol} {pct(geomean_overhead(ok, pol))}%"
                           for pol in POLICIES))
    for label, sel in (("with a steady plan",
                        lambda r: not r["no_repetition"]),
                       ("MoE", is_moe)):
        sub = [r for r in ok if sel(r)]
        if sub:
            lines.append(f"  {label}, {len(sub)} workloads: " +
                         ", ".join(f"{pol} {pct(geomean_overhead(sub, pol))}%"
                                   for pol in POLICIES))
    misses = sum(r["replay"]["stalloc"]["plan_misses"] for r in ok)
    hits = sum(r["replay"]["stalloc"]["plan_hits"] for r in ok)
    lines.append(f"plan hits {hits}, misses {misses} over the suite")
    lines.append(targets(ok, gran))
    lines.append("physical allocations (cudaMalloc, cuMemCreate) per GiB "
                 "they held, over the suite: " +
                 ", ".join(f"{pol} {allocs_per_gib(ok, pol):.1f}"
                           for pol in POLICIES) +
                 f" (one per {mib(gran or CHUNK)} MiB chunk: "
                 f"{(1 << 30) / (gran or CHUNK):.0f})")
    auto = [r for r in ok if "auto" in r["replay"]]
    if auto:
        lost = [r for r in auto if r["auto_loses"]]
        lines.append(
            f"auto mode ({AUTO_ITERS} iterations traced, planned and "
            f"switched at the next marker), {len(auto)} workloads: loses "
            f"to an online policy on {len(lost)}; geometric-mean overhead "
            f"auto {pct(geomean_overhead(auto, 'auto'))}%, off "
            f"{pct(geomean_overhead(auto, 'off'))}%, stalloc "
            f"{pct(geomean_overhead(auto, 'stalloc'))}%")
        steady = [r for r in auto
                  if "auto" in (r.get("steady_driver_calls") or {})]
        if steady:
            lines.append(
                f"  driver calls in a steady iteration after the switch, "
                f"{len(steady)} workloads long enough: " +
                ", ".join(f"{r['name']} "
                          f"{r['steady_driver_calls']['auto']}/"
                          f"{r['steady_driver_calls']['stalloc']}/"
                          f"{r['steady_driver_calls']['off']}"
                          for r in steady) + " (auto/stalloc/off)")
        for r in sorted(lost, key=lambda r: -r["auto_excess_bytes"])[:5]:
            ra = r["replay"]["auto"]
            lines.append(
                f"  {r['name']:<40} auto "
                f"{mib(ra['peak_reserved_bytes']):>6}  off "
                f"{mib(r['replay']['off']['peak_reserved_bytes']):>6}"
                f"  excess {mib(r['auto_excess_bytes']):>5}  hits "
                f"{ra['plan_hits']}")
    worst = sorted(ok, key=lambda r: -r["excess_bytes"])[:8]
    lines.append("worst (stalloc reserved - best online), MiB:")
    for r in worst:
        rp = r["replay"]
        best = min(ONLINE, key=lambda p: rp[p]["peak_reserved_bytes"])
        lines.append(
            f"  {r['name']:<40} req {mib(r['peak_requested_bytes']):>6}"
            f"  stalloc {mib(rp['stalloc']['peak_reserved_bytes']):>6}"
            f"  {best} {mib(rp[best]['peak_reserved_bytes']):>6}"
            f"  excess {mib(r['excess_bytes']):>5}"
            f"  misses {rp['stalloc']['plan_misses']}")
    one = [r for r in ok if r["no_repetition"]]
    lines.append("no repetition (no steady iteration planned; plan mode "
                 "should equal off):")
    for r in one:
        rp = r["replay"]
        s, o = (rp["stalloc"]["peak_reserved_bytes"],
                rp["off"]["peak_reserved_bytes"])
        lines.append(f"  {r['name']:<40} stalloc {mib(s):>6} MiB  off "
                     f"{mib(o):>6} MiB  ({'+' if s >= o else '-'}"
                     f"{mib(abs(s - o))} MiB)  misses "
                     f"{rp['stalloc']['plan_misses']}")
    if not one:
        lines.append("  none")
    return lines


def main():
    ap = argparse.ArgumentParser(description="make bench-suite")
    ap.add_argument("--size", choices=("default", "full"),
                    default="default")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--granularity", type=int, default=0,
                    help="stalloc/off chunk size (default: libstalloc's)")
    ap.add_argument("--only", metavar="REGEX",
                    help="measure only the workloads whose name matches")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="instead of the suite, N stalloc-synth workloads "
                    "drawn at random (held out: see random_sweep())")
    ap.add_argument("--random-seed", type=int, default=1, metavar="S",
                    help="the draw's seed (1)")
    ap.add_argument("--stamp", action="store_true",
                    help="replay libstalloc's policies with --stamp: a "
                    "row whose allocations lose bytes fails")
    ap.add_argument("build")
    ap.add_argument("shared")
    a = ap.parse_args()
    global STAMP
    STAMP = a.stamp
    for tool in ("stalloc-synth", "stalloc-plan", "stalloc-replay"):
        if not os.access(os.path.join(a.build, tool), os.X_OK):
            sys.stderr.write(f"suite-bench: {a.build}/{tool} is not built "
                             "(make all)\n")
            return 1
    if a.random:
        ws, notes = random_sweep(a.random, a.random_seed), []
        a.size = f"random {a.random}, seed {a.random_seed}"
    else:
        ws, notes = workloads(a.size, a.build, a.shared)
    if a.only:
        ws = [w for w in ws if re.search(a.only, w["name"])]
    t0 = time.monotonic()
    print(f"bench-suite ({a.size}): {len(ws)} workloads, {a.jobs} jobs; "
          "overheads in % of peak requested; calls/iter = driver calls "
          "in a steady iteration, stalloc/off")
    for n in notes:
        print("note: " + n)
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
            results = list(ex.map(
                lambda w: measure(w, a.build, tmp, a.granularity), ws))
    print(f"{'workload':<40} {'plan from':<13} {'iters':>5} "
          f"{'req MiB':>7} {'stalloc':>7} {'off':>6} {'cach':>6} "
          f"{'expand':>6} {'hits/miss':>11} {'calls/it':>9} "
          f"{'plan ms':>7}")
    for r in results:
        print(row(r))
    ok = [r for r in results if "error" not in r]
    lines = summary(ok, a.granularity)
    for ln in lines:
        print(ln)
    errs = len(results) - len(ok)
    print(f"{len(ok)} measured, {errs} failed, "
          f"{time.monotonic() - t0:.0f} s")
    if a.json:
        tmpf = a.json + ".tmp"
        with open(tmpf, "w") as f:
            json.dump({"size": a.size, "chunk_bytes": a.granularity or CHUNK,
                       "notes": notes, "workloads": results,
                       "summary": lines}, f, indent=1)
            f.write("\n")
        os.replace(tmpf, a.json)
        print(f"JSON: {a.json}")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
