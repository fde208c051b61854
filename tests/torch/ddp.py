# SPDX-License-Identifier: MIT
"""tests/torch/ddp.py - one rank of a data-parallel training on the CPU

The workload of the data-parallel test (tests/torch/run_ddp.py): the GPT of
tests/torch/gpt.py wrapped in DistributedDataParallel, gloo backend, Adam,
a batch of its own per rank and step.  The training loop has no stalloc
marker: with --stalloc the script's only edit is one stalloc.enable() call
at the top (under LD_PRELOAD=libstalloc-cpu.so it marks the optimizer
steps).  Rank and world come from the environment as torchrun sets them
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Output: one line "loss STEP HEX" per step (float.hex()), then "ok".
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import BATCH, GPT, SEQ, VOCAB  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--stalloc", action="store_true",
                    help="call stalloc.enable() first")
    args = ap.parse_args()

    if args.stalloc:
        import stalloc
        stalloc.enable()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1234)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    net = GPT(moe=False)
    # gloo cannot broadcast the attention masks (bool); every rank builds
    # the same ones
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        net, [n for n, b in net.named_buffers() if b.dtype == torch.bool])
    model = DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        gen = torch.Generator().manual_seed(1000 + step * world + rank)
        batch = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
        x, y = batch[:, :-1], batch[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        print("loss %d %s" % (step, loss.item().hex()), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
