#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/replay.sh - stalloc-replay on the shared traces, and its bad inputs
#
# Every shared cpu-torch trace is replayed under every policy.  The address
# log is checked by a script written here (replaying the trace's frees,
# sorting the live blocks), independent of the tool's own interval tree;
# the script is first shown to catch a planted overlap.  stalloc must hit
# its plan and hold less than the caching model.  Prints TAP.
set -u
O=${O:-build}
SHARED=${SHARED:-../shared}
R=$O/stalloc-replay
. tests/tap.sh

traces=$(ls "$SHARED"/workloads/cpu-torch/*.trace)
nt=$(echo "$traces" | wc -l)
echo "1..$((nt * 13 + 21))"

# check-log TRACE LOG: every allocation served once, in order, with its
# size, and no two live blocks overlapping.
cat >"$tmp/check.py" <<'PY'
import sys
trace, log = sys.argv[1:]
entries = [l.split() for l in open(log)]
live, pos, n = {}, 0, 0
for line in open(trace):
    f = line.split()
    if not f or f[0] not in ("a", "f"):
        continue
    if f[0] == "a":
        lid, addr, size = entries[pos]
        pos += 1
        assert lid == f[2] and int(size) == int(f[3]), (lid, f)
        assert addr != "-", "allocation %s failed" % lid
        live[f[2]] = (int(addr, 16), int(size))
        n += 1
    else:
        live.pop(f[2], None)
        continue
    blocks = sorted(live.values())
    a = live[f[2]]
    i = blocks.index(a)
    for nb in blocks[max(0, i - 1):i + 2]:
        if nb is a or nb == a and blocks.count(a) == 1:
            continue
        assert nb[0] + nb[1] <= a[0] or a[0] + a[1] <= nb[0], \
            "overlap at allocation %s: %r %r" % (f[2], a, nb)
assert pos == len(entries), (pos, len(entries))
assert n > 0
print("checked %d allocations" % n)
PY

field() { # field JSON NAME
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

for t in $traces; do
	name=$(basename "$t" .trace)
	for p in stalloc off caching expandable; do
		out=$("$R" --policy $p --json --stamp \
			--addr-log "$tmp/$name.$p.log" "$t")
		rc=$?
		echo "$out" >"$tmp/$name.$p.json"
		[ $rc = 0 ] && [ "$(field "$out" overlaps)" = 0 ] &&
			[ "$(field "$out" failed_allocs)" = 0 ] &&
			[ "$(field "$out" lost_allocs)" = 0 ]
		ok $? "$name/$p: replayed, no overlap, no failure, no lost" \
			"byte (exit $rc)"
		python3 "$tmp/check.py" "$t" "$tmp/$name.$p.log" >/dev/null
		ok $? "$name/$p: address log checked independently"
	done
	s=$(cat "$tmp/$name.stalloc.json")
	c=$(cat "$tmp/$name.caching.json")
	[ "$(field "$s" plan_hits)" -gt 0 ] &&
		[ "$(field "$s" plan_dropped)" = False ]
	ok $? "$name: stalloc hits its plan ($(field "$s" plan_hits) hits)"
	[ "$(field "$s" peak_requested_bytes)" = \
		"$(field "$c" peak_requested_bytes)" ]
	ok $? "$name: every policy measured against the same requested peak"
	# a planted overlap: the second allocation at the first's address
	awk 'NR == 1 { a = $2 } NR == 2 { $2 = a } { print }' \
		"$tmp/$name.caching.log" >"$tmp/bad.log"
	python3 "$tmp/check.py" "$t" "$tmp/bad.log" >/dev/null 2>&1
	[ $? != 0 ]
	ok $? "$name: the log checker catches a planted overlap"
	l=$("$R" --json --cache-limit 16M "$t")
	[ "$(field "$l" peak_reserved_bytes)" -lt \
		"$(field "$c" peak_reserved_bytes)" ]
	ok $? "$name: stalloc (cache limit 16M) reserves less than caching" \
		"($(field "$l" peak_reserved_bytes) < $(field "$c" peak_reserved_bytes))"
	[ "$(field "$s" peak_reserved_bytes)" -lt \
		"$(field "$c" peak_reserved_bytes)" ]
	ok $? "$name: stalloc (runtime defaults) reserves less than caching" \
		"($(field "$s" peak_reserved_bytes) < $(field "$c" peak_reserved_bytes))"
done

dense=$SHARED/workloads/cpu-torch/gpt-dense.trace
moe=$SHARED/workloads/cpu-torch/gpt-moe.trace

# --stamp catches memory shared or unmapped while live (planted faults)
"$R" --stamp-clobber share:5 --policy off "$dense" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "allocation 4 .*lost its bytes.*allocation 5 wrote" \
	"$tmp/err"
ok $? "--stamp: a planted write of a later allocation: exit 1, both named"
"$R" --stamp-clobber unmap:5 --policy off "$dense" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "allocation 4 .*unmapped while live" "$tmp/err"
ok $? "--stamp: a planted unmap under a live allocation: exit 1, named"
# an MoE rank planned from another routing seed lends the pool's idle
# chunks to the dynamic region and maps them back all along
L="--layers 4 --hidden 1024 --heads 8 --seq 2048 --micro-batches 4
--stages 1 --recompute full --tp 2 --experts 8 --top-k 1 --imbalance 3
--moe-every 2"
# shellcheck disable=SC2086 # L is a list of options
"$O/stalloc-synth" $L --seed 21 -o "$tmp/l21.trace" &&
	"$O/stalloc-synth" $L --seed 56 -o "$tmp/l56.trace" &&
	"$O/stalloc-plan" -o "$tmp/l21.plan" "$tmp/l21.trace" >/dev/null &&
	j=$("$R" --stamp --json --plan "$tmp/l21.plan" "$tmp/l56.trace" \
		2>/dev/null) &&
	o=$("$R" --stamp --json --policy off "$tmp/l56.trace") &&
	[ "$(field "$j" lost_allocs)" = 0 ] &&
	[ "$(field "$j" driver_calls)" -gt \
		$((4 * $(field "$o" driver_calls))) ]
ok $? "--stamp: MoE lending the pool ($(field "$j" driver_calls) driver" \
	"calls, off mode $(field "$o" driver_calls)): no allocation lost a byte"
"$O/stalloc-plan" -o "$tmp/moe.plan" "$moe" >/dev/null
ok $? "planned gpt-moe"

"$R" --policy nonsense "$dense" >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "unknown policy" "$tmp/err"
ok $? "unknown policy: exit 2, named"
"$R" "$tmp/missing.trace" >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "missing.trace" "$tmp/err"
ok $? "missing trace: exit 2, named"
printf 'stalloc-trace 1\na 0 1 4096\nf 1 1\nf 2 7\n' >"$tmp/bad.trace"
"$R" --policy caching "$tmp/bad.trace" >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "bad.trace:4" "$tmp/err"
ok $? "malformed trace: exit 2, file and line named"
"$R" --plan "$tmp/moe.plan" --json "$dense" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && grep -q "does not fit" "$tmp/err" &&
	[ "$(field "$(cat "$tmp/out")" plan_dropped)" = True ]
ok $? "plan of the other trace: reported, exit 2"
"$R" --plan "$tmp/missing.plan" "$dense" >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "missing.plan" "$tmp/err"
ok $? "missing plan: exit 2, named"
head -c 200 "$tmp/moe.plan" >"$tmp/cut.plan"
"$R" --plan "$tmp/cut.plan" "$moe" >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "cut.plan" "$tmp/err"
ok $? "truncated plan: exit 2, named"
"$R" --policy caching --plan "$tmp/moe.plan" "$moe" >/dev/null 2>&1
[ $? = 2 ]
ok $? "--plan with a model: usage, exit 2"
"$R" >/dev/null 2>&1
[ $? = 2 ]
ok $? "no trace: usage, exit 2"
"$R" --policy caching --capacity 64M "$dense" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "failed" "$tmp/err"
ok $? "caching model out of memory (--capacity 64M): exit 1"

# --policy auto: traced, planned at the fourth marker, switched there
auto=$(TMPDIR="$tmp" STALLOC_AUTO_ITERS=3 STALLOC_AUTO_CHECK=0 "$R" \
	--policy auto --json "$dense")
rc=$?
[ $rc = 0 ] && [ "$(field "$auto" policy)" = auto ] &&
	[ "$(field "$auto" plan_hits)" -gt 0 ] &&
	[ "$(field "$auto" overlaps)" = 0 ]
ok $? "auto: switched to its plan in-process ($(field "$auto" plan_hits) hits)"
# checked as auto mode uses it (the hand-over too): never above off mode
off=$(cat "$tmp/gpt-dense.off.json")
auto=$(TMPDIR="$tmp" STALLOC_AUTO_ITERS=3 "$R" --policy auto --json "$dense" \
	2>/dev/null)
[ $? = 0 ] && [ "$(field "$auto" peak_reserved_bytes)" -le \
	$(($(field "$off" peak_reserved_bytes) + 2097152)) ]
ok $? "auto, checked: at most off mode plus a chunk" \
	"($(field "$auto" peak_reserved_bytes) vs $(field "$off" peak_reserved_bytes))"
! ls -d "$tmp"/stalloc-replay-auto-* 2>/dev/null | grep -q .
ok $? "auto: its trace and plan are removed"
"$O/stalloc-plan" -o "$tmp/dense.plan" "$dense" >/dev/null
j=$(TMPDIR="$tmp" "$R" --policy auto --plan "$tmp/dense.plan" --json "$dense")
[ $? = 0 ] && [ "$(field "$j" plan_hits)" -gt 0 ] &&
	[ "$(field "$j" plan_hits)" -lt "$(field "$s" plan_hits)" ]
ok $? "auto --plan: switched to the given plan at the second-to-last marker" \
	"($(field "$j" plan_hits) hits)"
awk '$1 == "m" && $NF == "iteration" { n++ } n < 3' "$dense" >"$tmp/two.trace"
"$R" --policy auto --plan "$tmp/dense.plan" "$tmp/two.trace" >/dev/null \
	2>"$tmp/err"
[ $? = 2 ] && grep -q "3 iteration markers" "$tmp/err"
ok $? "auto --plan on a trace of two iterations: exit 2, said"
STALLOC_AUTO_ITERS=2 "$R" --policy auto "$dense" >/dev/null 2>"$tmp/err"
[ $? != 0 ] && grep -q "STALLOC_AUTO_ITERS=2: auto mode plans from 3" \
	"$tmp/err"
ok $? "auto mode tracing 2 iterations without a given plan: refused, said"

"$R" --policy off --hold "$dense" >"$tmp/hold" 2>&1 &
pid=$!
i=0
while ! grep -q "holding, pid $pid" "$tmp/hold" && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
grep -q "holding, pid $pid" "$tmp/hold" && kill -0 $pid
ok $? "--hold: prints its pid and stays alive"
kill -TERM $pid
wait $pid
ok $? "--hold: SIGTERM ends it, exit 0"
[ "$fails" = 0 ]
