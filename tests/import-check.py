#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/import-check.py - checks of stalloc-import written apart from it

    import-check.py snapshot RECORD TRACE   peak live (walked back from the
                                            final segments) and counts
    import-check.py profiler RECORD TRACE   peak live (running sum of Bytes)
                                            and counts
    import-check.py mkprof SNAPSHOT OUT [--no-addr] [--skip N] [--plant]
                                            a modern profiler trace (Addr,
                                            Total Allocated) made from a
                                            snapshot, its window starting
                                            after N events
    import-check.py viewer PICKLE           what PyTorch's memory viewer
                                            (MemoryViz.js, _memory_viz.py
                                            segsum) needs of a snapshot
    import-check.py roundtrip TRACE1 TRACE2 same allocations, peak and
                                            iteration markers

Each prints what it checked and exits 1 on a mismatch.  The snapshot
check does not pair frees with allocations: it starts from the live
blocks of the final 'segments' and undoes the events from the last.
"""
import gzip
import json
import pickle
import sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[:1] == b"\x80":
        return pickle.loads(raw)
    return json.loads(raw)


def trace_stats(path):
    allocs = frees = iters = 0
    live = {}
    cur = peak = 0
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "a":
            allocs += 1
            live[f[2]] = int(f[3])
            cur += int(f[3])
            peak = max(peak, cur)
        elif f[0] == "f":
            frees += 1
            cur -= live.pop(f[2])
        elif f[0] == "m" and f[2] == "iteration":
            iters += 1
    return allocs, frees, iters, peak


def fail(msg):
    print("MISMATCH: " + msg)
    sys.exit(1)


def check_snapshot(rec, trace):
    d = load(rec)
    ev = next(t for t in d["device_traces"] if t)
    # live at the end: the final segments' allocated blocks
    end = sum(b.get("requested_size") or b["size"] for s in d["segments"]
              for b in s["blocks"]
              if b["state"] in ("active_allocated", "active_pending_free"))
    cur = peak = end
    for e in reversed(ev):
        if e["action"] == "alloc":
            cur -= e["size"]
        elif e["action"] == "free_completed":
            cur += e["size"]
        peak = max(peak, cur)
    n_alloc = sum(e["action"] == "alloc" for e in ev)
    n_free = sum(e["action"] == "free_completed" for e in ev)
    allocs, frees, _, tpeak = trace_stats(trace)
    print("snapshot %s: peak live %d (trace %d), %d alloc and %d "
          "free_completed events (trace: %d and %d)"
          % (rec, peak, tpeak, n_alloc, n_free, allocs, frees))
    if peak != tpeak:
        fail("peak live")
    if frees != n_free or allocs < n_alloc:
        fail("counts")
    # before the first event: what was live then, as allocations
    if allocs - n_alloc != 0 and cur <= 0:
        fail("allocations from before recording, but nothing was live")


def check_profiler(rec, trace):
    d = load(rec)
    mem = sorted((e["ts"], i, e["args"]["Bytes"])
                 for i, e in enumerate(d["traceEvents"])
                 if e.get("name") == "[memory]" and
                 e["args"].get("Device Type") == 1)
    cur = peak = 0
    for _, _, b in mem:
        cur += b
        peak = max(peak, cur)
    steps = sum(str(e.get("name", "")).startswith("ProfilerStep#")
                for e in d["traceEvents"])
    n_alloc = sum(b > 0 for _, _, b in mem)
    n_free = sum(b < 0 for _, _, b in mem)
    allocs, frees, iters, tpeak = trace_stats(trace)
    print("profiler %s: peak live %d (trace %d), %d/%d allocs/frees "
          "(trace %d/%d), %d steps (trace %d markers)"
          % (rec, peak, tpeak, n_alloc, n_free, allocs, frees, steps,
             iters))
    if (peak, n_alloc, n_free, steps) != (tpeak, allocs, frees, iters):
        fail("profiler import")


def mkprof(src, out, no_addr=False, skip=0, plant=False):
    d = load(src)
    ev = [e for e in next(t for t in d["device_traces"] if t)
          if e["action"] in ("alloc", "free_completed")]
    total = 0
    mem = []
    for i, e in enumerate(ev):
        b = e["size"] if e["action"] == "alloc" else -e["size"]
        total += b
        if i < skip:
            continue
        args = {"Device Type": 1, "Device Id": 0, "Bytes": b,
                "Total Allocated": total}
        if not no_addr:
            args["Addr"] = e["addr"]
        mem.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 1,
                    "tid": 1, "ts": 1000 + i, "args": args})
    if plant:
        mem[len(mem) // 2]["args"]["Total Allocated"] += 512
    span = (len(ev) - skip) // 3
    steps = [{"ph": "X", "cat": "Operator", "name": "ProfilerStep#%d" % k,
              "pid": 1, "tid": 1, "ts": 1000 + skip + k * span,
              "dur": span} for k in range(3)]
    cpu = {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
           "ts": 1000 + skip, "args": {"Device Type": 0, "Device Id": -1,
                                       "Bytes": 64}}
    events = steps + [cpu] + mem[::-1]  # out of order on purpose
    with gzip.open(out, "wt") as f:
        json.dump({"schemaVersion": 1, "traceEvents": events}, f)
    print("%s: %d [memory] events from %s, %d skipped" %
          (out, len(mem), src, skip))


def check_viewer(path):
    d = load(path)
    for k in ("segments", "device_traces"):
        if k not in d:
            fail("no '%s'" % k)
    segs = sorted(d["segments"], key=lambda s: s["address"])
    for s in segs:
        for k in ("device", "address", "total_size", "stream", "blocks",
                  "allocated_size", "segment_type"):
            if k not in s:
                fail("segment without '%s'" % k)
        # segsum(): blocks tile the segment
        if sum(b["size"] for b in s["blocks"]) != s["total_size"]:
            fail("blocks do not tile segment 0x%x" % s["address"])
        for b in s["blocks"]:
            for k in ("size", "requested_size", "state", "frames"):
                if k not in b:
                    fail("block without '%s'" % k)
    for a, b in zip(segs, segs[1:]):
        if a["address"] + a["total_size"] > b["address"]:
            fail("segments overlap")
    starts = [s["address"] for s in segs]

    def seg_of(addr, size):
        import bisect
        i = bisect.bisect_right(starts, addr) - 1
        return i >= 0 and addr + size <= starts[i] + segs[i]["total_size"]

    live = {}
    n = 0
    for dev, t in enumerate(d["device_traces"]):
        for e in t:
            for k in ("action", "addr", "size", "stream", "frames"):
                if k not in e:
                    fail("event without '%s'" % k)
            if e["action"] == "alloc":
                # MemoryView.find_segment() must find every block
                if not seg_of(e["addr"], e["size"]):
                    fail("block 0x%x in no segment" % e["addr"])
                if e["addr"] in live:
                    fail("0x%x allocated twice" % e["addr"])
                live[e["addr"]] = e["size"]
                n += 1
            elif e["action"] == "free_requested":
                if e["addr"] not in live:
                    fail("free_requested of a block not live")
            elif e["action"] == "free_completed":
                if live.pop(e["addr"], None) != e["size"]:
                    fail("free_completed of a block not live")
    end = {b_addr: b["size"] for s in segs
           for b_addr, b in zip(
               [s["address"] + sum(x["size"] for x in s["blocks"][:i])
                for i in range(len(s["blocks"]))], s["blocks"])
           if b["state"] == "active_allocated"}
    if end != live:
        fail("final segments' live blocks differ from the trace's")
    # the live blocks never overlap: checked at the end state
    prev = 0
    for a in sorted(live):
        if a < prev:
            fail("live blocks overlap")
        prev = a + live[a]
    print("%s: %d segments, %d allocations, %d live at the end: as the "
          "viewer reads them" % (path, len(segs), n, len(live)))


def roundtrip(t1, t2):
    s1, s2 = trace_stats(t1), trace_stats(t2)
    print("allocs, frees, iterations, peak: %r and %r" % (s1, s2))
    if s1 != s2:
        fail("round trip")


def main(argv):
    cmd = argv[0]
    if cmd == "snapshot":
        check_snapshot(argv[1], argv[2])
    elif cmd == "profiler":
        check_profiler(argv[1], argv[2])
    elif cmd == "mkprof":
        skip = int(argv[argv.index("--skip") + 1]) if "--skip" in argv \
            else 0
        mkprof(argv[1], argv[2], "--no-addr" in argv, skip,
               "--plant" in argv)
    elif cmd == "viewer":
        check_viewer(argv[1])
    elif cmd == "roundtrip":
        roundtrip(argv[1], argv[2])
    else:
        sys.exit("usage: see the docstring")


if __name__ == "__main__":
    main(sys.argv[1:])
