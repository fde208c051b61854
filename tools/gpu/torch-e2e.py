#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/gpu/torch-e2e.py - PyTorch end to end under every allocator

Trains a GPT-like model (dense, or with top-2 mixture-of-experts layers and
skewed routing) on a CUDA device, once per allocator, each in a fresh
process (an allocator can only be chosen before CUDA starts):

  caching       PyTorch's own caching allocator
  expandable    the same with expandable_segments:True
  stalloc-off   libstalloc, dynamic allocator only
  stalloc-trace libstalloc recording a trace (the input of the plan run)
  stalloc-plan  libstalloc serving the plan stalloc-plan made of that trace
  stalloc-auto  libstalloc tracing, planning in-process and switching

and prints, per allocator: peak reserved (the allocator's own figure:
torch.cuda.max_memory_reserved() or stalloc's reserved_peak), peak
allocated, the device memory in use at the worst step end (cudaMemGetInfo,
which every allocator answers alike), the median step time over the second
half of the run, the final loss and the largest difference of the losses
from the caching run.  --graphs also captures the model's forward pass in a
CUDA graph and replays it while eager tensors come and go around it; every
replay's output is compared with an eager forward pass (a mismatch is
memory shared between the graph and ordinary tensors).

Results: one JSON file (--out DIR/torch-e2e-MODEL.json) and a table on
stdout.  --snapshot also writes PyTorch's memory snapshot of the caching
run (torch.cuda.memory._snapshot()) and keeps stalloc's trace.

Usage:
  tools/gpu/torch-e2e.py [--model dense|moe] [--steps N] [--graphs]
                         [--configs a,b,...] [--out DIR] [--snapshot]

Exit status: 0 when every run finished, 1 when one failed (its error is in
the table and the JSON), 2 bad usage.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CONFIGS = ("caching", "expandable", "stalloc-off", "stalloc-trace",
           "stalloc-plan", "stalloc-auto")
SIZES = {
    # name: vocab, hidden, heads, layers, seq, batch, experts
    "dense": (32000, 1024, 16, 8, 512, 8, 0),
    "moe": (32000, 768, 12, 6, 512, 8, 8),
    "tiny": (1000, 128, 4, 2, 64, 4, 0),
    "tiny-moe": (1000, 128, 4, 2, 64, 4, 4),
}


# ------------------------------------------------------------ the model
def build(torch, size, seed):
    nn = torch.nn
    F = torch.nn.functional
    vocab, hidden, heads, layers, seq, batch, experts = SIZES[size]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(hidden, dim=2)
            shape = (b, t, heads, c // heads)
            q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(hidden, 4 * hidden)
            self.down = nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            return self.down(F.gelu(self.up(x)))

    class MoE(nn.Module):
        """Top-2 routing with a skewed gate: expert loads differ and
        change every step."""

        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(hidden, experts)
            with torch.no_grad():
                self.gate.bias.copy_(torch.linspace(2.0, -2.0, experts))
            self.experts = nn.ModuleList(MLP() for _ in range(experts))

        def forward(self, x):
            b, t, c = x.shape
            flat = x.reshape(b * t, c)
            w, which = self.gate(flat).softmax(dim=-1).topk(2, dim=-1)
            out = torch.zeros_like(flat)
            for e, expert in enumerate(self.experts):
                tok, slot = (which == e).nonzero(as_tuple=True)
                if tok.numel() == 0:
                    continue
                y = expert(flat[tok]) * w[tok, slot].unsqueeze(1)
                out = out.index_add(0, tok, y.to(out.dtype))
            return out.reshape(b, t, c)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(hidden)
            self.mlp = MoE() if experts else MLP()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    torch.manual_seed(seed)
    model = GPT().cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    data = torch.randint(0, vocab, (4, batch, seq + 1), device="cuda",
                         generator=gen)
    return model, data


# ------------------------------------------------------------ one child run
def child(args):
    cfg = args.child
    result = {"config": cfg, "model": args.model, "ok": False}
    st = None
    if cfg.startswith("stalloc"):
        sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
        import stalloc as st
        mode = {"stalloc-off": "off", "stalloc-trace": "trace",
                "stalloc-plan": "plan", "stalloc-auto": "auto"}[cfg]
        st.enable(mode=mode, plan=args.plan, trace=args.trace,
                  log="warn")
    import torch
    result["torch"] = torch.__version__
    result["cuda"] = torch.version.cuda
    result["device"] = torch.cuda.get_device_name(0)
    if args.snapshot_file:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    model, data = build(torch, args.model, args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    free0, total = torch.cuda.mem_get_info()
    used_peak = total - free0
    losses, times = [], []
    for step in range(args.steps):
        if st:
            st.iteration()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        batch = data[step % data.shape[0]]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        free, _ = torch.cuda.mem_get_info()
        used_peak = max(used_peak, total - free)
    result["losses"] = losses
    result["step_ms_median"] = 1e3 * statistics.median(
        times[len(times) // 2:])
    result["device_used_peak"] = used_peak
    if args.graphs:
        result["graphs"] = graph_check(torch, model, data, st)
    if st:
        s = st.stats(0)
        result["stalloc"] = s
        result["reserved_peak"] = s["reserved_peak"]
        result["allocated_peak"] = s["allocated_peak"]
    else:
        result["reserved_peak"] = torch.cuda.max_memory_reserved()
        result["allocated_peak"] = torch.cuda.max_memory_allocated()
        ms = torch.cuda.memory_stats()
        result["segments_peak"] = ms.get("segment.all.peak", 0)
        result["alloc_retries"] = ms.get("num_alloc_retries", 0)
    if args.snapshot_file:
        import pickle
        with open(args.snapshot_file, "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f)
    result["ok"] = True
    print("RESULT " + json.dumps(result), flush=True)


def graph_check(torch, model, data, st):
    """Capture the forward pass, replay it among eager allocations and
    compare each replay with an eager forward pass."""
    out = {"captured": False, "replays": 0, "mismatches": 0}
    model.eval()
    static_in = data[0][:, :-1].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.no_grad(), torch.cuda.graph(g):
            static_out = model(static_in)
    except Exception as exc:  # report, do not die: the table shows it
        out["error"] = "capture: %s" % (exc,)
        model.train()
        return out
    out["captured"] = True
    for i in range(8):
        static_in.copy_(data[i % data.shape[0]][:, :-1])
        # eager tensors allocated and written around the replay: if they
        # got the graph's memory, the replay's output (or theirs) breaks
        junk = [torch.full((1 << 20,), float(i), device="cuda")
                for _ in range(16)]
        g.replay()
        with torch.no_grad():
            want = model(static_in)
        for j in junk:
            j.fill_(-1.0)
        torch.cuda.synchronize()
        if not torch.allclose(static_out.float(), want.float(), rtol=1e-3,
                              atol=1e-3):
            out["mismatches"] += 1
        out["replays"] += 1
        del junk
    del g
    model.train()
    return out


# ------------------------------------------------------------ the parent
def run_child(args, cfg, extra, env_extra):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", cfg,
           "--model", args.model, "--steps", str(args.steps),
           "--seed", str(args.seed)] + extra
    if args.graphs:
        cmd.append("--graphs")
    env = dict(os.environ, **env_extra)
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=args.timeout)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        res = {"config": cfg, "ok": False,
               "error": "exit %d: %s" % (p.returncode,
                                         p.stderr.strip()[-1500:])}
    res["wall_s"] = round(time.time() - t0, 1)
    res["stderr_tail"] = p.stderr.strip()[-1500:]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SIZES), default="dense")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graphs", action="store_true")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "gpu"))
    ap.add_argument("--snapshot", action="store_true")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--snapshot-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error("unknown config %s; want some of %s"
                 % (", ".join(bad), ", ".join(CONFIGS)))
    if "stalloc-plan" in configs and "stalloc-trace" not in configs:
        configs.insert(configs.index("stalloc-plan"), "stalloc-trace")
    os.makedirs(args.out, exist_ok=True)
    trace = os.path.join(args.out, "%s.trace" % args.model)
    plan = os.path.join(args.out, "%s.plan" % args.model)
    results = []
    for cfg in configs:
        extra, env = [], {}
        if cfg == "expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if cfg == "caching" and args.snapshot:
            extra += ["--snapshot-file", os.path.join(
                args.out, "%s.snapshot.pickle" % args.model)]
        if cfg == "stalloc-trace":
            extra += ["--trace", trace]
        if cfg == "stalloc-auto":
            extra += ["--trace", os.path.join(args.out, "%s-auto-%%p.trace"
                                              % args.model)]
        if cfg == "stalloc-plan":
            p = subprocess.run([os.path.join(ROOT, "build", "stalloc-plan"),
                                "-o", plan, "--json", trace],
                               capture_output=True, text=True)
            if p.returncode:
                results.append({"config": cfg, "ok": False,
                                "error": "stalloc-plan: " + p.stderr})
                continue
            extra += ["--plan", plan]
        res = run_child(args, cfg, extra, env)
        if cfg == "stalloc-plan":
            res["planner"] = p.stdout.strip()[-2000:]
        results.append(res)
        print("%-14s %s" % (cfg, "ok" if res["ok"] else
                            "FAILED: " + res.get("error", "")[-300:]),
              flush=True)
    report(args, results)
    return 0 if all(r["ok"] for r in results) else 1


def report(args, results):
    base = next((r for r in results if r["config"] == "caching" and r["ok"]),
                None)
    mib = 1 << 20
    print("\n%-14s %10s %10s %10s %9s %10s %9s %s" % (
        "allocator", "reserved", "allocated", "dev-used", "step-ms",
        "loss", "dloss", "graphs"))
    for r in results:
        if not r["ok"]:
            print("%-14s FAILED" % r["config"])
            continue
        dl = max(abs(a - b) for a, b in zip(r["losses"], base["losses"])) \
            if base else float("nan")
        g = r.get("graphs")
        gs = "-" if g is None else ("%d/%d bad" % (g["mismatches"],
                                                   g["replays"])
                                    if g["captured"] else
                                    g.get("error", "?")[:60])
        print("%-14s %8.0fMi %8.0fMi %8.0fMi %9.2f %10.4f %9.2g %s" % (
            r["config"], r["reserved_peak"] / mib, r["allocated_peak"] / mib,
            r["device_used_peak"] / mib, r["step_ms_median"],
            r["losses"][-1], dl, gs))
    path = os.path.join(args.out, "torch-e2e-%s.json" % args.model)
    with open(path, "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)
    print("\nwritten: %s" % path)


if __name__ == "__main__":
    sys.exit(main())
