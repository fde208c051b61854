#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-timeline.sh - stalloc-timeline on every shared trace
#
# Each picture must be well-formed XML with the expected panels: the
# stacked classes (four paths), one dashed line per iteration marker, the
# lower-bound line, and with --plan the planned-pool line and one rectangle
# per planned buffer (as many as stalloc-plan --emit-csv lists).  Prints TAP.
set -u
O=${O:-build}
SHARED=${SHARED:-../shared}
. tests/tap.sh

traces=$(ls "$SHARED"/workloads/cpu-torch/*.trace)
echo "1..$(($(echo "$traces" | wc -l) * 3 + 3))"
for t in $traces; do
	name=$(basename "$t" .trace)
	"$O/stalloc-plan" -o "$tmp/$name.plan" --emit-csv "$tmp/$name.csv" \
		"$t" >/dev/null &&
		"$O/stalloc-timeline" -o "$tmp/$name.svg" --plan \
			"$tmp/$name.plan" "$t"
	ok $? "$name: planned and drawn"
	python3 - "$tmp/$name.svg" "$t" "$tmp/$name.csv" <<'PY'
import sys, xml.etree.ElementTree as ET
svg, trace, plan_csv = sys.argv[1:]
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(svg).getroot()              # well-formed XML
def group(cls):
    g = [e for e in root.iter("{http://www.w3.org/2000/svg}g")
         if e.get("class") == cls]
    assert len(g) == 1, (cls, len(g))
    return g[0]
paths = group("stacks").findall("s:path", ns)
assert [p.get("class") for p in paths] == ["class-persistent",
    "class-static", "class-dynamic", "class-unclassified"], paths
marks = sum(1 for l in open(trace) if l.split()[:1] == ["m"] and
            l.split()[2] == "iteration")
assert len(group("iterations").findall("s:line", ns)) == marks
group("lower-bound"); group("planned-peak")
rects = len(group("plan").findall("s:rect", ns))
rows = sum(1 for _ in open(plan_csv)) - 1
assert rects == rows, (rects, rows)
PY
	ok $? "$name: XML with the expected panels and element counts"
	size=$(wc -c <"$tmp/$name.svg")
	[ "$size" -lt 5000000 ]
	ok $? "$name: under 5 MB ($size bytes)"
done
"$O/stalloc-timeline" >/dev/null 2>&1
[ $? = 2 ]
ok $? "no trace: usage, exit 2"
"$O/stalloc-timeline" -o "$tmp/x.svg" "$tmp/missing.trace" 2>/dev/null
[ $? = 1 ]
ok $? "missing trace: exit 1"
"$O/stalloc-timeline" -o /nonexistent/x.svg \
	"$SHARED/workloads/cpu-torch/gpt-dense.trace" 2>/dev/null
[ $? = 1 ]
ok $? "unwritable output: exit 1"
[ "$fails" = 0 ]
