#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Independent check of a plan emitted by stalloc-plan --emit-csv.

Reads id,lower,upper,size,offset rows (lifetimes [lower, upper)), and checks
that no two buffers live at the same time share an address.  Shares no code
with the planner.  Prints one JSON object: buffers, load (most bytes live at
once), peak (max offset + size), ok.  Exit 1 on an overlap or a bad row.
"""
import bisect
import csv
import json
import sys


def check(path):
    rows = []
    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        col = {name: i for i, name in enumerate(head)}
        for n, row in enumerate(r, start=2):
            lo, up, size, off = (int(row[col[k]]) for k in
                                 ("lower", "upper", "size", "offset"))
            if up <= lo or size <= 0 or off < 0:
                raise SystemExit(f"{path}:{n}: bad row {row}")
            rows.append((lo, up, size, off, row[col["id"]]))
    events = []
    for i, (lo, up, size, off, _) in enumerate(rows):
        events.append((lo, 1, i))
        events.append((up, 0, i))  # ends sort before starts: half-open
    events.sort()
    starts, live_ids, live, load = [], [], 0, 0
    for t, is_start, i in events:
        lo, up, size, off, name = rows[i]
        if not is_start:
            k = bisect.bisect_left(starts, off)
            while live_ids[k] != i:
                k += 1
            del starts[k]
            del live_ids[k]
            live -= size
            continue
        k = bisect.bisect_left(starts, off)
        for j in (k - 1, k):
            if 0 <= j < len(starts):
                o = rows[live_ids[j]]
                if off < o[3] + o[2] and o[3] < off + size:
                    print(json.dumps({"ok": False, "overlap": [name, o[4]],
                                      "time": t}))
                    return 1
        starts.insert(k, off)
        live_ids.insert(k, i)
        live += size
        load = max(load, live)
    peak = max((off + size for _, _, size, off, _ in rows), default=0)
    print(json.dumps({"ok": True, "buffers": len(rows), "load": load,
                      "peak": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(check(sys.argv[1]))
