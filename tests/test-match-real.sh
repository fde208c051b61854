#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-match-real.sh - the matcher on a real recording: the H100
# MoE trace of bench/results/2026-11-24-h100 (30 steps, PyTorch's own
# loop), planned from its first 15 steps as bench-suite does and replayed
# whole.  In step 13 the routing left two experts idle whose blocks the
# plan has static after a run of dynamic positions; the run's positions
# took the requests of the block after it (they take any size), and the
# job was past that block, and more than MATCH_AHEAD positions past the
# cursor, when the cursor reached it: every later request of the step --
# 1,300, 500 MB tensors among them -- was served at the run's last
# position, outside the plan.  The last requests were that block's sizes,
# so the job is after it (past_twin(), mapper/match.c): those requests are
# now planned hits.  In steps 18 and 22 the job left a run for a stretch
# of the plan further on, and the last 1,000 requests of each were served
# at the run's end: once 32 have been, the last twelve requests' sizes
# find where the job is (resync_ahead()).  Prints TAP.
set -u
O=${O:-build}
T=bench/results/2026-11-24-h100/moe.trace.gz
. tests/tap.sh

gzip -dc "$T" >"$tmp/moe.trace" || exit 1
m=$(grep -n '^m .* iteration$' "$tmp/moe.trace" | sed -n 16p | cut -d: -f1)
head -n $((m - 1)) "$tmp/moe.trace" >"$tmp/plan.trace"

"$O/stalloc-plan" -o "$tmp/moe.plan" "$tmp/plan.trace" >"$tmp/plan.out" 2>&1
ok $? "the first 15 steps planned"

"$O/stalloc-replay" --json --plan "$tmp/moe.plan" "$tmp/moe.trace" \
	>"$tmp/replay.json" 2>"$tmp/replay.err"
ok $? "the recording replayed with the plan"

# field KEY: one number from the replay's JSON
field() {
	python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$tmp/replay.json" "$1"
}

hits=$(field plan_hits)
misses=$(field plan_misses)
# 14,947 hits before past_twin(): a step's last 1,300 requests unplanned;
# 15,135 before resync_ahead(): two later steps' last 1,000 each
[ "$hits" -ge 15800 ]
ok $? "plan hits $hits >= 15,800 (misses $misses)"
[ $((misses * 20)) -le $((hits + misses)) ]
ok $? "plan misses $misses <= 5% of $((hits + misses)) planned requests"
off=$("$O/stalloc-replay" --json --policy off "$tmp/moe.trace" |
	python3 -c 'import json, sys
print(json.load(sys.stdin)["peak_reserved_bytes"])')
res=$(field peak_reserved_bytes)
[ "$res" -lt "$off" ]
ok $? "reserved $res bytes, under off mode's $off"
echo "1..$n"
[ "$fails" = 0 ]
