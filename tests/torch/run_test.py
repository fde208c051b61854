# SPDX-License-Identifier: MIT
"""tests/torch/run_test.py - real PyTorch training on libstalloc-cpu.so (TAP)

The CPU end-to-end test.  For the dense GPT of tests/torch/gpt.py: a
baseline run without the library records the losses; a trace run
(STALLOC_MODE=trace); the planner (stalloc-plan --json); a planned run
(STALLOC_MODE=plan) whose losses must be bit-identical to the baseline's,
whose every steady request hits the plan, whose address log shows no two
live blocks overlapping, and whose peak of mapped bytes stays within 2% of
the trace's lower bound; an auto-mode run that switches to a plan made
in-process and hits it.  The same for the mixture-of-experts variant
(dynamic requests; its hit rate is reported).  Then bad input: plan mode
without a plan, with another model's plan, an unknown mode, and programs
that are not PyTorch: each must warn once, go on without the plan (or pass
through to glibc) and never crash; the no-plan run also forks a child that
writes into stalloc's memory and frees tensors across threads.

Run with /usr/bin/python3 (the interpreter that has torch); O is the build
directory.  Skips (TAP "# SKIP") only when that interpreter cannot import
torch.  Nothing here is timed as a test: wall times are printed as "#"
comments.
"""
import bisect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from tap import cleanup, done, note, ok

HERE = os.path.dirname(os.path.abspath(__file__))
GPT = os.path.join(HERE, "gpt.py")
TORCH_PY = "/usr/bin/python3"
DENSE_ITERS = 12
MOE_ITERS = 8
AUTO_ITERS = 3
# the planned runs give cached dynamic memory back at once and map in small
# chunks, so that the mapped peak can be compared with the lower bound
PEAK_ENV = {"STALLOC_CACHE_LIMIT": "1M", "STALLOC_HOST_GRANULARITY": "64K"}


class Run:
    """One finished process: exit code, output, losses, stats, time."""

    def __init__(self, proc, secs, stats_path):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.secs = secs
        self.losses = [ln.split()[2] for ln in self.out.splitlines()
                       if ln.startswith("loss ")]
        self.stats = None
        if stats_path and os.path.exists(stats_path):
            with open(stats_path) as f:
                self.stats = json.load(f)

    def diag(self):
        return "exit %s\n%s%s\nstats %s" % (self.rc, self.out[-2000:],
                                            self.err[-2000:], self.stats)


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STALLOC_") and k != "LD_PRELOAD"}
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(argv, preload=None, env=None, stats=None, timeout=300):
    e = clean_env()
    if preload:
        e["LD_PRELOAD"] = preload
    if stats:
        e["STALLOC_CPU_STATS"] = stats
    e.update(env or {})
    t0 = time.monotonic()
    # a session of its own, so that a hung run (and any child it forked)
    # can be killed whole and reported as a failure
    proc = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += "\n(killed after %d s)\n" % timeout
    proc.stdout, proc.stderr = out, err
    return Run(proc, time.monotonic() - t0, stats)


def check_addr_log(path):
    """The independent overlap check: returns (allocs, error or None)."""
    starts = []         # sorted start addresses of live blocks
    ends = {}           # start -> end
    allocs = 0
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            w = line.split()
            where = "%s:%d" % (path, lineno)
            if len(w) == 4 and w[0] == "a":
                lo, size = int(w[2], 16), int(w[3])
                hi = lo + size
                if lo % 64:
                    return allocs, "%s: %#x not 64-byte aligned" % (where, lo)
                i = bisect.bisect_right(starts, lo)
                if i and ends[starts[i - 1]] > lo:
                    return allocs, "%s: [%#x, %#x) overlaps live [%#x, %#x)" % (
                        where, lo, hi, starts[i - 1], ends[starts[i - 1]])
                if i < len(starts) and starts[i] < hi:
                    return allocs, "%s: [%#x, %#x) overlaps live [%#x, %#x)" % (
                        where, lo, hi, starts[i], ends[starts[i]])
                starts.insert(i, lo)
                ends[lo] = hi
                allocs += 1
            elif len(w) == 2 and w[0] == "f":
                lo = int(w[1], 16)
                if lo not in ends:
                    return allocs, "%s: free of %#x, not live" % (where, lo)
                del ends[lo]
                del starts[bisect.bisect_left(starts, lo)]
            else:
                return allocs, "%s: bad line %r" % (where, line)
    return allocs, None


def trace_counts(path):
    """Allocations per iteration of a trace (index 0: before the first
    "iteration" marker)."""
    counts = [0]
    with open(path) as f:
        for line in f:
            if line.startswith("a "):
                counts[-1] += 1
            elif line.startswith("m ") and line.split()[2] == "iteration":
                counts.append(0)
    return counts


def warnings_matching(run_, text):
    return sum(1 for ln in run_.err.splitlines() if text in ln)


def model_suite(tmp, lib, plan_tool, name, flags, iters):
    """Baseline, trace, plan, planned run for one model; returns the
    baseline run and the planner's JSON (None if a step failed)."""
    gpt = [TORCH_PY, GPT, "--iters", str(iters)] + flags
    trace = os.path.join(tmp, name + ".trace")
    plan = os.path.join(tmp, name + ".plan")
    addr = os.path.join(tmp, name + ".addr")

    base = run(gpt)
    if not ok(base.rc == 0 and len(base.losses) == iters,
              "%s: baseline run (no library), %d losses" % (name, iters),
              base.diag()):
        return None, None
    tr = run(gpt, lib, {"STALLOC_MODE": "trace", "STALLOC_TRACE": trace},
             os.path.join(tmp, name + "-trace.json"))
    ok(tr.rc == 0 and tr.losses == base.losses and os.path.exists(trace)
       and tr.stats and tr.stats["routed"] > 0,
       "%s: trace run: same losses, tensors routed to stalloc, trace written"
       % name, tr.diag())
    p = subprocess.run([plan_tool, "--json", "-o", plan, trace],
                       capture_output=True, text=True, check=False)
    if not ok(p.returncode == 0, "%s: stalloc-plan plans the trace" % name,
              p.stdout + p.stderr):
        return base, None
    js = json.loads(p.stdout)
    if js.get("check") == "reject":
        # its fallback did better on the trace (planner.rst, step 5): the
        # runtime would not use it; the planned path is tested unchecked
        note("%s: the check rejects the plan (planned %d, off %d, fallback "
             "%d): planned again with --no-check" % (
                 name, js["check_planned"], js["check_off"],
                 js["check_fallback"]))
        p = subprocess.run([plan_tool, "--json", "--no-check", "-o", plan,
                            trace], capture_output=True, text=True,
                           check=False)
        if not ok(p.returncode == 0, "%s: stalloc-plan --no-check" % name,
                  p.stdout + p.stderr):
            return base, None
        js = json.loads(p.stdout)
    note("%s: %d requests, %d iterations, lower bound %d, plan %d, "
         "%d dynamic per iteration, planned in %.1f ms" % (
             name, js["requests"], js["iterations"], js["lower_bound"],
             js["peak"], js["dynamic_requests"], js["plan_ms"]))

    env = {"STALLOC_MODE": "plan", "STALLOC_PLAN": plan,
           "STALLOC_CPU_ADDR_LOG": addr}
    env.update(PEAK_ENV)
    pl = run(gpt, lib, env, os.path.join(tmp, name + "-plan.json"))
    ok(pl.rc == 0 and pl.losses == base.losses,
       "%s: planned run: losses bit-identical to the baseline" % name,
       pl.diag() + "\nbaseline %s\nplanned  %s" % (base.losses, pl.losses))
    st = pl.stats or {}
    ok(st.get("plan_misses") == 0 and st.get("bad_frees") == 0
       and st.get("fallback") == 0,
       "%s: planned run: no plan miss, no bad free, no fallback" % name, st)
    allocs, err = check_addr_log(addr) if os.path.exists(addr) else (
        0, "no address log")
    ok(err is None and allocs == st.get("routed") and allocs > 0,
       "%s: address log: %d blocks, no two live ones overlap, all 64-byte "
       "aligned" % (name, allocs), err)

    # independent count: persistent requests plus every allocation of the
    # steady iterations (all but the prologue and the first iteration),
    # plus those of the warm-up iteration (the first) matched to their
    # steady slots: at most all of the prologue's and the first's
    counts = trace_counts(trace)
    steady = sum(counts[2:])
    warm = counts[0] + counts[1]
    dyn = js["dynamic_requests"] * js["steady_iterations"]
    if js["dynamic_requests"] == 0:
        hits = st.get("plan_hits", 0)
        ok(js["persistent_requests"] + steady <= hits <= warm + steady,
           "%s: every steady request hits the plan (%s hits = %d persistent "
           "+ %d steady + %d of the warm-up's)" % (
               name, hits, js["persistent_requests"], steady,
               hits - js["persistent_requests"] - steady), st)
        peak, lb = st.get("mapped_peak", 0), js["lower_bound"]
        ok(lb > 0 and lb <= peak <= lb * 1.02,
           "%s: peak mapped %d within 2%% of the lower bound %d (+%.2f%%)" %
           (name, peak, lb, 100.0 * (peak - lb) / max(lb, 1)), st)
    else:
        hits = st.get("plan_hits", 0)
        want = js["persistent_requests"] + steady - dyn
        ok(want <= hits <= want + counts[1],
           "%s: every steady static request hits the plan (%d = %d "
           "persistent + %d steady - %d dynamic + %d of the warm-up's)" % (
               name, hits, js["persistent_requests"], steady, dyn,
               hits - want), st)
        note("%s: %.1f%% of the steady requests' count hit (%d of %d, the "
             "warm-up's hits included; the rest are dynamic), %.1f%% of all "
             "%d routed; peak mapped %d, "
             "lower bound %d (+%.1f%%)" % (
                 name, 100.0 * (hits - js["persistent_requests"]) /
                 max(steady, 1), hits - js["persistent_requests"], steady,
                 100.0 * hits / max(st.get("routed", 1), 1),
                 st.get("routed", 0), st.get("mapped_peak", 0),
                 js["lower_bound"],
                 100.0 * (st.get("mapped_peak", 0) - js["lower_bound"]) /
                 js["lower_bound"]))
    note("%s: wall time baseline %.1f s, trace %.1f s, planned %.1f s "
         "(planned/baseline %.2f)" % (name, base.secs, tr.secs, pl.secs,
                                      pl.secs / base.secs))
    return base, js


def checker_selftest(tmp):
    """The overlap checker must be able to fail."""
    bad = os.path.join(tmp, "overlap.addr")
    with open(bad, "w") as f:
        f.write("a 0 0x1000 4096\na 1 0x1800 64\n")
    good = os.path.join(tmp, "good.addr")
    with open(good, "w") as f:
        f.write("a 0 0x1000 4096\nf 0x1000\na 1 0x1800 64\n")
    ok(check_addr_log(bad)[1] is not None and
       check_addr_log(good)[1] is None,
       "the overlap checker rejects an overlapping log, accepts a good one")


def bad_input(tmp, lib, dense_base, moe_plan):
    gpt = [TORCH_PY, GPT, "--iters", "4"]
    want = dense_base.losses[:4]

    # two intra-op threads here, compared with a baseline of two threads
    # (the sums are split differently than with one)
    base2 = run(gpt + ["--threads", "2"])
    r = run(gpt + ["--threads", "2", "--fork", "--thread-check"], lib,
            {"STALLOC_MODE": "plan",
             "STALLOC_PLAN": os.path.join(tmp, "none.plan")},
            os.path.join(tmp, "noplan.json"))
    ok(r.rc == 0 and len(r.losses) == 4 and r.losses == base2.losses,
       "plan mode without a plan, two threads: same losses as a baseline "
       "with two threads", r.diag() + "\nbaseline %s" % base2.diag())
    ok(warnings_matching(r, "without a plan") == 1,
       "plan mode without a plan: one warning", r.diag())
    ok(r.stats and r.stats["routed"] > 0 and r.stats["plan_hits"] == 0,
       "plan mode without a plan: off mode (routed, no plan hit)", r.diag())
    ok(r.rc == 0 and "parent parameters unchanged" in r.out and
       "threads: ok" in r.out,
       "fork: the child's writes stay in the child; frees across threads",
       r.diag())

    r = run(gpt, lib, {"STALLOC_MODE": "plan", "STALLOC_PLAN": moe_plan},
            os.path.join(tmp, "wrong.json"))
    ok(r.rc == 0 and r.losses == want and
       warnings_matching(r, "does not fit") == 1,
       "plan made for another model: one warning, same losses", r.diag())

    r = run(gpt[:3] + ["2"], lib, {"STALLOC_MODE": "bogus"},
            os.path.join(tmp, "bogus.json"))
    ok(r.rc == 0 and r.losses == want[:2] and
       warnings_matching(r, "cannot start") == 1 and r.stats and
       r.stats["routed"] == 0,
       "STALLOC_MODE=bogus: one warning, everything to glibc", r.diag())

    # a directory nothing else writes to while the test runs
    here = os.path.dirname(os.path.abspath(__file__))
    ls = run(["/bin/ls", "-l", here])
    r = run(["/bin/ls", "-l", here], lib, {"STALLOC_MODE": "plan"})
    ok(r.rc == 0 and r.out == ls.out and
       warnings_matching(r, "never loaded") == 1,
       "/bin/ls under the library: same output, one warning", r.diag())
    r = run([TORCH_PY, "-c", "print(1)"], lib, {"STALLOC_MODE": "plan"})
    ok(r.rc == 0 and r.out == "1\n" and
       warnings_matching(r, "never loaded") == 1,
       "python3 -c 'print(1)' under the library: one warning", r.diag())


def main():
    build = os.path.abspath(os.environ.get("O", "build"))
    lib = os.path.join(build, "libstalloc-cpu.so")
    plan_tool = os.path.join(build, "stalloc-plan")

    probe = subprocess.run([TORCH_PY, "-c", "import torch"],
                           capture_output=True, text=True, check=False) \
        if os.path.exists(TORCH_PY) else None
    if probe is None or probe.returncode != 0:
        print("1..1")
        print("ok 1 # SKIP %s cannot import torch" % TORCH_PY)
        return 0
    for f in (lib, plan_tool):
        if not os.path.exists(f):
            print("1..1\nnot ok 1 - %s not built" % f)
            return 1

    tmp = tempfile.mkdtemp(prefix="stalloc-torch-")
    try:
        checker_selftest(tmp)
        dense, _ = model_suite(tmp, lib, plan_tool, "dense", [], DENSE_ITERS)
        moe, moe_js = model_suite(tmp, lib, plan_tool, "moe", ["--moe"],
                                  MOE_ITERS)
        if moe_js:
            ok(moe_js["dynamic_requests"] > 0,
               "moe: the planner finds dynamic requests (%d per iteration)"
               % moe_js["dynamic_requests"])
        if dense:
            # the switch itself: unchecked (its check, replaying the plan
            # as auto mode uses it, keeps this small job in off mode --
            # tests/torch/run_ddp.py covers the checked way)
            r = run([TORCH_PY, GPT, "--iters", str(DENSE_ITERS)], lib,
                    {"STALLOC_MODE": "auto",
                     "STALLOC_AUTO_ITERS": str(AUTO_ITERS),
                     "STALLOC_AUTO_CHECK": "0",
                     "STALLOC_TRACE": os.path.join(tmp, "auto-%p.trace")},
                    os.path.join(tmp, "auto.json"))
            counts = trace_counts(os.path.join(tmp, "dense.trace"))
            per_iter = counts[-1]
            st = r.stats or {}
            hits = st.get("plan_hits", 0)
            ok(r.rc == 0 and r.losses == dense.losses and per_iter > 0 and
               st.get("plan_misses") == 0 and hits % per_iter == 0 and
               hits >= per_iter * (DENSE_ITERS - AUTO_ITERS - 3),
               "auto mode: same losses, switched within the run, then every "
               "request hit (%d hits = %d iterations of %d)" % (
                   hits, hits // max(per_iter, 1), per_iter),
               r.diag() + str(st))
            note("auto: wall time %.1f s" % r.secs)
        if dense and moe:
            bad_input(tmp, lib, dense, os.path.join(tmp, "moe.plan"))
    finally:
        cleanup(tmp)
    return done()


if __name__ == "__main__":
    sys.exit(main())
