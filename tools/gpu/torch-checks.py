#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/gpu/torch-checks.py - PyTorch behaviours under stalloc on a real GPU

Runs in one process with stalloc enabled (mode off) and prints one line per
check, "ok" or "FAILED", then a JSON summary line:

  oom       an allocation past torch.cuda.set_per_process_memory_fraction
            raises (RuntimeError naming stalloc's figures), never a NULL
            tensor; the process goes on allocating and computing after it
  streams   tensors made on side streams, handed to the main stream with
            record_stream and freed, while the main stream reuses memory:
            every result is checked (a missed ordering shows as a wrong
            sum); device-wide syncs counted by stalloc are reported
  graphs    torch.cuda.graph capture and replay of a small MLP with eager
            allocations around it (stalloc's graph pool hooks)

Exit status 0 when every check passed.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))

import stalloc  # noqa: E402

stalloc.enable(mode="off", log="warn")
import torch  # noqa: E402

results = {}


def check(name, fn):
    try:
        detail = fn()
        results[name] = {"ok": True, "detail": detail}
        print("ok %s %s" % (name, detail), flush=True)
    except Exception as exc:  # report and go on to the next check
        results[name] = {"ok": False, "detail": repr(exc)[:500]}
        print("FAILED %s %r" % (name, exc), flush=True)


def oom():
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.05)
    keep = torch.ones(1 << 20, device="cuda")
    raised = None
    try:
        big = torch.empty(int(total * 0.1), dtype=torch.uint8, device="cuda")
        big.fill_(1)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        raised = exc
    if raised is None:
        raise AssertionError("no exception for a request past the limit")
    msg = str(raised)
    if "out of memory" not in msg:
        raise AssertionError("unexpected message: %s" % msg[:200])
    oom_type = getattr(torch, "OutOfMemoryError",
                       getattr(torch.cuda, "OutOfMemoryError", None))
    if oom_type is not None and not isinstance(raised, oom_type):
        raise AssertionError("%s, not torch.OutOfMemoryError: %s"
                             % (type(raised).__name__, msg[:200]))
    # the process goes on: allocate and compute
    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    if float((x + keep[:1000]).sum()) != 499500.0 + 1000.0:
        raise AssertionError("compute after the OOM is wrong")
    torch.cuda.set_per_process_memory_fraction(1.0)
    return {"type": type(raised).__name__,
            "is_torch_oom": isinstance(raised, getattr(
                torch, "OutOfMemoryError", ())),
            "message": msg[:300]}


def streams():
    main = torch.cuda.current_stream()
    side = [torch.cuda.Stream() for _ in range(2)]
    torch.ones(1, device="cuda")  # the device's first request
    before = stalloc.stats(0)
    bad = 0
    for it in range(200):
        outs = []
        for k, s in enumerate(side):
            with torch.cuda.stream(s):
                t = torch.full((1 << 18,), float(it + k), device="cuda")
                t = t * 2 + 1
            t.record_stream(main)
            outs.append(t)
        main.wait_stream(side[0])
        main.wait_stream(side[1])
        tot = sum(float(o.sum()) for o in outs)
        want = sum((2 * (it + k) + 1) * (1 << 18) for k in range(2))
        bad += tot != want
        del outs
        junk = [torch.full((1 << 18,), -7.0, device="cuda")
                for _ in range(4)]
        del junk
    torch.cuda.synchronize()
    after = stalloc.stats(0)
    if bad:
        raise AssertionError("%d wrong sums of 200" % bad)
    return {"allocs": after["allocs"] - before["allocs"],
            "driver_calls": after["driver_calls"] - before["driver_calls"]}


def graphs():
    net = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                              torch.nn.Linear(2048, 512)).cuda()
    static_in = torch.randn(64, 512, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):
            net(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_out = net(static_in)
    bad = 0
    for i in range(20):
        static_in.copy_(torch.randn(64, 512, device="cuda"))
        junk = [torch.full((1 << 20,), float(i), device="cuda")
                for _ in range(8)]
        g.replay()
        with torch.no_grad():
            want = net(static_in)
        for j in junk:
            j.fill_(-1.0)
        torch.cuda.synchronize()
        bad += not torch.allclose(static_out, want, rtol=1e-4, atol=1e-4)
        del junk
    del g
    torch.cuda.synchronize()
    if bad:
        raise AssertionError("%d of 20 replays differ" % bad)
    return {"replays": 20}


check("streams", streams)
check("graphs", graphs)
check("oom", oom)
print("RESULT " + json.dumps(results), flush=True)
sys.exit(0 if all(r["ok"] for r in results.values()) else 1)
