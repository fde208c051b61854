#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate instances in the style of MiniMalloc's "challenging" suite.

The square [0, 2^20) of time x [0, 2^20) of address, in units of 1024, is
cut recursively (guillotine cuts: always the rectangle with the largest
area, across its longer side with probability 3/4, at a uniformly random
unit boundary) into about BUFFERS / (1 - DROP) rectangles; a fraction DROP
of them is then removed at random.  Every rectangle is a buffer (lifetime
= its time extent, size = its address extent), so a packing at the
capacity 2^20 exists (the cut itself), while the lower bound LOAD may be
lower.  Like the published suite: 150 to 450 buffers, sizes and lifetimes
multiples of 1024, a few buffers living almost throughout, fill 60-97%.

Usage: gen-challenging.py [--seed N] [--buffers N] [--drop F] OUT.csv
(name OUT NAME.1048576.csv so that stalloc-plan takes the capacity).
"""
import argparse
import random
import sys

UNIT = 1024
SIDE = 1 << 20


def cut(rng, n):
    rects = [(0, SIDE, 0, SIDE)]  # t0, t1, a0, a1
    while len(rects) < n:
        rects.sort(key=lambda r: (r[1] - r[0]) * (r[3] - r[2]))
        t0, t1, a0, a1 = rects.pop()
        wt, wa = (t1 - t0) // UNIT, (a1 - a0) // UNIT
        if wt < 2 and wa < 2:
            rects.append((t0, t1, a0, a1))
            break
        along_t = wt >= wa
        if rng.random() < 0.25:
            along_t = not along_t
        if along_t and wt < 2 or not along_t and wa < 2:
            along_t = not along_t
        if along_t:
            m = t0 + UNIT * rng.randrange(1, wt)
            rects += [(t0, m, a0, a1), (m, t1, a0, a1)]
        else:
            m = a0 + UNIT * rng.randrange(1, wa)
            rects += [(t0, t1, a0, m), (t0, t1, m, a1)]
    return rects


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--buffers", type=int, default=300)
    ap.add_argument("--drop", type=float, default=0.1)
    ap.add_argument("out")
    a = ap.parse_args()
    if a.buffers < 1 or not 0 <= a.drop < 1:
        sys.exit("gen-challenging.py: --buffers >= 1, 0 <= --drop < 1")
    rng = random.Random(a.seed)
    rects = cut(rng, int(round(a.buffers / (1 - a.drop))))
    rng.shuffle(rects)
    rects = rects[:a.buffers]
    with open(a.out, "w") as f:
        f.write("id,lower,upper,size\n")
        for i, (t0, t1, a0, a1) in enumerate(rects):
            f.write(f"{i},{t0},{t1},{a1 - a0}\n")


if __name__ == "__main__":
    main()
