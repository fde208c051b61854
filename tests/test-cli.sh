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

echo "1..46"
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
head -n 1 "$tmp/d.plan" | grep -q "^stalloc-plan 6$"
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
"$PLAN" -o "$tmp/fifo" "$W/cpu-torch/gpt-dense.trace" >/dev/null \
	2>"$tmp/err"
rc=$?
# a planner that failed before opening the FIFO leaves the reader waiting
[ "$rc" = 0 ] || kill $reader 2>/dev/null
wait $reader
[ "$rc" = 0 ] && [ -p "$tmp/fifo" ] && grep -q '^checksum ' "$tmp/from-fifo" &&
	grep -q "not checked: .*fifo is not a regular file" "$tmp/err"
ok $? "-o a FIFO writes into it, leaves it a FIFO, and does not check"

# The check: the trace replayed with the plan and in off mode.  The real
# replay first, then a stand-in that reports what a test wants.
expect 0 "plan the dense trace as JSON, checked" "$PLAN" --json \
	-o "$tmp/d.plan" "$W/cpu-torch/gpt-dense.trace"
python3 - "$tmp/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["check"] == "pass", j["check"]
assert 0 < j["check_planned"] <= j["check_off"] + (2 << 20), j
assert j["check_ms"] > 0
# replayed under the fallback too, which did not do as well on both
assert j["check_fallback"] > 0, j
assert (j["check_fallback"] > j["check_planned"] or
        j["check_fallback_calls"] > j["check_planned_calls"]), j
PY
ok $? "the dense plan passes its check (JSON: planned within a chunk of off, the fallback no better)"
grep -q "^check pass [0-9]* [0-9]* [0-9]* [0-9]*$" "$tmp/d.plan"
ok $? "the plan file records the check"
expect 0 "--no-check" "$PLAN" --no-check -o "$tmp/n.plan" \
	"$W/cpu-torch/gpt-dense.trace"
grep -q "^check none 0 0 0 0$" "$tmp/n.plan"
ok $? "--no-check leaves the plan unchecked"
expect 2 "a granularity that is not a power of two" "$PLAN" \
	--granularity 3M "$W/cpu-torch/gpt-dense.trace"
cat >"$tmp/fake-replay" <<'SH'
#!/bin/sh
# stands in for stalloc-replay: plan mode reserves FAKE_PLANNED with
# FAKE_CALLS driver calls in the last iteration (else 0), off mode
# FAKE_OFF, the expandable-segments model FAKE_EXP (else FAKE_OFF), a plan
# marked rejected (the fallback) FAKE_FALLBACK (else FAKE_OFF) with
# FAKE_FB_CALLS calls (else 100); no last iteration's calls with
# FAKE_NO_ITER; fails on FAKE_FAIL or on any STALLOC_* variable
pol= plan= calls=${FAKE_CALLS:-0}
while [ $# -gt 0 ]; do
	[ "$1" = --policy ] && pol=$2
	[ "$1" = --plan ] && plan=$2
	shift
done
if env | grep -v '^STALLOC_CTL=0$' | grep -q '^STALLOC_\|^LD_PRELOAD='; then
	echo "the caller's environment leaked" >&2
	exit 3
fi
if [ -n "${FAKE_FAIL:-}" ]; then
	echo "replay broke" >&2
	exit 1
fi
[ "$pol" = stalloc ] && r=$FAKE_PLANNED || r=$FAKE_OFF
[ "$pol" = expandable ] && r=${FAKE_EXP:-$FAKE_OFF}
if [ "$pol" = stalloc ] && grep -q '^check reject ' "$plan"; then
	r=${FAKE_FALLBACK:-$FAKE_OFF}
	calls=${FAKE_FB_CALLS:-100}
fi
if [ "$pol" = stalloc ] && [ -n "${FAKE_DROP:-}" ]; then
	# as stalloc-replay does: the report, then exit 2
	echo "{\"peak_reserved_bytes\": $r, \"driver_calls\": $calls, \"iteration_driver_calls\": $calls, \"plan_misses\": 7, \"plan_dropped\": true}"
	exit 2
fi
it=$calls
[ -n "${FAKE_NO_ITER:-}" ] && it=null
echo "{\"peak_reserved_bytes\": $r, \"driver_calls\": $calls, \"iteration_driver_calls\": $it, \"plan_misses\": 7, \"plan_dropped\": false}"
SH
chmod +x "$tmp/fake-replay"
fake() {
	env STALLOC_REPLAY="$tmp/fake-replay" STALLOC_LOG=debug \
		LD_PRELOAD= "$@"
}
expect 0 "a plan one chunk and a byte above off mode" \
	fake env FAKE_PLANNED=102760449 FAKE_OFF=100663296 \
	"$PLAN" -o "$tmp/r.plan" "$W/cpu-torch/gpt-dense.trace"

grep -q "^check reject 102760449 100663296 100663296 0$" "$tmp/r.plan" &&
	grep -q "rejected, the runtime will run its fallback" "$tmp/out"
ok $? "is rejected (and no STALLOC_* variable reached the replays)"
expect 0 "a plan exactly one chunk above off mode" \
	fake env FAKE_PLANNED=102760448 FAKE_OFF=100663296 FAKE_EXP=99614720 \
	"$PLAN" -o "$tmp/p.plan" "$W/cpu-torch/gpt-dense.trace"
grep -q "^check pass 102760448 100663296 99614720 100663296$" "$tmp/p.plan"
ok $? "passes, with the least online peak (expandable segments' here)"
# the fallback for a rejected plan (off mode giving free memory back) is
# what the job gets without the plan: a plan it does better than, in
# memory and in the last iteration's driver calls, does not pay for itself
# fb_case FALLBACK CALLS FB_CALLS STATE WHAT: the dense trace planned with
# the fake replays (plan and off mode at 96 MiB), the file's verdict STATE
fb_case() {
	fake env FAKE_PLANNED=100663296 FAKE_OFF=100663296 FAKE_FALLBACK=$1 \
		FAKE_CALLS=$2 FAKE_FB_CALLS=$3 "$PLAN" -o "$tmp/fb.plan" \
		"$W/cpu-torch/gpt-dense.trace" >"$tmp/out" 2>"$tmp/err" &&
		grep -q "^check $4 100663296 100663296 100663296 $1$" \
			"$tmp/fb.plan"
	ok $? "$5"
}
fb_case 100663296 90 60 reject \
	"the fallback reserves as much with fewer calls: rejected, its peak recorded"
grep -q "60 driver calls in the last iteration against the plan's 90: it does better" "$tmp/out"
ok $? "and stalloc-plan says why"
fb_case 98566144 0 60 pass \
	"the fallback reserves less with calls the plan does not make: passes"
fb_case 98566144 17 600 reject \
	"a plan past the steady budget (16) whose fallback reserves less: rejected"
STALLOC_STEADY_CALLS=17 fb_case 98566144 17 600 pass \
	"the same with STALLOC_STEADY_CALLS=17 in the planner: passes"
unset STALLOC_STEADY_CALLS # (a shell may keep an assignment to a function)
fb_case 100663296 0 0 pass "a tie in memory and calls keeps the plan"
# no calls of a last iteration to weigh (auto mode's check, a trace
# without markers): the fallback decides only for a plan that lends anyway
# (its dynamic requests beyond its free space), where it holds less
fake env FAKE_NO_ITER=1 FAKE_PLANNED=100663296 FAKE_OFF=100663296 \
	FAKE_FALLBACK=98566144 "$PLAN" -o "$tmp/fn.plan" \
	"$W/cpu-torch/gpt-dense.trace" >/dev/null &&
	grep -q "^check pass " "$tmp/fn.plan" &&
	fake env FAKE_NO_ITER=1 FAKE_PLANNED=100663296 FAKE_OFF=100663296 \
		FAKE_FALLBACK=98566144 "$PLAN" -o "$tmp/fm.plan" \
		"$W/cpu-torch/gpt-moe.trace" >/dev/null &&
	grep -q "^check reject " "$tmp/fm.plan"
ok $? "without a last iteration's calls: the dense plan passes, the MoE one (lending) is rejected"
expect 0 "a plan the runtime drops on its own trace" \
	fake env FAKE_DROP=1 FAKE_PLANNED=100663296 FAKE_OFF=100663296 \
	"$PLAN" -o "$tmp/dr.plan" "$W/cpu-torch/gpt-dense.trace"
grep -q "^check reject 100663296 100663296 100663296 0$" "$tmp/dr.plan"
ok $? "is rejected, though no larger"
expect 0 "a replay that fails" fake env FAKE_FAIL=1 FAKE_PLANNED=1 \
	FAKE_OFF=1 "$PLAN" -o "$tmp/f.plan" "$W/cpu-torch/gpt-dense.trace"
grep -q "^check none 0 0 0 0$" "$tmp/f.plan" &&
	grep -q "not checked: .*exited 1: replay broke" "$tmp/err"
ok $? "leaves the plan unchecked, with a warning naming why"
expect 0 "no replay program" env STALLOC_REPLAY="$tmp/nope" "$PLAN" \
	-o "$tmp/x.plan" "$W/cpu-torch/gpt-dense.trace"
grep -q "^check none 0 0 0 0$" "$tmp/x.plan" && grep -q "nope" "$tmp/err"
ok $? "leaves the plan unchecked, with a warning naming it"
# the runtime does not use a rejected plan: the replay is off mode's
"$O/stalloc-replay" --json --policy off "$W/cpu-torch/gpt-dense.trace" \
	>"$tmp/off.json" 2>/dev/null
expect 0 "replay with the rejected plan" "$O/stalloc-replay" --json \
	--plan "$tmp/r.plan" "$W/cpu-torch/gpt-dense.trace"
python3 - "$tmp/out" "$tmp/off.json" <<'PY'
import json, sys
r, off = (json.load(open(f)) for f in sys.argv[1:3])
assert r["plan_rejected"] is True and r["plan_hits"] == 0, r
assert r["peak_reserved_bytes"] == off["peak_reserved_bytes"], (r, off)
PY
ok $? "the rejected plan runs as off mode: no hit, off mode's peak"
[ "$fails" = 0 ]
