#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw a plan's buffers in the time x address plane, as SVG.

Input: the CSV of stalloc-plan --emit-csv (id,lower,upper,size,offset).
Used to make the picture in Documentation/planner.rst:
  build/stalloc-plan --emit-csv /tmp/d.csv gpt-dense.trace
  Documentation/images/plan-svg.py /tmp/d.csv > plan-gpt-dense.svg
"""
import csv
import sys

W, H, PAD = 760, 360, 40


def main():
    rows = [tuple(int(r[k]) for k in ("lower", "upper", "size", "offset"))
            for r in csv.DictReader(open(sys.argv[1]))]
    tmax = max(r[1] for r in rows)
    amax = max(r[2] + r[3] for r in rows)
    sx = (W - 2 * PAD) / tmax
    sy = (H - 2 * PAD) / amax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" '
           f'height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for i, (lo, up, size, off) in enumerate(rows):
        hue = (i * 47) % 360
        out.append(f'<rect x="{PAD + lo * sx:.1f}" '
                   f'y="{H - PAD - (off + size) * sy:.1f}" '
                   f'width="{max((up - lo) * sx, 0.5):.1f}" '
                   f'height="{max(size * sy, 0.5):.1f}" '
                   f'fill="hsl({hue},60%,70%)" stroke="hsl({hue},60%,40%)" '
                   f'stroke-width="0.3"/>')
    out.append(f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" '
               f'y2="{H - PAD}" stroke="black"/>')
    out.append(f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" '
               f'stroke="black"/>')
    out.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle">'
               f'time (SEQ within the iteration, 0..{tmax})</text>')
    out.append(f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})"'
               f' text-anchor="middle">address (pool of '
               f'{amax / 2**20:.1f} MiB)</text>')
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
