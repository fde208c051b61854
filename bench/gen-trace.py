#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a synthetic training trace (format v1) of about N events.

Weights and optimizer state first (never freed), then iterations: a forward
pass over L layers that saves activations and frees temporaries, a backward
pass that frees the saved activations in reverse and allocates gradients,
which the next iteration's zero_grad frees.  Deterministic for a seed.
Usage: gen-trace.py EVENTS OUT [SEED]
"""
import random
import sys


def main():
    target, out = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    iters = 5
    per_iter = target // iters
    # one layer issues 12 events per iteration; pick L to hit the target
    layers = max(1, per_iter // 12)
    sizes = [rng.choice([1, 2, 3, 4, 6, 8, 12, 16]) << rng.randint(12, 20)
             for _ in range(layers * 3)]
    lines = ["stalloc-trace 1\n"]
    seq = 0
    nid = 0

    def alloc(size):
        nonlocal seq, nid
        lines.append(f"a {seq} {nid} {size}\n")
        seq += 1
        nid += 1
        return nid - 1

    def free(i):
        nonlocal seq
        lines.append(f"f {seq} {i}\n")
        seq += 1

    for layer in range(layers):
        alloc(sizes[3 * layer] * 2)  # weights: never freed
    grads = []
    for it in range(iters):
        lines.append(f"m {seq} iteration\n")
        seq += 1
        for g in grads:  # zero_grad
            free(g)
        grads = []
        saved = []
        for layer in range(layers):
            a, b, c = sizes[3 * layer:3 * layer + 3]
            t1 = alloc(a)
            t2 = alloc(b)
            free(t1)
            s = alloc(c)
            free(t2)
            saved.append(s)
        for layer in reversed(range(layers)):
            a, b, c = sizes[3 * layer:3 * layer + 3]
            g = alloc(a)
            t = alloc(b)
            free(t)
            free(saved.pop())
            grads.append(alloc(sizes[3 * layer] * 2))
            free(g)
    with open(out, "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
