#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-synth.sh - stalloc-synth from the outside, checked by the planner
#
# Determinism (same options, same bytes; another seed, another MoE trace),
# every schedule, recomputation and MoE option planned by stalloc-plan with a
# classification that fits (dense: no dynamic position, MoE: some; full
# recomputation below selective below none), the 1F1B bound on micro-batches
# in flight (measured on the trace itself), and bad options refused with
# exit 2, and MoE planned from one routing seed replayed with another
# (misses, and the peak against off mode).
# Prints TAP.  O: build dir.
set -u
O=${O:-build}
SYNTH="$O/stalloc-synth"
PLAN="$O/stalloc-plan"
. tests/tap.sh

# plan NAME SYNTH-OPTIONS...: generate $tmp/NAME.trace, plan it as JSON
plan() {
	name=$1
	shift
	"$SYNTH" -o "$tmp/$name.trace" "$@" &&
		"$PLAN" --json --budget 0.2 "$tmp/$name.trace" \
			>"$tmp/$name.json"
}

# field NAME KEY: one number of a plan's JSON
field() {
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
		"$tmp/$1.json" "$2"
}

# peak TRACE: the most bytes live, during the second iteration, of what
# that iteration allocated (activations, temporaries, gradients)
peak() {
	python3 - "$1" <<'PY'
import sys
it, live, cur, best = 0, {}, 0, 0
for line in open(sys.argv[1]):
    f = line.split()
    if not f or f[0][0] == '#' or f[0] == 'stalloc-trace':
        continue
    if f[0] == 'm':
        it += 1
        if it == 3:
            break
    elif it == 2 and f[0] == 'a':
        live[f[2]] = int(f[3])
        cur += int(f[3])
        best = max(best, cur)
    elif it == 2 and f[2] in live:
        cur -= live.pop(f[2])
print(best)
PY
}

# vs_off LABEL PLAN TRACE [strict]: replay TRACE with PLAN and in off
# mode; true when the plan reserves no more than off mode (less with
# strict) and misses at most 1% of its planned requests
vs_off() {
	"$O/stalloc-replay" --json --plan "$2" "$3" >"$tmp/vs-plan.json" \
		2>/dev/null &&
		"$O/stalloc-replay" --json --policy off "$3" \
			>"$tmp/vs-off.json" &&
		python3 -c 'import json, sys
p, o = (json.load(open(f)) for f in sys.argv[2:4])
print("# " + sys.argv[1] + ": planned", p["peak_reserved_bytes"], "misses",
      p["plan_misses"], "hits", p["plan_hits"], "off",
      o["peak_reserved_bytes"])
over = p["peak_reserved_bytes"] - o["peak_reserved_bytes"]
sys.exit(over > (-1 if sys.argv[4] == "strict" else 0) or
         p["plan_misses"] * 100 > p["plan_hits"])' "$1" "$tmp/vs-plan.json" \
			"$tmp/vs-off.json" "${4:-}"
}

echo "1..60"
expect 0 "--help" "$SYNTH" --help
grep -q -- "--recompute" "$tmp/out"
ok $? "--help lists the options"

# determinism
"$SYNTH" --experts 8 --seed 7 >"$tmp/a.trace" &&
	"$SYNTH" --experts 8 --seed 7 >"$tmp/b.trace" &&
	[ -s "$tmp/a.trace" ] && cmp -s "$tmp/a.trace" "$tmp/b.trace"
ok $? "same options, byte-identical traces"
"$SYNTH" --experts 8 --seed 8 >"$tmp/c.trace" &&
	! cmp -s "$tmp/a.trace" "$tmp/c.trace"
ok $? "another seed, another MoE trace"
"$SYNTH" --experts 8 --seed 7 -o "$tmp/d.trace" &&
	cmp -s "$tmp/a.trace" "$tmp/d.trace"
ok $? "-o writes the same bytes as stdout"
head -n 1 "$tmp/a.trace" | grep -q '^stalloc-trace 1$' &&
	grep -q '^a [0-9]* [0-9]* [0-9]* stream=0x0 dev=0 ns=[0-9]*$' \
		"$tmp/a.trace" && grep -q '^f [0-9]* [0-9]*$' "$tmp/a.trace" &&
	[ "$(grep -c '^m [0-9]* iteration$' "$tmp/a.trace")" = 4 ]
ok $? "format v1: header, a/f lines with keys, 4 iteration markers"

# every option planned, classification as expected
plan dense
ok $? "dense 1F1B: planned"
[ "$(field dense iterations)" = 4 ] && [ "$(field dense dynamic_requests)" = 0 ]
ok $? "dense: 4 iterations from the markers, no dynamic position"
[ "$(field dense persistent_requests)" -gt 0 ] &&
	[ "$(field dense cross_requests)" -gt 0 ] &&
	[ "$(field dense static_requests)" -gt 0 ]
ok $? "dense: persistent weights and Adam state, cross-iteration gradients"
plan step --grad-free step
[ "$(field step cross_requests)" = 0 ] &&
	[ "$(field step persistent_requests)" = "$(field dense persistent_requests)" ]
ok $? "--grad-free step: no gradient crosses the iteration boundary"
plan inter --schedule interleaved --virtual-stages 2
ok $? "interleaved, 2 virtual stages: planned"
[ "$(field inter dynamic_requests)" = 0 ] &&
	[ "$(field inter static_requests)" -gt 0 ]
ok $? "interleaved: static, no dynamic position"
plan inter4 --schedule interleaved --virtual-stages 4 --layers 16 --rank 2
ok $? "interleaved, 4 virtual stages, rank 2: planned"
plan sel --recompute selective
ok $? "selective recomputation: planned"
plan full --recompute full
ok $? "full recomputation: planned"
[ "$(field full lower_bound)" -lt "$(field sel lower_bound)" ] &&
	[ "$(field sel lower_bound)" -lt "$(field dense lower_bound)" ]
ok $? "lower bound: full < selective < none"
[ "$(field full dynamic_requests)" = 0 ] &&
	[ "$(field full static_requests)" -gt "$(field dense static_requests)" ]
ok $? "full: no dynamic position, more requests (the recomputation)"
plan flash --flash-attn --tp 2 --sequence-parallel &&
	[ "$(field flash lower_bound)" -lt "$(field dense lower_bound)" ]
ok $? "flash attention, tp 2, sequence parallel: planned, smaller"
plan moe --experts 8 --top-k 2
ok $? "MoE, 8 experts: planned"
[ "$(field moe dynamic_requests)" -gt 0 ] &&
	[ "$(field moe static_requests)" -gt 0 ]
ok $? "MoE: dynamic positions (expert buffers) and static ones"
plan moefull --experts 8 --recompute full --moe-every 2 \
	--schedule interleaved && [ "$(field moefull dynamic_requests)" -gt 0 ]
ok $? "MoE every 2nd layer, full recomputation, interleaved: dynamic"
"$PLAN" --emit-csv "$tmp/moe.csv" "$tmp/moe.trace" >/dev/null &&
	python3 tests/check-plan.py "$tmp/moe.csv" >/dev/null
ok $? "the MoE plan passes the independent overlap check"

# small tensors at their own bytes: 4-byte scalars, 8 bytes per routed
# token; the plan keeps the bytes (REQ, plan format 5) next to the size
# rounded to 512; without the option, the same bytes as before
"$SYNTH" -o "$tmp/small.trace" --experts 8 --top-k 2 --small-tensors &&
	awk '$1 == "a" && $4 == 4 { s++ } $1 == "a" && $4 < 512 && $4 % 8 == 0 \
		{ t++ } END { exit !(s > 0 && t > 0) }' "$tmp/small.trace" &&
	"$PLAN" -o "$tmp/small.plan" "$tmp/small.trace" >/dev/null &&
	awk '$1 == "e" && $4 == 512 && $8 == 4 { s++ }
		END { exit !(s > 0) }' "$tmp/small.plan" &&
	awk '$1 == "a" && $4 < 512 { exit 1 }' "$tmp/moe.trace"
ok $? "--small-tensors: 4-byte scalars and token indices, kept in the plan"
rm -f "$tmp/small.trace" "$tmp/small.plan"

# a 4-stage MoE rank with small tensors (held-out seed 1, draw 5): a
# gradient bucket of the Adam state's size, taken for that state early in
# the warm-up, once put the count past the prologue and the warm-up's end
# was inferred 148 requests early; the plan, replayed on its own trace,
# was dropped (check: reject).  Now the warm-up is not over before it has
# issued about as many requests as recorded: replayed on its own trace,
# the plan is kept and holds less than off mode.  (Its check now rejects
# it all the same, since the fallback for a rejected plan holds less
# still: the plan is replayed unchecked here.)
"$SYNTH" -o "$tmp/ws.trace" --layers 12 --hidden 768 --heads 8 --seq 1024 \
	--micro-batches 4 --stages 4 --iterations 4 --recompute selective \
	--flash-attn --experts 8 --top-k 1 --imbalance 4 --small-tensors \
	--seed 40 &&
	"$PLAN" --no-check -o "$tmp/ws.plan" "$tmp/ws.trace" >/dev/null &&
	"$O/stalloc-replay" --json --plan "$tmp/ws.plan" "$tmp/ws.trace" \
		>"$tmp/ws.json" 2>/dev/null &&
	"$O/stalloc-replay" --json --policy off "$tmp/ws.trace" \
		>"$tmp/ws-off.json" &&
	python3 -c 'import json, sys
p, o = (json.load(open(f)) for f in sys.argv[1:])
print("# dropped", p["plan_dropped"], "reserved", p["peak_reserved_bytes"],
      "off", o["peak_reserved_bytes"])
sys.exit(p["plan_dropped"] or
         p["peak_reserved_bytes"] >= o["peak_reserved_bytes"])' \
		"$tmp/ws.json" "$tmp/ws-off.json"
ok $? "MoE with small tensors: the warm-up's end not inferred early"
rm -f "$tmp/ws.trace" "$tmp/ws.plan" "$tmp"/ws*.json

# a 3-stage top-1 MoE rank with full recomputation and small tensors
# (held-out seed 1, draw 38), planned from routing seed 47.  Its steps'
# request counts vary (an idle expert allocates nothing) and one has the
# reference's count by chance: paired with it position by position, 33 of
# 657 positions were static, the plan matched nothing of another routing
# and its check rejected it (the fallback: off mode's 452 MiB).  Aligned
# by the diff of the sizes, 334 are static; the plan passes its check
# and, run with seed 87, holds less than off mode and misses nothing.
moe38="--layers 3 --hidden 768 --heads 16 --seq 512 --micro-batches 6
--stages 3 --iterations 4 --rank 1 --recompute full --grad-free step
--experts 4 --top-k 1 --imbalance 3 --small-tensors"
# shellcheck disable=SC2086
"$SYNTH" -o "$tmp/fb-a.trace" $moe38 --seed 47 &&
	"$SYNTH" -o "$tmp/fb-b.trace" $moe38 --seed 87 &&
	"$PLAN" --json -o "$tmp/fb.plan" "$tmp/fb-a.trace" >"$tmp/fb.json" &&
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("# static", d["static_requests"], "dynamic", d["dynamic_requests"],
      "check", d["check"], "planned", d["check_planned"], "fallback",
      d["check_fallback"])
sys.exit(not (d["check"] == "pass" and
              d["static_requests"] > d["dynamic_requests"]))' "$tmp/fb.json"
ok $? "counts that vary: a step of the same count by chance aligned by the diff"
vs_off "seed 87" "$tmp/fb.plan" "$tmp/fb-b.trace" strict
ok $? "run with another routing, the plan holds less than off mode"
rm -f "$tmp"/fb-*.trace "$tmp"/fb*.json "$tmp/fb.plan"

# a 3-stage MoE rank with 16 experts and small tensors (held-out seed 4,
# draw 28), planned from routing seed 6.  Aligned, its positions make a
# plan whose lifetimes, measured with slack for shifted runs, add 100 MiB
# (under a twentieth of the pool, so the slack was kept): its check
# rejects it.  Made again on the reference iteration's clock, the plan
# passes; run with seed 8 it holds less than off mode (it lost 14 MiB to
# off mode before, missing 304 of its 429 planned requests).
moe28="--layers 6 --hidden 768 --heads 8 --seq 512 --micro-batches 12
--stages 3 --iterations 5 --recompute selective --experts 16 --top-k 2
--imbalance 2 --moe-every 2 --small-tensors"
# shellcheck disable=SC2086
"$SYNTH" -o "$tmp/ck-a.trace" $moe28 --seed 6 &&
	"$SYNTH" -o "$tmp/ck-b.trace" $moe28 --seed 8 &&
	"$PLAN" --json -o "$tmp/ck.plan" "$tmp/ck-a.trace" >"$tmp/ck.json" &&
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("# clock", d["clock"], "check", d["check"], "planned",
      d["check_planned"], "with slack", d["slack_check_planned"])
sys.exit(not (d["check"] == "pass" and d["clock"] == "reference" and
              d["slack_check_planned"] is not None and
              d["slack_check_planned"] > d["check_planned"]))' \
		"$tmp/ck.json" &&
	grep -q "^check pass " "$tmp/ck.plan"
ok $? "a plan with slack its check rejects is made again without"
vs_off "seed 8" "$tmp/ck.plan" "$tmp/ck-b.trace"
ok $? "run with another routing, that plan holds no more than off mode"
# auto mode, 4 of 8 steps traced: its plan, with slack, is rejected and
# made again the same way, and the job switches to that one
# shellcheck disable=SC2086
"$SYNTH" -o "$tmp/ck-l.trace" $moe28 --seed 6 --iterations 8 &&
	STALLOC_AUTO_ITERS=4 STALLOC_LOG=info "$O/stalloc-replay" --json \
		--policy auto "$tmp/ck-l.trace" >"$tmp/ck-auto.json" \
		2>"$tmp/ck-auto.err" &&
	"$O/stalloc-replay" --json --policy off "$tmp/ck-l.trace" \
		>"$tmp/ck-off.json" &&
	grep -q "planning again on the reference iteration's clock" \
		"$tmp/ck-auto.err" &&
	grep -q "the peak.*: using it" "$tmp/ck-auto.err" &&
	python3 -c 'import json, sys
p, o = (json.load(open(f)) for f in sys.argv[1:])
print("# auto: reserved", p["peak_reserved_bytes"], "hits", p["plan_hits"],
      "misses", p["plan_misses"], "off", o["peak_reserved_bytes"])
sys.exit(p["peak_reserved_bytes"] > o["peak_reserved_bytes"] or
         p["plan_hits"] < 1000)' "$tmp/ck-auto.json" "$tmp/ck-off.json"
ok $? "auto mode makes such a plan again too, and uses it"
rm -f "$tmp"/ck-*.trace "$tmp"/ck*.json "$tmp/ck.plan" "$tmp/ck-auto.err"

# a one-stage MoE rank, 4 experts top-2, small tensors (held-out seed 7,
# draw 30), planned from routing seed 31 and run with seed 33: in one step
# an expert got every token, its buffers out of their positions' recorded
# sizes and inside a neighbour's; requests voting ahead, behind, ahead
# moved the cursor one ahead, a block of four tensors inside the routed
# block then passed for the twin block after the run, and the step missed
# 340 requests: 7,826 MiB against off mode's 7,788.  A vote the other way
# now ends the count (run_drift()).
moe30="--layers 4 --hidden 1536 --heads 16 --seq 2048 --micro-batches 12
--stages 1 --iterations 4 --flash-attn --experts 4 --top-k 2 --imbalance 2
--small-tensors"
# shellcheck disable=SC2086
"$SYNTH" -o "$tmp/dv-a.trace" $moe30 --seed 31 &&
	"$SYNTH" -o "$tmp/dv-b.trace" $moe30 --seed 33 &&
	"$PLAN" -o "$tmp/dv.plan" "$tmp/dv-a.trace" >/dev/null &&
	vs_off "seed 33" "$tmp/dv.plan" "$tmp/dv-b.trace"
ok $? "contradicting votes do not move the cursor in an expert run"
rm -f "$tmp"/dv-*.trace "$tmp/dv.plan" "$tmp"/vs-*.json

# the 1F1B bound: rank r holds at most stages - r micro-batches in flight
for m in 2 3 8 16; do
	"$SYNTH" --stages 4 --rank 1 --micro-batches $m -o "$tmp/m$m.trace"
done
p2=$(peak "$tmp/m2.trace")
p3=$(peak "$tmp/m3.trace")
p8=$(peak "$tmp/m8.trace")
p16=$(peak "$tmp/m16.trace")
[ "$p2" -lt "$p3" ]
ok $? "rank 1 of 4: 3 micro-batches in flight hold more than 2 ($p2 < $p3)"
[ "$p8" = "$p16" ] && [ "$p3" -le "$p8" ]
ok $? "rank 1 of 4: no more live with 16 micro-batches than 8 ($p8)"
"$SYNTH" --stages 4 --rank 2 -o "$tmp/r2.trace"
r2=$(peak "$tmp/r2.trace")
[ "$r2" -lt "$p8" ] && [ $((p8 - r2)) -gt $((p8 / 5)) ]
ok $? "rank 2 holds one micro-batch less than rank 1 ($r2 < $p8)"
for s in 2 4 8; do
	"$SYNTH" --stages $s --layers $((2 * s)) -o "$tmp/s$s.trace"
done
s2=$(peak "$tmp/s2.trace")
s4=$(peak "$tmp/s4.trace")
s8=$(peak "$tmp/s8.trace")
[ "$s2" -lt "$s4" ] && [ "$s4" -lt "$s8" ]
ok $? "first stage: live activations grow with the stages ($s2 < $s4 < $s8)"

# MoE with skewed routing, planned from one seed and run with another (the
# routing of a real job's later iterations is not the recorded one): the
# expert positions vary in size, the static ones around them must still be
# found -- misses at most 1% of the planned requests, the plan kept
moe="--layers 8 --hidden 1024 --heads 16 --seq 1024 --micro-batches 8 --stages 4 --experts 8 --top-k 2"
for imb in 0.5 1 2; do
	# shellcheck disable=SC2086
	"$SYNTH" -o "$tmp/moe-p.trace" $moe --imbalance $imb --seed 1 &&
		"$SYNTH" -o "$tmp/moe-r.trace" $moe --imbalance $imb --seed 2 &&
		"$PLAN" --budget 0.2 -o "$tmp/moe.plan" "$tmp/moe-p.trace" \
			>/dev/null &&
		"$O/stalloc-replay" --json --plan "$tmp/moe.plan" \
			"$tmp/moe-r.trace" >"$tmp/moe.json" 2>"$tmp/err" &&
		python3 - "$tmp/moe.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
h, m = r["plan_hits"], r["plan_misses"]
print(f"# hits {h} misses {m} dropped {r['plan_dropped']}")
sys.exit(0 if h and not r["plan_dropped"] and m <= 0.01 * (h + m) else 1)
PY
	ok $? "MoE imbalance $imb planned from seed 1, run with seed 2: misses <= 1%"
	# and the planned run reserves no more than off, give or take a chunk
	# (at imbalance 2, only with the pool's idle chunks lent to the
	# expert buffers that outgrow the plan's free space)
	"$O/stalloc-replay" --json --policy off "$tmp/moe-r.trace" \
		>"$tmp/moe-off.json" &&
		python3 - "$tmp/moe.json" "$tmp/moe-off.json" <<'PY'
import json, sys
d, off = (json.load(open(a)) for a in sys.argv[1:3])
a, b = d["peak_reserved_bytes"], off["peak_reserved_bytes"]
print(f"# reserved {a} off {b}")
sys.exit(0 if a <= b + (2 << 20) else 1)
PY
	ok $? "MoE imbalance $imb from another seed: reserved <= off + one chunk"
done

# Is the gap of the plan summary @1 (stalloc-plan --json) at most @2?
gap_at_most() {
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("# gap", d["gap"], "work_ms", d["work_ms"])
sys.exit(0 if d["gap"] <= float(sys.argv[2]) else 1)' "$1" "$2"
}

# a large dense pipeline rank (61 GB, 18,000 buffers): the planner's
# packing is within 0.05% of the lower bound in its default work budget
# (the greedy in arrival order, an online best fit's packing, runs first)
"$SYNTH" -o "$tmp/l.trace" --layers 48 --hidden 8192 --heads 64 --seq 4096 \
	--micro-batches 16 --flash-attn --stages 4 --schedule interleaved \
	--virtual-stages 2 --recompute selective --tp 4 --sequence-parallel &&
	"$PLAN" --json "$tmp/l.trace" >"$tmp/l.json" &&
	gap_at_most "$tmp/l.json" 0.0005
ok $? "61 GB dense rank: gap <= 0.05% in the default budget"

# 2-stage 1F1B pipeline ranks: two micro-batches' activations live in
# staggered, overlapping windows, each a nested (LIFO) family; the
# family-ranked skyline pass (planner/pack-family.c) packs them within
# 0.05% of the lower bound in the default budget (before it: 0.9 to 1.0%)
for pp in "" "--recompute selective" "--tp 2 --sequence-parallel"; do
	# shellcheck disable=SC2086 # $pp: several options or none
	"$SYNTH" -o "$tmp/pp.trace" --layers 8 --hidden 1024 --heads 16 \
		--seq 1024 --micro-batches 8 --stages 2 $pp &&
		"$PLAN" --json "$tmp/pp.trace" >"$tmp/pp.json" &&
		gap_at_most "$tmp/pp.json" 0.0005
	ok $? "2-stage 1F1B ${pp:-(default)}: gap <= 0.05% in the default budget"
done

# 4-stage 1F1B ranks: four micro-batches in flight, and at each peak the
# tensors the micro-batch in its backward pass freed must lie right under
# what it allocates.  With selective recomputation the pass ranked by
# start (planner/pack-start.c) packs it at the lower bound; plain and with
# tensor and sequence parallelism the exact search, now set up once per
# group instead of once per attempt, gets within 0.01% (0.80%, 0.36% and
# 0.36% above the lower bound before, in the default budget)
for pp in "0 --recompute selective" "0.0001 " \
	"0.0001 --tp 2 --sequence-parallel"; do
	lim=${pp%% *}
	opts=${pp#* }
	# shellcheck disable=SC2086 # $opts: several options or none
	"$SYNTH" -o "$tmp/pp4.trace" --layers 8 --hidden 1024 --heads 16 \
		--seq 1024 --micro-batches 8 --stages 4 $opts &&
		"$PLAN" --json "$tmp/pp4.trace" >"$tmp/pp4.json" &&
		gap_at_most "$tmp/pp4.json" "$lim"
	ok $? "4-stage 1F1B ${opts:-(default)}: gap <= $lim in the default budget"
done

# interleaved 2-stage rank: its whole excess over the true peak of live
# bytes is packing (live_peak equals the lower bound: no alignment, no
# modelled lifetime), and that packing gap (0.85%, see "what is left" in
# Documentation/planner.rst) must not grow: a guard, not the target
"$SYNTH" -o "$tmp/il.trace" --layers 8 --hidden 1024 --heads 16 --seq 1024 \
	--micro-batches 8 --stages 2 --schedule interleaved --virtual-stages 2 &&
	"$PLAN" --json "$tmp/il.trace" >"$tmp/il.json" &&
	gap_at_most "$tmp/il.json" 0.0086 &&
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["live_peak"] == d["lower_bound"] and
         d["align_bytes"] == 0 and d["model_bytes"] == 0 else 1)' "$tmp/il.json"
ok $? "interleaved 2-stage: bound is the live peak, gap <= 0.86%"

# interleaved 2-stage rank, 16 GB, selective recomputation: local
# improvement re-packs around the items that set the peak (before: around
# every item above the lower bound, and it ended 1.14% above it)
"$SYNTH" -o "$tmp/ils.trace" --layers 24 --hidden 2048 --heads 16 \
	--seq 2048 --micro-batches 8 --stages 2 --schedule interleaved \
	--virtual-stages 2 --recompute selective &&
	"$PLAN" --json "$tmp/ils.trace" >"$tmp/ils.json" &&
	gap_at_most "$tmp/ils.json" 0.008
ok $? "interleaved 2-stage, selective: gap <= 0.8% in the default budget"
rm -f "$tmp/ils.trace"

# a 3-stage interleaved rank (two sequences per micro-batch, 12 GB): the
# best fit of one arena leaves holes of the large activations cut by small
# long-lived buffers; best fit inside segments that never merge, run
# backwards in time (planner/pack-segments.c), packs it within 1% of the
# lower bound, and the planned replay reserves no more than PyTorch's
# caching allocator (before: 1.84% above the bound, 100 MiB above it)
"$SYNTH" -o "$tmp/seg.trace" --layers 12 --hidden 512 --heads 16 \
	--seq 2048 --micro-batches 9 --stages 3 --schedule interleaved \
	--virtual-stages 2 --micro-batch-size 2 &&
	"$PLAN" --json -o "$tmp/seg.plan" "$tmp/seg.trace" >"$tmp/seg.json" &&
	gap_at_most "$tmp/seg.json" 0.01 &&
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("# planned", d["check_planned"], "online", d["check_online"])
sys.exit(0 if d["check_planned"] <= d["check_online"] else 1)' "$tmp/seg.json"
ok $? "3-stage interleaved: gap <= 1%, planned <= the best online policy"
rm -f "$tmp/seg.trace" "$tmp/seg.plan"

# bad options
expect 2 "unknown option" "$SYNTH" --frobnicate
expect 2 "zero layers" "$SYNTH" --layers 0
expect 2 "layers not a number" "$SYNTH" --layers 8x
expect 2 "layers not a multiple of the stages" "$SYNTH" --layers 10
grep -q "multiple" "$tmp/err"
ok $? "the message says what is wrong"
expect 2 "rank beyond the stages" "$SYNTH" --stages 4 --rank 4
expect 2 "unknown schedule" "$SYNTH" --schedule gpipe
expect 2 "top-k above the experts" "$SYNTH" --experts 2 --top-k 3
badrc=0
for bad in "--recompute some" "--imbalance -1" "--virtual-stages 2" \
	"--schedule interleaved --micro-batches 6" "--seq 4194304 --heads 4096 --hidden 4096 --micro-batch-size 4096" \
	"--tp 3" "stray"; do
	# shellcheck disable=SC2086
	"$SYNTH" $bad >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc != 2 ] || [ -s "$tmp/out" ] || [ ! -s "$tmp/err" ]; then
		echo "# $bad: exit $rc"
		badrc=1
	fi
done
ok $badrc "other bad values: exit 2, a message, no output"
expect 1 "unwritable output" "$SYNTH" -o "$tmp/no/such/dir/t.trace"
[ "$fails" = 0 ]
