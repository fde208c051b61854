#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/gpu/torch-e2e.py - PyTorch end to end under every allocator

Trains a GPT-like model (dense, or with top-2 mixture-of-experts layers and
skewed routing) once per allocator, each in a fresh process (an allocator
can only be chosen before CUDA starts):

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

--device cpu runs the same on the CPU build of PyTorch (Debian's 1.13 is
enough): no GPU is involved.  "caching" is then plain CPU torch (glibc
malloc, which reports no peak: "-"); "expandable" has no CPU meaning and is
reported as skipped; the stalloc runs load build/libstalloc-cpu.so with
LD_PRELOAD (Documentation/cpu-preload.rst), i.e. libstalloc on its host
backend serving the CPU tensors c10 allocates (those of at least
STALLOC_CPU_MIN bytes; smaller ones and oneDNN's scratch stay in glibc),
configured through STALLOC_MODE / STALLOC_TRACE / STALLOC_PLAN.  Their
peaks are stalloc's own statistics (stalloc.stats() in the process) and
cover those routed tensors only; the column every run answers alike is the
process's peak resident set (ru_maxrss), which includes PyTorch itself.
One intra-op thread (--threads) and deterministic algorithms, so that the
losses can be compared bit for bit.

--ddp N trains under DistributedDataParallel on N ranks, each a process
started as torchrun would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=
127.0.0.1, MASTER_PORT free): nccl with one GPU per rank (skipped, exit 0,
when fewer than N GPUs are visible), gloo on the CPU.  Each rank has a
batch of its own, traces to and plans from files of its own (%r in
STALLOC_TRACE and STALLOC_PLAN).  Figures are given per rank and as the
largest over the ranks; each rank's losses are compared with the same rank
of the caching run, and every rank must end with the same parameters.

Results: one JSON file (--out DIR/torch-e2e-MODEL[-cpu][-ddpN].json) and a
table on stdout.  --snapshot (CUDA) also writes PyTorch's memory snapshot
of the caching run (torch.cuda.memory._snapshot()) and keeps stalloc's
trace.

Usage:
  tools/gpu/torch-e2e.py [--model dense|moe|tiny|tiny-moe] [--steps N]
                         [--device cuda|cpu] [--ddp N] [--graphs]
                         [--configs a,b,...] [--out DIR] [--snapshot]
                         [--plan-file PLAN] [--build DIR] [--threads N]

Exit status: 0 when every run finished (or the whole job was skipped),
1 when one failed (its error is in the table and the JSON), 2 bad usage.
"""
import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CONFIGS = ("caching", "expandable", "stalloc-off", "stalloc-trace",
           "stalloc-plan", "stalloc-auto")
MODES = {"stalloc-off": "off", "stalloc-trace": "trace",
         "stalloc-plan": "plan", "stalloc-auto": "auto"}
SIZES = {
    # name: vocab, hidden, heads, layers, seq, batch, experts
    "dense": (32000, 1024, 16, 8, 512, 8, 0),
    "moe": (32000, 768, 12, 6, 512, 8, 8),
    "tiny": (1000, 128, 4, 2, 64, 4, 0),
    "tiny-moe": (1000, 128, 4, 2, 64, 4, 4),
}
CPU_NOTE = ("CPU: caching = plain CPU torch (glibc malloc, no peak figure); "
            "stalloc-* = libstalloc on its host backend through "
            "LD_PRELOAD=libstalloc-cpu.so, its peaks covering the tensors "
            "routed to it (c10 allocations of at least STALLOC_CPU_MIN "
            "bytes); rss = the process's peak resident set, PyTorch "
            "included")
# what the parent sets for a stalloc run on the CPU: dropped from the
# inherited environment (tuning knobs such as STALLOC_CPU_MIN pass through)
CPU_OWN_ENV = ("LD_PRELOAD", "STALLOC_MODE", "STALLOC_TRACE", "STALLOC_PLAN",
               "STALLOC_LOG", "STALLOC_CPU_STATS", "STALLOC_CPU_ADDR_LOG",
               "STALLOC_BACKEND")


# ------------------------------------------------------------ the model
def build(torch, size, seed, device="cuda", rank=0):
    nn = torch.nn
    F = torch.nn.functional
    vocab, hidden, heads, layers, seq, batch, experts = SIZES[size]
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def attention(q, k, v):
        """torch < 2.0 (Debian's 1.13 on the CPU): the same causal
        attention, written out."""
        t = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v

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
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                y = attention(q, k, v)
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

    # the same weights on every rank; a batch of its own per rank (rank 0
    # sees what a single-process run sees)
    torch.manual_seed(seed)
    model = GPT().to(device)
    gen = torch.Generator(device=device).manual_seed(seed + 1000003 * rank)
    data = torch.randint(0, vocab, (4, batch, seq + 1), device=device,
                         generator=gen)
    return model, data


# ------------------------------------------------------------ one child run
def child(args):
    cfg = args.child
    cuda = args.device == "cuda"
    rank = int(os.environ.get("RANK", "0")) if args.ddp else 0
    result = {"config": cfg, "model": args.model, "ok": False}
    if args.ddp:
        result["rank"] = rank
        result["world"] = args.ddp
    st = None
    if cfg.startswith("stalloc"):
        sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
        import stalloc as st
        # on the CPU the preloaded libstalloc-cpu.so took these settings
        # from the environment the parent gave it; enable() checks they
        # agree and only installs its step markers
        st.enable(mode=MODES[cfg], plan=args.plan, trace=args.trace,
                  log="warn")
    import torch
    result["torch"] = torch.__version__
    if cuda:
        if args.ddp:
            torch.cuda.set_device(rank)
        result["cuda"] = torch.version.cuda
        result["device"] = torch.cuda.get_device_name(
            torch.cuda.current_device())
    else:
        torch.set_num_threads(args.threads)
        torch.use_deterministic_algorithms(True)
        result["device"] = "cpu, %s" % (
            "libstalloc host backend through LD_PRELOAD=libstalloc-cpu.so"
            if st else "glibc malloc")
        result["threads"] = args.threads
    dist = None
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("nccl" if cuda else "gloo")
        result["backend"] = dist.get_backend()
    if args.snapshot_file:
        args.snapshot_file = rank_path(args.snapshot_file, rank)
        torch.cuda.memory._record_memory_history(max_entries=200000)
    experts = SIZES[args.model][6]
    net, data = build(torch, args.model, args.seed, args.device, rank)
    model = net
    if dist:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(
            net, device_ids=[rank] if cuda else None,
            find_unused_parameters=bool(experts))
    if cuda:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        free0, total = torch.cuda.mem_get_info()
        used_peak = total - free0
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses, times = [], []
    for step in range(args.steps):
        if st:
            st.iteration()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        batch = data[step % data.shape[0]]
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else \
                contextlib.nullcontext():
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if cuda:
            free, _ = torch.cuda.mem_get_info()
            used_peak = max(used_peak, total - free)
    result["losses"] = losses
    result["step_ms_median"] = 1e3 * statistics.median(
        times[len(times) // 2:])
    if cuda:
        result["device_used_peak"] = used_peak
    else:
        import resource
        result["rss_peak"] = resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss * 1024
    if dist:
        # DDP keeps the replicas equal: every rank must end with the
        # same parameters, bit for bit.  Summed by numpy, so that no
        # tensor is allocated after the last step: allocations there would
        # end up in the last traced iteration
        import numpy
        total_sum = 0.0
        for p in net.parameters():
            total_sum += float(numpy.sum(p.detach().cpu().numpy(),
                                         dtype=numpy.float64))
        result["params_checksum"] = total_sum.hex()
        dist.barrier()
        dist.destroy_process_group()
    if args.graphs:
        result["graphs"] = graph_check(torch, net, data, st)
    if st:
        s = st.stats(torch.cuda.current_device() if cuda else 0)
        result["stalloc"] = s
        result["reserved_peak"] = s["reserved_peak"]
        result["allocated_peak"] = s["allocated_peak"]
    elif cuda:
        result["reserved_peak"] = torch.cuda.max_memory_reserved()
        result["allocated_peak"] = torch.cuda.max_memory_allocated()
        ms = torch.cuda.memory_stats()
        result["segments_peak"] = ms.get("segment.all.peak", 0)
        result["alloc_retries"] = ms.get("num_alloc_retries", 0)
    else:
        # glibc keeps no peak: nothing is made up
        result["reserved_peak"] = None
        result["allocated_peak"] = None
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
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_path(pattern, rank):
    """A %r path pattern as libstalloc expands it for @rank."""
    return pattern.replace("%r", str(rank))


def cpu_env(args, cfg, stats):
    """The environment of one CPU run: none of the parent's own stalloc
    settings; for a stalloc run, the preload, its mode and where its
    counters go (STALLOC_TRACE and STALLOC_PLAN come from main())."""
    env = {k: v for k, v in os.environ.items() if k not in CPU_OWN_ENV}
    env["PYTHONHASHSEED"] = "0"
    if not cfg.startswith("stalloc"):
        return env
    env["LD_PRELOAD"] = os.path.join(args.build, "libstalloc-cpu.so")
    env["STALLOC_MODE"] = MODES[cfg]
    env["STALLOC_LOG"] = "warn"
    env["STALLOC_CPU_STATS"] = stats
    return env


def run_child(args, cfg, extra, env_extra):
    """Run one config: one process, or one per rank with --ddp.  Returns
    the result (with --ddp: the ranks' results under "ranks" and the
    largest figures over them)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", cfg,
           "--model", args.model, "--steps", str(args.steps),
           "--seed", str(args.seed), "--device", args.device,
           "--threads", str(args.threads)] + extra
    if args.ddp:
        cmd += ["--ddp", str(args.ddp)]
    if args.graphs:
        cmd.append("--graphs")
    world = args.ddp or 1
    port = str(free_port()) if args.ddp else None
    procs = []
    t0 = time.time()
    for rank in range(world):
        stats = os.path.join(args.out, "%s-%s-r%d.stats.json"
                             % (tag(args), cfg, rank))
        if args.device == "cpu":
            env = cpu_env(args, cfg, stats)
            if os.path.exists(stats):
                os.unlink(stats)
        else:
            env = dict(os.environ)
        env.update(env_extra)
        if args.ddp:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank),
                       WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port)
        # a session of its own: a hung rank (and what it started) is
        # killed whole
        procs.append((subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True), stats))
    ranks = []
    for rank, (p, stats) in enumerate(procs):
        left = max(1.0, args.timeout - (time.time() - t0))
        try:
            out, err = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            for q, _ in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, err = p.communicate()
            err += "\n(killed after %d s)" % args.timeout
        res = None
        for line in out.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
        if res is None:
            res = {"config": cfg, "ok": False,
                   "error": "exit %d: %s" % (p.returncode,
                                             err.strip()[-1500:])}
        if args.device == "cpu" and cfg.startswith("stalloc"):
            preload_check(res, stats)
        if args.ddp:
            res.setdefault("rank", rank)
        res["stderr_tail"] = err.strip()[-1500:]
        ranks.append(res)
    if not args.ddp:
        res = ranks[0]
    else:
        res = merge_ranks(cfg, ranks)
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def preload_check(res, stats):
    """A CPU stalloc run must have run under the preload: its counters
    (STALLOC_CPU_STATS, written at exit) go into the result; a run in which
    the library was disabled or routed nothing failed."""
    try:
        with open(stats) as f:
            res["preload"] = json.load(f)
    except (OSError, ValueError) as exc:
        if res["ok"]:
            res.update(ok=False, error="no preload statistics (%s): was "
                       "libstalloc-cpu.so loaded?" % exc)
        return
    pre = res["preload"]
    if res["ok"] and (pre.get("disabled") or not pre.get("routed")):
        res.update(ok=False, error="libstalloc-cpu.so %s" % (
            "was disabled" if pre.get("disabled") else "routed nothing"))


def merge_ranks(cfg, ranks):
    """One config's DDP result: the ranks, the largest figures over them,
    and whether the replicas ended equal."""
    res = {"config": cfg, "ok": all(r["ok"] for r in ranks),
           "world": len(ranks), "ranks": ranks}
    bad = [r for r in ranks if not r["ok"]]
    if bad:
        res["error"] = "rank %s: %s" % (bad[0].get("rank"),
                                         bad[0].get("error", "?"))
        return res
    for key in ("reserved_peak", "allocated_peak", "device_used_peak",
                "rss_peak", "step_ms_median"):
        vals = [r[key] for r in ranks if r.get(key) is not None]
        res[key] = max(vals) if vals else None
    res["losses"] = ranks[0]["losses"]
    for key in ("torch", "device", "backend", "cuda"):
        if key in ranks[0]:
            res[key] = ranks[0][key]
    sums = sorted(set(r.get("params_checksum") for r in ranks))
    res["params_agree"] = len(sums) == 1
    if not res["params_agree"]:
        res.update(ok=False, error="the ranks ended with different "
                   "parameters: %s" % ", ".join(map(str, sums)))
    if "stalloc" in ranks[0]:
        res["plan_hits"] = [r["stalloc"]["plan_hits"] for r in ranks]
        res["plan_misses"] = [r["stalloc"]["plan_misses"] for r in ranks]
    return res


def tag(args):
    """The name of this job's files: model, device, world."""
    return args.model + ("-cpu" if args.device == "cpu" else "") + \
        ("-ddp%d" % args.ddp if args.ddp else "")


def cuda_devices():
    """How many CUDA devices torch sees, asked in a process of its own."""
    p = subprocess.run([sys.executable, "-c", "import torch; "
                        "print(torch.cuda.device_count())"],
                       capture_output=True, text=True, check=False)
    try:
        return int(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def plan_traces(args, trace, plan):
    """stalloc-plan each rank's trace; returns (error or None, the
    planner's JSON output per rank)."""
    outs = []
    for rank in range(args.ddp or 1):
        p = subprocess.run([os.path.join(args.build, "stalloc-plan"),
                            "-o", rank_path(plan, rank), "--json",
                            rank_path(trace, rank)],
                           capture_output=True, text=True, check=False)
        if p.returncode:
            return "stalloc-plan%s: %s" % (
                " (rank %d)" % rank if args.ddp else "", p.stderr), outs
        outs.append(p.stdout.strip()[-2000:])
    return None, outs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SIZES), default="dense")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: CPU torch, stalloc through "
                    "LD_PRELOAD=libstalloc-cpu.so")
    ap.add_argument("--ddp", type=int, default=0, metavar="N",
                    help="DistributedDataParallel on N ranks (nccl on "
                    "CUDA, gloo on the CPU)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads on the CPU (default 1)")
    ap.add_argument("--graphs", action="store_true")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "gpu"))
    ap.add_argument("--build", default=os.environ.get(
        "O", os.path.join(ROOT, "build")),
        help="the build directory: stalloc-plan, libstalloc-cpu.so "
        "(default $O, else build/)")
    ap.add_argument("--plan-file", metavar="PLAN",
                    help="serve this plan (%%r: the rank) in stalloc-plan "
                    "instead of planning the stalloc-trace run's trace")
    ap.add_argument("--snapshot", action="store_true")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--snapshot-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if args.child:
        child(args)
        return 0
    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error("unknown config %s; want some of %s"
                 % (", ".join(bad), ", ".join(CONFIGS)))
    if args.steps < 1 or args.threads < 1 or args.ddp < 0:
        ap.error("--steps and --threads must be positive, --ddp not "
                 "negative")
    if args.device == "cpu" and (args.graphs or args.snapshot):
        ap.error("--graphs and --snapshot need --device cuda")
    if "stalloc-plan" in configs and "stalloc-trace" not in configs \
            and not args.plan_file:
        configs.insert(configs.index("stalloc-plan"), "stalloc-trace")
    if args.device == "cpu":
        need = [os.path.join(args.build, f) for f in
                ("libstalloc-cpu.so", "stalloc-plan")]
        missing = [f for f in need if not os.path.exists(f)]
        if missing:
            ap.error("%s not built (make, or --build DIR)"
                     % ", ".join(missing))
    os.makedirs(args.out, exist_ok=True)
    if args.ddp and args.device == "cuda":
        have = cuda_devices()
        if have < args.ddp:
            why = ("--ddp %d needs %d CUDA devices, torch sees %d"
                   % (args.ddp, args.ddp, have))
            print("torch-e2e: SKIP: %s" % why)
            write_json(args, [], skipped=why)
            return 0
    name = tag(args)
    rk = "-r%r" if args.ddp else ""
    trace = os.path.join(args.out, "%s%s.trace" % (name, rk))
    plan = args.plan_file or os.path.join(args.out, "%s%s.plan" % (name, rk))
    results = []
    for cfg in configs:
        extra, env = [], {}
        if cfg == "expandable" and args.device == "cpu":
            res = {"config": cfg, "ok": True, "skipped":
                   "expandable segments are a setting of PyTorch's CUDA "
                   "caching allocator: no CPU meaning"}
            results.append(res)
            print("%-14s skipped: %s" % (cfg, res["skipped"]), flush=True)
            continue
        if cfg == "expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if cfg == "caching" and args.snapshot:
            extra += ["--snapshot-file", os.path.join(
                args.out, "%s%s.snapshot.pickle" % (name, rk))]
        if cfg == "stalloc-trace":
            extra += ["--trace", trace]
        if cfg == "stalloc-auto":
            extra += ["--trace", os.path.join(args.out, "%s-auto%s-%%p.trace"
                                              % (name, rk))]
        if cfg == "stalloc-trace" or cfg == "stalloc-auto":
            if args.device == "cpu":
                # the preload reads its settings when the process starts
                env["STALLOC_TRACE"] = extra[-1]
        planned = None
        if cfg == "stalloc-plan":
            err, planned = (None, None) if args.plan_file else \
                plan_traces(args, trace, plan)
            if err:
                results.append({"config": cfg, "ok": False, "error": err})
                print("%-14s FAILED: %s" % (cfg, err[-300:]), flush=True)
                continue
            extra += ["--plan", plan]
            if args.device == "cpu":
                env["STALLOC_PLAN"] = plan
        res = run_child(args, cfg, extra, env)
        if planned is not None:
            res["planner"] = planned[0] if not args.ddp else planned
        results.append(res)
        print("%-14s %s" % (cfg, "ok" if res["ok"] else
                            "FAILED: " + res.get("error", "")[-300:]),
              flush=True)
    report(args, results)
    return 0 if all(r["ok"] for r in results) else 1


def loss_diff(r, base):
    """Largest difference of @r's losses from @base's (rank by rank)."""
    if base is None:
        return None
    pairs = zip(r["ranks"], base["ranks"]) if "ranks" in r else [(r, base)]
    return max(abs(a - b) for x, y in pairs
               for a, b in zip(x["losses"], y["losses"]))


def report(args, results):
    base = next((r for r in results if r["config"] == "caching" and r["ok"]),
                None)
    cpu = args.device == "cpu"
    mib = 1 << 20
    w = 17 if args.ddp else 14  # "stalloc-trace/max"

    def fig(v):
        return "%8.0fMi" % (v / mib) if v is not None else "%10s" % "-"

    def row(name, r, over_ranks=False):
        """One line; @over_ranks: the largest figures over the ranks
        (no single last loss, no hit count)."""
        if cpu:
            s = r.get("stalloc")
            last = "%d/%d" % (s["plan_hits"], s["plan_misses"]) if s \
                else "-"
            used = r["rss_peak"]
        else:
            g = r.get("graphs")
            last = "-" if g is None else (
                "%d/%d bad" % (g["mismatches"], g["replays"])
                if g["captured"] else g.get("error", "?")[:60])
            used = r["device_used_peak"]
        loss = "%10s" % "-" if over_ranks else "%10.4f" % r["losses"][-1]
        dl = r.get("loss_max_diff")
        print("%-*s %s %s %s %9.2f %s %9.2g %s" % (
            w, name, fig(r["reserved_peak"]), fig(r["allocated_peak"]),
            fig(used), r["step_ms_median"], loss,
            float("nan") if dl is None else dl, "-" if over_ranks else last))

    if cpu:
        print("\n" + CPU_NOTE)
    print("\n%-*s %10s %10s %10s %9s %10s %9s %s" % (
        w, "allocator", "reserved", "allocated", "rss" if cpu else "dev-used",
        "step-ms", "loss", "dloss", "hits/miss" if cpu else "graphs"))
    for r in results:
        if r.get("skipped"):
            print("%-*s skipped: %s" % (w, r["config"], r["skipped"]))
            continue
        if not r["ok"]:
            print("%-*s FAILED" % (w, r["config"]))
            continue
        r["loss_max_diff"] = loss_diff(r, base)
        if "ranks" not in r:
            row(r["config"], r)
            continue
        for x, b in zip(r["ranks"], base["ranks"] if base else
                        [None] * len(r["ranks"])):
            x["loss_max_diff"] = loss_diff(x, b)
            row("%s/%d" % (r["config"], x["rank"]), x)
        row("%s/max" % r["config"], r, over_ranks=True)
    write_json(args, results)


def write_json(args, results, skipped=None):
    path = os.path.join(args.out, "torch-e2e-%s.json" % tag(args))
    out = {"args": vars(args), "results": results}
    if args.device == "cpu":
        out["note"] = CPU_NOTE
    if skipped:
        out["skipped"] = skipped
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("\nwritten: %s" % path)


if __name__ == "__main__":
    sys.exit(main())
