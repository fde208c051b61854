#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-cli.sh - stalloc-plan from the outside, as a user runs it
#
# Exit codes (0 planned, 1 invalid input, 2 usage), messages naming file and
# line, the JSON fields, and plans checked by tests/check-plan.py, which
# shares no code with the planner.  Prints TAP.  O: build dir; SHARED: the
# shared folder.
set -u
O=${O:-build}
SHARED=${SHARED:-../shared}
PLAN="$O/stalloc-plan"
W="$SHARED/workloads"
. tests/tap.sh

echo "1..20"
expect 0 "--help" "$PLAN" --help
expect 2 "no input" "$PLAN"
expect 2 "unknown option" "$PLAN" --frobnicate x
expect 2 "alignment not a power of two" "$PLAN" --align 3 "$W/cpu-torch/gpt-dense.trace"
expect 2 "a budget of zero" "$PLAN" --budget 0 "$W/cpu-torch/gpt-dense.trace"
expect 2 "a budget that is not a number" "$PLAN" --budget 1x \
	"$W/cpu-torch/gpt-dense.trace"
expect 2 "a negative time limit" "$PLAN" --time-limit -1 \
	"$W/cpu-torch/gpt-dense.trace"
expect 1 "missing file" "$PLAN" "$tmp/nope.trace"
printf 'stalloc-trace 1\na 1 1 8\nf 2 9\n' >"$tmp/bad.trace"
expect 1 "free of an unknown ID" "$PLAN" "$tmp/bad.trace"
grep -q "bad.trace:3:" "$tmp/err"
ok $? "the message names file and line"
printf 'id,lower,size\n1,0,4\n' >"$tmp/bad.csv"
expect 1 "CSV missing a column" "$PLAN" "$tmp/bad.csv"
grep -q "bad.csv" "$tmp/err"
ok $? "the CSV message names the file"

expect 0 "plan the dense trace as JSON" "$PLAN" --json -o "$tmp/d.plan" \
	--emit-csv "$tmp/d.csv" "$W/cpu-torch/gpt-dense.trace"
python3 - "$tmp/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
need = ["requests", "lower_bound", "peak", "gap", "plan_ms", "iterations",
        "static_requests", "dynamic_requests", "persistent_bytes",
        "reusable_bytes", "budget_ms", "work_ms", "budget_used",
        "time_limit_hit", "trace_peak", "live_peak", "align_bytes",
        "model_bytes"]
missing = [k for k in need if k not in j]
assert not missing, missing
assert j["iterations"] == 4 and j["dynamic_requests"] == 0
assert j["peak"] >= j["lower_bound"] > 0
assert j["budget_ms"] == 1000 and 0 < j["work_ms"] <= 1000
assert j["time_limit_hit"] is False
assert j["lower_bound"] == (j["live_peak"] + j["align_bytes"] +
                            j["model_bytes"])
PY
ok $? "JSON has every field, 4 iterations, no dynamic request"
head -n 1 "$tmp/d.plan" | grep -q "^stalloc-plan 2$"
ok $? "-o writes a plan file"
python3 tests/check-plan.py "$tmp/d.csv" >"$tmp/chk"
ok $? "the dense plan passes the independent overlap check"

expect 0 "plan the MoE trace" "$PLAN" --emit-csv "$tmp/m.csv" \
	"$W/cpu-torch/gpt-moe.trace"
python3 tests/check-plan.py "$tmp/m.csv" >"$tmp/chk"
ok $? "the MoE plan passes the independent overlap check"
expect 0 "plan a CSV problem" "$PLAN" --emit-csv "$tmp/r.csv" \
	"$W/idealloc/resnet50.csv"
python3 tests/check-plan.py "$tmp/r.csv" >"$tmp/chk"
ok $? "the CSV plan passes the independent overlap check"
# -o naming a FIFO (or a device such as /dev/null): written into, never
# renamed over -- the FIFO is still one, and its reader got the plan
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/from-fifo" &
reader=$!
"$PLAN" -o "$tmp/fifo" "$W/cpu-torch/gpt-dense.trace" >/dev/null
rc=$?
wait $reader
[ "$rc" = 0 ] && [ -p "$tmp/fifo" ] && grep -q '^checksum ' "$tmp/from-fifo"
ok $? "-o a FIFO writes into it and leaves it a FIFO"
[ "$fails" = 0 ]
