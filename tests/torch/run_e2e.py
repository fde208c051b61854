# SPDX-License-Identifier: MIT
"""tests/torch/run_e2e.py - tools/gpu/torch-e2e.py on the CPU, alone and DDP

Runs the end-to-end script the GPU machines run, with --device cpu (CPU
torch, libstalloc through LD_PRELOAD=libstalloc-cpu.so), on the tiny
model, and judges its JSON:

1. one process per config (8 steps): caching (no preload), expandable
   reported as skipped with its reason, stalloc-off, -trace, -plan, -auto
   all finished;
2. --ddp 2 (gloo, 8 steps): the same with two ranks, traces and plans of
   their own (%r);
3. a planned run given a corrupted copy of the plan (--plan-file): the
   script still finishes (the runtime warns and goes on without the
   plan), and the judge of a planned run must reject it -- the check that
   the checks can fail.  The judge is also fed doctored copies of the good
   JSON (a loss one ulp off, a config missing, plan misses) and must reject
   each.

What is judged, per run and per rank:

- losses: as many as steps, and bit-identical to the caching run's (the
  same rank's under DDP).  Tolerance 0, on purpose: on the CPU the
  arithmetic does not depend on the allocator (one intra-op thread,
  deterministic algorithms, the same inputs; stalloc's 512-byte alignment
  is stricter than c10's 64, so no kernel takes another vectorised path),
  and tests/torch/run_test.py has held bit-identity since the preload
  library exists.  Any difference means a tensor's bytes changed under the
  model: memory handed out twice;
- DDP: the ranks had batches of their own (different losses) yet end with
  bit-identical parameters, equal to the caching run's;
- stalloc's figures: every routed request reached stalloc (its allocs
  equal the preload's routed count, no fallback, no bad free, no out of
  memory); 0 < peak allocated <= peak reserved <= 2 x peak allocated (the
  host backend maps 2 MiB chunks: runaway growth, such as memory never
  reused, would be many times the peak); the peak allocated equals the
  peak of live bytes the planner computes from the trace (an independent
  count of the same requests) and is the same in every stalloc run;
- plan: at least 90% of the routed requests hit the plan and at most 3
  missed (every request of the steady iterations is planned; what is left
  is the first iteration where it differs, DDP's bucket rebuild: its extra
  requests are the misses, see PLAN_MISS_MAX); the planner found static
  requests; one trace and one plan per rank;
- auto: switched within the run (hits > 0) and no miss -- or, where its
  check (the plan replayed as auto mode uses it, hand-over included) said
  the plan would hold more than off mode, kept off mode: then no more than
  off mode plus a chunk.

Prints TAP; skips when /usr/bin/python3 cannot import torch (the DDP part
when torch.distributed is unavailable).  O: the build directory.
STALLOC_TEST_KEEP=1 keeps the scratch directory.
"""
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from tap import cleanup, done, note, ok

CHUNK = 2 << 20  # libstalloc's default chunk on the host backend

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
E2E = os.path.join(ROOT, "tools", "gpu", "torch-e2e.py")
TORCH_PY = "/usr/bin/python3"
STEPS = 8
STALLOC = ("stalloc-off", "stalloc-trace", "stalloc-plan", "stalloc-auto")
RUNS = ("caching",) + STALLOC
PLAN_HIT_SHARE = 0.9
# Misses a planned run may have: DDP's first step rebuilds its buckets,
# making requests the later steps never make; the plan follows the steps
# that repeat, so each rank counts those as misses once (2 here).  The
# issue's budget for one perturbation is 3.
PLAN_MISS_MAX = 3


def e2e(build, out, args, timeout=400):
    """Run torch-e2e.py --device cpu; returns (exit code, output, JSON or
    None)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STALLOC_") and k != "LD_PRELOAD"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [TORCH_PY, E2E, "--device", "cpu", "--model", "tiny",
           "--build", build, "--out", out, "--timeout", "240"] + args
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=timeout, check=False)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = -1, "%s\n(killed after %d s)" % (exc.stdout, timeout)
    note("%s: %.1f s" % (" ".join(args), time.monotonic() - t0))
    js = None
    for line in text.splitlines():
        if line.startswith("written: "):
            try:
                with open(line[9:]) as f:
                    js = json.load(f)
            except (OSError, ValueError):
                js = None
    return rc, text, js


def table(text):
    """The table torch-e2e.py prints (from its CPU note on), for the log."""
    at = text.find("\nCPU: ")
    return text[at + 1:] if at >= 0 else text


# ------------------------------------------------------------ the judge
# Each judge returns a list of (passed, what, diagnostics).
def judge_figures(name, r):
    """One process's stalloc figures (a run, or a rank of one)."""
    s, pre = r.get("stalloc") or {}, r.get("preload") or {}
    alloc, res = s.get("allocated_peak", 0), s.get("reserved_peak", 0)
    return [(pre.get("routed", 0) > 0 and s.get("allocs") == pre["routed"]
             and pre.get("fallback") == 0 and s.get("bad_frees") == 0
             and s.get("oom") == 0 and not pre.get("disabled"),
             "%s: %d requests routed by the preload, all served by "
             "stalloc, no fallback, no bad free" % (name,
                                                     pre.get("routed", 0)),
             "stalloc %s\npreload %s" % (s, pre)),
            (0 < alloc <= res <= 2 * alloc and
             alloc < pre.get("routed_bytes", 0) and
             r.get("reserved_peak") == res,
             "%s: peak allocated %.1f MiB <= reserved %.1f MiB <= twice "
             "the allocated" % (name, alloc / 2.0 ** 20, res / 2.0 ** 20),
             "stalloc %s\npreload %s" % (s, pre))]


def judge_plan(name, r, planner):
    """A planned run (or a rank of one): hits, at most PLAN_MISS_MAX
    misses."""
    s = r.get("stalloc") or {}
    hits, miss, allocs = (s.get("plan_hits", 0), s.get("plan_misses", -1),
                          s.get("allocs", 0))
    out = [(allocs > 0 and 0 <= miss <= PLAN_MISS_MAX and
            hits >= PLAN_HIT_SHARE * allocs and hits <= allocs,
            "%s: %d of %d requests hit the plan (%.1f%%, at least %d%%), "
            "%d misses (at most %d)" % (name, hits, allocs,
                                        100.0 * hits / max(allocs, 1),
                                        100 * PLAN_HIT_SHARE, miss,
                                        PLAN_MISS_MAX), s)]
    if planner is not None:
        try:
            pj = json.loads(planner)
        except ValueError:
            pj = {}
        out.append((pj.get("static_requests", 0) > 0 and
                    pj.get("trace_peak") == s.get("allocated_peak"),
                    "%s: the planner found %s static requests per iteration; "
                    "its peak of live bytes in the trace equals the run's "
                    "peak allocated (%s)" % (name, pj.get("static_requests"),
                                             pj.get("trace_peak")),
                    planner))
    return out


def judge_auto(name, r, off):
    """Switched to its plan with no miss, or kept off mode because the
    plan's check (replayed as auto mode uses it, hand-over included) said
    it would hold more: then no more than off mode plus a chunk."""
    s = r.get("stalloc") or {}
    o = off.get("stalloc") or {}
    hits = s.get("plan_hits", 0)
    switched = hits > 0 and s.get("plan_misses") == 0
    kept_off = hits == 0 and \
        s.get("reserved_peak", 1 << 62) <= o.get("reserved_peak", 0) + CHUNK
    return [(switched or kept_off,
             "%s: auto mode switched to its plan within the run (%d hits, "
             "%s misses) or, its check against it, held no more than off "
             "mode (%s vs %s bytes)" % (
                 name, hits, s.get("plan_misses"), s.get("reserved_peak"),
                 o.get("reserved_peak")), s)]


def judge(js, world):
    """The whole JSON of a torch-e2e.py --device cpu run."""
    if not js:
        return [(False, "torch-e2e.py wrote its JSON", None)]
    out = []
    res = js.get("results", [])
    by = {r.get("config"): r for r in res}
    out.append(([r.get("config") for r in res] ==
                ["caching", "expandable"] + list(STALLOC),
                "every config ran, in order",
                [r.get("config") for r in res]))
    exp = by.get("expandable", {})
    out.append((bool(exp.get("skipped")) and "CUDA" in exp["skipped"],
                "expandable: skipped, with its reason (%s)"
                % exp.get("skipped"), exp))
    out.append(("LD_PRELOAD" in js.get("note", "") and
                all(("LD_PRELOAD" in r.get("device", "")) ==
                    (r["config"] != "caching") for r in rank_list(by)),
                "the output says the stalloc runs are the host backend "
                "through LD_PRELOAD, the caching run glibc",
                js.get("note")))
    bad = [c for c in RUNS if not by.get(c, {}).get("ok")]
    out.append((not bad, "caching and every stalloc run finished",
                "\n".join("%s: %s" % (c, by.get(c, {}).get("error"))
                          for c in bad)))
    if bad:
        return out
    base = by["caching"]
    peaks = []
    for c in RUNS:
        r = by[c]
        ranks = r["ranks"] if world > 1 else [r]
        bases = base["ranks"] if world > 1 else [base]
        out.append((len(ranks) == world and all(
            len(x["losses"]) == STEPS and
            all(math.isfinite(v) for v in x["losses"]) and
            x["losses"] == b["losses"] and x.get("loss_max_diff") == 0.0
            for x, b in zip(ranks, bases)),
            "%s: %d finite losses%s%s" % (
                c, STEPS, " per rank" if world > 1 else "",
                "" if c == "caching" else
                ", bit-identical to the caching run's"),
            "\n".join("%s rank %s: %s\nbaseline: %s" % (
                c, x.get("rank", 0), x.get("losses"), b.get("losses"))
                for x, b in zip(ranks, bases))))
        if world > 1:
            sums = set(x.get("params_checksum") for x in ranks)
            out.append((r.get("params_agree") is True and len(sums) == 1 and
                        sums == set(x.get("params_checksum")
                                    for x in base["ranks"]) and
                        all(x.get("backend") == "gloo" for x in ranks),
                        "%s: gloo; the %d ranks end with the same parameters "
                        "as each other and as the caching run (%s)"
                        % (c, world, sorted(sums)), r))
        if c == "caching":
            continue
        for x in ranks:
            nm = "%s%s" % (c, "/%d" % x["rank"] if world > 1 else "")
            out += judge_figures(nm, x)
        peaks.append(set(x["stalloc"]["allocated_peak"] for x in ranks))
        if world > 1:
            out.append((r["reserved_peak"] == max(x["reserved_peak"]
                                                  for x in ranks),
                        "%s: the row over the ranks has the largest peak"
                        % c, r))
        if c == "stalloc-plan":
            planner = r.get("planner")
            pl = planner if world > 1 else [planner]
            for x, p in zip(ranks, pl or [None] * world):
                nm = "%s%s" % (c, "/%d" % x["rank"] if world > 1 else "")
                out += judge_plan(nm, x, p)
        if c == "stalloc-auto":
            offs = (by["stalloc-off"]["ranks"] if world > 1 else
                    [by["stalloc-off"]])
            for x, o in zip(ranks, offs):
                out += judge_auto("%s%s" % (c, "/%d" % x["rank"]
                                            if world > 1 else ""), x, o)
    out.append((all(p == peaks[0] for p in peaks),
                "the peak allocated is the same in every stalloc run (%s)"
                % sorted(peaks[0]), peaks))
    return out


def rank_list(by):
    """Every process of the runs that ran: runs, or their ranks."""
    for r in by.values():
        if r.get("skipped") or not r.get("ok"):
            continue
        for x in r.get("ranks", [r]):
            yield dict(x, config=r["config"])


def report(checks, prefix=""):
    for passed, what, diag in checks:
        ok(passed, prefix + what, diag)
    return all(c[0] for c in checks)


def files_per_rank(out, world):
    tag = "tiny-cpu" + ("-ddp%d" % world if world > 1 else "")
    rk = ["-r%d" % r for r in range(world)] if world > 1 else [""]
    want = ["%s%s.%s" % (tag, r, ext) for r in rk for ext in ("trace",
                                                              "plan")]
    have = set(os.listdir(out))
    marks = []
    for r in rk:
        path = os.path.join(out, "%s%s.trace" % (tag, r))
        if os.path.exists(path):
            with open(path) as f:
                marks.append(sum(1 for ln in f if ln.startswith("m ") and
                                 ln.split()[2] == "iteration"))
    return (all(w in have for w in want) and marks == [STEPS] * len(rk),
            "a trace with %d iteration markers and a plan per rank: %s"
            % (STEPS, ", ".join(want)), "have %s\nmarks %s" % (sorted(have),
                                                              marks))


def selftest(js, world):
    """The judge must reject doctored copies of a good JSON."""
    def doctored(edit):
        bad = copy.deepcopy(js)
        edit({r["config"]: r for r in bad["results"]})
        return bad

    def rank0(r):
        return r["ranks"][0] if world > 1 else r

    def ulp(by):
        x = rank0(by["stalloc-plan"])
        x["losses"][-1] = math.nextafter(x["losses"][-1], math.inf)

    def misses(by):
        rank0(by["stalloc-plan"])["stalloc"]["plan_misses"] = \
            PLAN_MISS_MAX + 1

    def gone(by):
        by["stalloc-auto"]["config"] = "stalloc-gone"

    def leak(by):
        s = rank0(by["stalloc-off"])["stalloc"]
        s["reserved_peak"] = 3 * s["allocated_peak"]

    for what, edit in (("a loss one ulp off", ulp),
                       ("plan misses", misses),
                       ("a config missing", gone),
                       ("reserved three times the allocated peak", leak)):
        fails = [c[1] for c in judge(doctored(edit), world) if not c[0]]
        ok(fails, "the judge rejects %s (%s)" % (
            what, "; ".join(fails)[:150] or "nothing rejected"))


def main():
    build = os.path.abspath(os.environ.get("O", "build"))
    probe = subprocess.run(
        [TORCH_PY, "-c", "import torch.distributed as d; "
         "print(int(d.is_available()))"], capture_output=True, text=True,
        check=False) if os.path.exists(TORCH_PY) else None
    if probe is None or probe.returncode != 0:
        print("1..1\nok 1 # SKIP %s cannot import torch" % TORCH_PY)
        return 0
    have_dist = probe.stdout.strip() == "1"
    for f in ("libstalloc-cpu.so", "stalloc-plan"):
        if not os.path.exists(os.path.join(build, f)):
            print("1..1\nnot ok 1 - %s not built" % os.path.join(build, f))
            return 1

    tmp = tempfile.mkdtemp(prefix="stalloc-e2e-")
    try:
        out = os.path.join(tmp, "single")
        rc, text, js = e2e(build, out, ["--steps", str(STEPS)])
        note(table(text))
        ok(rc == 0 and js, "torch-e2e.py --device cpu --model tiny: exit 0, "
           "JSON written", text[-3000:])
        good = report(judge(js, 1))
        ok(*files_per_rank(out, 1))
        if good:
            selftest(js, 1)

        # the check that a broken plan fails: a corrupted copy of the plan
        plan = os.path.join(out, "tiny-cpu.plan")
        if os.path.exists(plan):
            with open(plan, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0x01
            bad = os.path.join(tmp, "corrupt.plan")
            with open(bad, "wb") as f:
                f.write(data)
            rc, text, bjs = e2e(build, os.path.join(tmp, "corrupt"),
                                ["--steps", "4", "--configs", "stalloc-plan",
                                 "--plan-file", bad])
            r = (bjs or {}).get("results", [{}])[0]
            ok(rc == 0 and r.get("ok") and "corrupted" in
               r.get("stderr_tail", ""),
               "a corrupted plan: the run finishes, the runtime warns and "
               "goes on without it",
               text[-2000:] + "\n" + str(r.get("stderr_tail")))
            fails = [c[1] for c in judge_plan("corrupt", r, None)
                     if not c[0]]
            ok(fails, "the judge rejects the planned run of a corrupted "
               "plan (%s)" % "; ".join(fails)[:150], r.get("stalloc"))

        if not have_dist:
            ok(True, "DDP # SKIP torch.distributed is not available")
        else:
            out = os.path.join(tmp, "ddp")
            rc, text, js = e2e(build, out, ["--steps", str(STEPS),
                                            "--ddp", "2"])
            note(table(text))
            ok(rc == 0 and js, "torch-e2e.py --device cpu --ddp 2: exit 0, "
               "JSON written", text[-3000:])
            base = [r for r in (js or {}).get("results", [])
                    if r.get("config") == "caching" and r.get("ok")]
            ok(base and base[0]["ranks"][0]["losses"] !=
               base[0]["ranks"][1]["losses"],
               "DDP: each rank trained on a batch of its own (different "
               "losses)", base)
            good = report(judge(js, 2), "DDP ")
            ok(*files_per_rank(out, 2))
            if good:
                selftest(js, 2)
    finally:
        cleanup(tmp)
    return done()


if __name__ == "__main__":
    sys.exit(main())
