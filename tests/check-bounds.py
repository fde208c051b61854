#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The planner's bounds against an independent peak-live computation.

Usage: check-bounds.py STALLOC_PLAN TRACE...

Each TRACE is planned (stalloc-plan --json --budget 0.2); from the trace
alone (sharing no code with the planner) this script computes, over the
steady iterations that have a successor (the window from the start of the
second iteration, or the first when there are fewer than three, to the
start of the last; the iteration starts are the plan's "boundaries"):

  all      the most bytes live at once, every request at its size;
  planned  the same without the requests made before the window and freed
           before the last iteration starts (neither planned per
           iteration nor persistent).

and checks: the planner's trace_peak is `all`; its live_peak is `planned`
when the trace has no dynamic request (at most `planned` otherwise: the
dynamic ones are not placed); lower_bound = live_peak + align_bytes +
model_bytes with model_bytes >= 0 (the model's lifetimes contain the real
ones); the pool is at least the lower bound.  Prints TAP and, per trace,
the lower bound's and the pool's excess over the true peak.
"""
import json
import subprocess
import sys


def parse(path):
    """Events (seq, op, id, size) and iteration marker seqs, with errors
    that name the file and line."""
    ev, marks = [], []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            fl = line.split()
            if not fl or fl[0].startswith("#") or fl[0] == "stalloc-trace":
                continue
            try:
                seq = int(fl[1])
                if fl[0] == "a":
                    ev.append((seq, "a", fl[2], int(fl[3])))
                elif fl[0] == "f":
                    ev.append((seq, "f", fl[2], 0))
                elif fl[0] == "m" and fl[2] == "iteration":
                    marks.append(seq)
            except (IndexError, ValueError):
                sys.exit(f"check-bounds.py: {path}:{no}: bad line")
    return ev, marks


def peaks(ev, bounds):
    nr = len(bounds)
    first = 1 if nr >= 3 else nr - 1
    last = nr - 1 if nr - first >= 2 else nr
    lo = bounds[first]
    hi = bounds[last] if last < nr else float("inf")
    # which allocations (by event index) are prologue leftovers
    open_at, free_of = {}, {}
    for i, (seq, op, ident, size) in enumerate(ev):
        if op == "a":
            open_at[ident] = i
        elif ident in open_at:
            free_of[open_at.pop(ident)] = seq
    leftover = set()
    for i, (seq, op, ident, size) in enumerate(ev):
        if op == "a" and seq < lo and i in free_of and \
                free_of[i] < bounds[nr - 1]:
            leftover.add(i)
    live, cur, cur_p, best, best_p = {}, 0, 0, 0, 0
    for i, (seq, op, ident, size) in enumerate(ev):
        if seq >= hi:
            break
        if seq >= lo:
            best, best_p = max(best, cur), max(best_p, cur_p)
        if op == "a":
            live[ident] = (i, size)
            cur += size
            cur_p += 0 if i in leftover else size
        else:
            j, size = live.pop(ident)
            cur -= size
            cur_p -= 0 if j in leftover else size
        if seq >= lo:
            best, best_p = max(best, cur), max(best_p, cur_p)
    return best, best_p


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: check-bounds.py STALLOC_PLAN TRACE...")
    plan, n, bad = sys.argv[1], 0, 0

    def ok(cond, what):
        nonlocal n, bad
        n += 1
        bad += not cond
        print(f"{'ok' if cond else 'not ok'} {n} - {what}")

    for path in sys.argv[2:]:
        name = path.rsplit("/", 1)[-1]
        out = subprocess.run([plan, "--json", "--budget", "0.2", path],
                             capture_output=True, text=True)
        if out.returncode:
            ok(False, f"{name}: planned ({out.stderr.strip()})")
            continue
        js = json.loads(out.stdout)
        ev, _ = parse(path)
        if not js["boundaries"]:
            ok(False, f"{name}: iterations found")
            continue
        all_peak, planned = peaks(ev, js["boundaries"])
        lb, pool = js["lower_bound"], js["peak"]
        ok(js["trace_peak"] == all_peak,
           f"{name}: trace peak {js['trace_peak']} = {all_peak}")
        if js["dynamic_requests"]:
            ok(js["live_peak"] <= planned,
               f"{name}: live peak {js['live_peak']} <= {planned} "
               f"(dynamic requests not placed)")
        else:
            ok(js["live_peak"] == planned,
               f"{name}: live peak {js['live_peak']} = {planned}")
        ok(lb == js["live_peak"] + js["align_bytes"] + js["model_bytes"]
           and js["model_bytes"] >= 0,
           f"{name}: lower bound {lb} = live {js['live_peak']} + align "
           f"{js['align_bytes']} + model {js['model_bytes']}")
        ok(pool >= lb, f"{name}: pool {pool} >= lower bound {lb}")
        live = max(js["live_peak"], 1)
        print(f"# {name}: lower bound {100 * (lb / live - 1):.4f}% and "
              f"pool {100 * (pool / live - 1):.4f}% above the live peak "
              f"of the planned requests ({live} B; all requests "
              f"{all_peak} B)")
    print(f"1..{n}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
