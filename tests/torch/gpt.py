# SPDX-License-Identifier: MIT
"""tests/torch/gpt.py - a small deterministic GPT trained on the CPU

The workload of the CPU end-to-end test (tests/torch/run_test.py): a
GPT-like model (token and position embeddings, pre-norm blocks of causal
self-attention and an MLP, a tied-free output head), trained with Adam on
fixed random tokens.  --moe replaces each MLP by top-2 routing over experts,
so the expert buffers change size every iteration (dynamic requests) while
their total stays constant.

Everything is seeded, the thread count is fixed (--threads, default 1:
OpenMP threads spin, which costs much on a loaded CI machine) and deterministic
algorithms are on: two runs print the same losses bit for bit, whatever
allocator serves the tensors.  Each iteration starts with
stalloc_mark("iteration") when libstalloc is in the process (LD_PRELOAD of
libstalloc-cpu.so: ctypes.CDLL(None) finds the preloaded symbols).

Output: one line "loss ITER HEX" per iteration (float.hex()), then "ok".
--fork: after training, a forked child writes into every parameter and
allocates and frees tensors; the parent checks its parameters did not
change.  --threads: tensors allocated on one thread and freed on another.
"""
import argparse
import ctypes
import os
import sys
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 1000
HIDDEN = 128
HEADS = 4
LAYERS = 4
SEQ = 64
BATCH = 4
EXPERTS = 4


def stalloc_mark():
    """The preloaded library's stalloc_mark, or None without it."""
    try:
        fn = ctypes.CDLL(None).stalloc_mark
    except AttributeError:
        return None
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = None
    return fn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(HIDDEN, dim=2)
        shape = (b, t, HEADS, c // HEADS)
        q = q.reshape(shape).transpose(1, 2)
        k = k.reshape(shape).transpose(1, 2)
        v = v.reshape(shape).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / (c // HEADS) ** 0.5
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        y = att.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Top-2 routing: each expert sees a different number of tokens."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(HIDDEN, EXPERTS)
        self.experts = nn.ModuleList(MLP() for _ in range(EXPERTS))

    def forward(self, x):
        b, t, c = x.shape
        flat = x.reshape(b * t, c)
        weight, which = self.gate(flat).softmax(dim=-1).topk(2, dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            tok, slot = (which == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = expert(flat[tok]) * weight[tok, slot].unsqueeze(1)
            out = out.index_add(0, tok, y)
        return out.reshape(b, t, c)


class Block(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(HIDDEN)
        self.mlp = MoE() if moe else MLP()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(SEQ, HIDDEN)
        self.blocks = nn.ModuleList(Block(moe) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def fork_check(model):
    """A forked child scribbles on every parameter; the parent must not
    see it."""
    before = [p.detach().clone() for p in model.parameters()]
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            # GNU OpenMP's thread pool does not survive fork: a parallel
            # region in the child would wait for the parent's threads
            torch.set_num_threads(1)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
                junk = [torch.ones(4096) for _ in range(16)]
                del junk
                model.zero_grad(set_to_none=True)
        except BaseException:  # any failure in the child is reported
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    same = all(torch.equal(a, p.detach())
               for a, p in zip(before, model.parameters()))
    print("fork child exit %d, parent parameters %s" %
          (os.waitstatus_to_exitcode(status),
           "unchanged" if same else "CHANGED"))
    return same and status == 0


def threads_check():
    """Allocate on worker threads, free on this one, and the other way."""
    made = []

    def alloc():
        made.extend(torch.full((4096,), 3.0) for _ in range(64))

    workers = [threading.Thread(target=alloc) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    ok = len(made) == 128 and all(float(m.sum()) == 3.0 * 4096 for m in made)
    mine = [torch.full((4096,), 5.0) for _ in range(64)]
    freer = threading.Thread(target=mine.clear)
    freer.start()
    freer.join()
    made.clear()
    print("threads: %s" % ("ok" if ok and not mine else "FAILED"))
    return ok and not mine


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moe", action="store_true")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (fixed)")
    ap.add_argument("--fork", action="store_true")
    ap.add_argument("--thread-check", action="store_true")
    ap.add_argument("--no-mark", action="store_true",
                    help="never call stalloc_mark")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1234)
    mark = None if args.no_mark else stalloc_mark()
    model = GPT(args.moe)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    for it in range(args.iters):
        if mark:
            mark(b"iteration")
        opt.zero_grad(set_to_none=True)
        # each iteration's batch from its own seed: a run of N iterations
        # sees the same first batches as a longer one
        gen = torch.Generator().manual_seed(1000 + it)
        batch = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
        x, y = batch[:, :-1], batch[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        print("loss %d %s" % (it, loss.item().hex()), flush=True)

    ok = True
    if args.fork:
        ok = fork_check(model) and ok
    if args.thread_check:
        ok = threads_check() and ok
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
