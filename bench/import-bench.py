#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/import-bench.py - how fast stalloc-import reads a big snapshot

    import-bench.py BUILD_DIR SHARED_DIR [--mb N]

Builds a snapshot pickle of at least N MB (default 100) by repeating the
device trace of a real one (bench/results/*/moe.snapshot.pickle.gz, else
the largest shared real-gpu snapshot) at shifted addresses, as one long
recording would, then times BUILD_DIR/stalloc-import on it (the wall time
of the whole command, best of 2) against the floor of any importer, a
plain pickle.load() of the same file in this process.  The issue's target
is under 10 s for 100 MB.  Also prints the import of each shared record.
"""
import glob
import gzip
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return pickle.loads(raw)


def grow(src, mb):
    """Copies of @src's trace and segments, each at its own addresses."""
    d = load(src)
    dev = next(i for i, t in enumerate(d["device_traces"]) if t)
    ev, segs = d["device_traces"][dev], d["segments"]
    span = 1 << 44
    # copies share frame dicts (as PyTorch's pickles do): measure one
    # more copy's cost rather than guess it
    one = len(pickle.dumps(d, protocol=4))
    two = len(pickle.dumps(_copies(d, dev, ev, segs, 2, span)[0],
                           protocol=4))
    k = 2 + max(0, -(-(mb * 1000000 - two) // max(1, two - one)))
    return _copies(d, dev, ev, segs, k, span)


def _copies(d, dev, ev, segs, k, span):
    out_ev, out_segs = [], []
    for c in range(k):
        off = c * span
        for e in ev:
            e = dict(e)
            if "addr" in e:
                e["addr"] += off
            out_ev.append(e)
        for s in segs:
            s = dict(s)
            s["address"] += off
            s["blocks"] = [dict(b, address=b["address"] + off)
                           for b in s["blocks"]]
            out_segs.append(s)
    traces = [[] for _ in range(dev + 1)]
    traces[dev] = out_ev
    return dict(d, segments=out_segs, device_traces=traces), k


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    """Best of 2: (wall seconds, CPU seconds) of the command."""
    best = None
    for _ in range(2):
        t, c = time.monotonic(), cpu_children()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, universal_newlines=True)
        dt, dc = time.monotonic() - t, cpu_children() - c
        if p.returncode:
            sys.exit("import-bench: %s failed: %s" % (cmd, p.stderr))
        best = (dt, dc) if best is None or dt < best[0] else best
    return best


def main(argv):
    build, shared = argv[0], argv[1]
    mb = int(argv[argv.index("--mb") + 1]) if "--mb" in argv else 100
    imp = os.path.join(build, "stalloc-import")
    real = sorted(glob.glob("bench/results/*/moe.snapshot.pickle.gz"))
    shared_snaps = sorted(glob.glob(os.path.join(
        shared, "workloads/real-gpu/*.snapshot.pickle")), key=os.path.getsize)
    src = real[0] if real else shared_snaps[-1]
    with tempfile.TemporaryDirectory(prefix="import-bench-") as d:
        big = os.path.join(d, "big.snapshot.pickle")
        snap, k = grow(src, mb)
        n = len(snap["device_traces"][-1])
        with open(big, "wb") as f:
            pickle.dump(snap, f, protocol=4)
        del snap
        size = os.path.getsize(big) / 1e6
        t = time.process_time()
        with open(big, "rb") as f:
            pickle.load(f)
        floor = time.process_time() - t
        dt, cpu = timed([imp, "-q", "-o", os.path.join(d, "big.trace"),
                         big])
        print("import-bench: %.1f MB snapshot (%d copies of %s, %d events)"
              % (size, k, os.path.basename(src), n))
        print("import-bench: stalloc-import %.2f s wall, %.2f s CPU "
              "(%.1f MB/s); pickle.load alone %.2f s CPU; ratio %.2f; "
              "target < 10 s: %s"
              % (dt, cpu, size / dt, floor, cpu / floor,
                 "met" if dt < 10 else "MISSED"))
        for rec in shared_snaps + sorted(glob.glob(os.path.join(
                shared, "workloads/real-gpu/*.json.gz"))):
            dt, _ = timed([imp, "-q", "-o", os.path.join(d, "r.trace"),
                           rec])
            print("import-bench: %-48s %6.1f MB  %.2f s"
                  % (os.path.basename(rec), os.path.getsize(rec) / 1e6, dt))


if __name__ == "__main__":
    main(sys.argv[1:])
