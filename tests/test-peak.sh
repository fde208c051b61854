#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-peak.sh - the peak accounting (struct stalloc_peak) from the
# outside: at the reserved peak of a replayed run every reserved byte is in
# exactly one place (the parts add up to the peak, which is the run's
# reserved peak), the planned part holds the plan's requests, and a plan
# the run follows leaves no warm-up leftover to speak of, and the warm-up
# iteration is served from the plan (the hand-over).  Prints TAP.
set -u
O=${O:-build}
R="$O/stalloc-replay"
W="${SHARED:-../shared}/workloads"
. tests/tap.sh

check() {
	python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["peak_accounting"]
parts = ("pool_used", "pool_idle", "dyn_live", "slabs", "dyn_free", "cached")
assert sum(p[k] for k in parts) == p["reserved"], (p, "parts")
assert p["reserved"] == d["peak_reserved_bytes"], (p, d["peak_reserved_bytes"])
assert p["requested"] <= p["reserved"], p
assert p["dyn_warmup"] <= p["dyn_live"] + p["slabs"] + p["pool_used"], p
if sys.argv[2] == "plan":
    assert d["plan_hits"] > 0, d
else:
    assert p["pool_used"] == 0 and p["pool_idle"] == 0, p
PY
}

for t in gpt-dense gpt-moe; do
	"$R" --json "$W/cpu-torch/$t.trace" >"$tmp/$t.json"
	check "$tmp/$t.json" plan
	ok $? "$t planned: the peak's parts add up to the reserved peak"
	"$R" --json --policy off "$W/cpu-torch/$t.trace" >"$tmp/$t.off.json"
	check "$tmp/$t.off.json" off
	ok $? "$t in off mode: the same, with no pool"
	"$R" --json --policy caching "$W/cpu-torch/$t.trace" >"$tmp/$t.c.json"
	grep -q peak_accounting "$tmp/$t.c.json"
	[ $? != 0 ]
	ok $? "$t under the caching model: no runtime accounting printed"
done

# warm_planned PLANNED.json OFF.json: no miss, no dynamic memory at the
# planned run's peak, and less reserved than off
warm_planned() {
	python3 - "$1" "$2" <<'PY'
import json, sys
d, off = (json.load(open(a)) for a in sys.argv[1:3])
p = d["peak_accounting"]
print(f"# reserved {d['peak_reserved_bytes']} off {off['peak_reserved_bytes']}"
      f" dyn_live {p['dyn_live']} dyn_free {p['dyn_free']}"
      f" misses {d['plan_misses']}")
assert d["plan_misses"] == 0, d
assert p["dyn_live"] + p["dyn_free"] == 0, p
assert d["peak_reserved_bytes"] < off["peak_reserved_bytes"], (d, off)
PY
}

# the warm-up hand-over: the warm-up iteration's own requests are served
# at their planned slots, so that no dynamic region grows beside the pool
# before the plan takes over -- a planned run reserves less than off
S="$O/stalloc-synth"
"$S" -o "$tmp/w.trace" --layers 8 --hidden 1024 --heads 16 --seq 1024 \
	--micro-batches 8 --stages 2 --recompute selective &&
	"$O/stalloc-plan" -o "$tmp/w.plan" "$tmp/w.trace" >/dev/null &&
	"$R" --json --plan "$tmp/w.plan" "$tmp/w.trace" >"$tmp/w.json" &&
	"$R" --json --policy off "$tmp/w.trace" >"$tmp/w.off.json" &&
	warm_planned "$tmp/w.json" "$tmp/w.off.json"
ok $? "warm-up served from the plan: no dynamic memory at the peak, below off"

# the same without markers: the warm-up's last iteration begins at the
# prologue position the plan records (warmstart)
grep -v "^m " "$tmp/w.trace" >"$tmp/wn.trace" &&
	"$O/stalloc-plan" -o "$tmp/wn.plan" "$tmp/wn.trace" >/dev/null &&
	grep -q "^warmstart [1-9]" "$tmp/wn.plan" &&
	"$R" --json --plan "$tmp/wn.plan" "$tmp/wn.trace" >"$tmp/wn.json" &&
	warm_planned "$tmp/wn.json" "$tmp/w.off.json"
ok $? "the same without markers: the warm-up found from the plan's warmstart"

# a warm-up unlike the steady iterations (the CPU MoE run's first step):
# matching it stops early, and its blocks stay out of the plan's way
python3 - "$W/cpu-torch/gpt-moe.trace" "$tmp/gm.trace" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
marks = [i for i, l in enumerate(lines)
         if l.split()[:1] == ["m"] and l.split()[2:3] == ["iteration"]]
open(sys.argv[2], "w").write("\n".join(lines[:marks[3]]) + "\n")
PY
"$O/stalloc-plan" -o "$tmp/gm.plan" "$tmp/gm.trace" >/dev/null &&
	"$R" --json --plan "$tmp/gm.plan" "$W/cpu-torch/gpt-moe.trace" \
		>"$tmp/gm.json" &&
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("# hits", d["plan_hits"], "misses", d["plan_misses"])
sys.exit(0 if d["plan_hits"] and d["plan_misses"] == 0 else 1)' "$tmp/gm.json"
ok $? "gpt-moe planned from its first iterations: no miss after its warm-up"

# a recording whose first "iteration" marker comes before any allocation
# (the real ResNet-50 profile): the device, made at the first allocation,
# takes that marker, so the warm-up is matched too -- no dynamic request,
# and less reserved than off
K="$W/real-gpu/kineto-resnet50-v100.pt.trace.json.gz"
if [ -x "$O/stalloc-import" ] && [ -f "$K" ]; then
	"$O/stalloc-import" -q "$K" -o "$tmp/k.trace" &&
		"$O/stalloc-plan" -o "$tmp/k.plan" "$tmp/k.trace" >/dev/null &&
		"$R" --json --plan "$tmp/k.plan" "$tmp/k.trace" >"$tmp/k.json" &&
		"$R" --json --policy off "$tmp/k.trace" >"$tmp/k.off.json" &&
		head -3 "$tmp/k.trace" | grep -q "^m 0 iteration" &&
		python3 - "$tmp/k.json" "$tmp/k.off.json" <<'PY'
import json, sys
d, off = (json.load(open(a)) for a in sys.argv[1:3])
print(f"# reserved {d['peak_reserved_bytes']} off {off['peak_reserved_bytes']}"
      f" dynamic allocs {d['allocs'] - d['plan_hits']}")
assert d["plan_misses"] == 0 and d["allocs"] == d["plan_hits"], d
assert d["peak_reserved_bytes"] < off["peak_reserved_bytes"], (d, off)
PY
	ok $? "a marker before the first allocation counts: warm-up planned too"
else
	n=$((n + 1))
	echo "ok $n # SKIP stalloc-import not built or no ResNet-50 recording"
fi

# a warm-up step that issues more expert requests than the recorded one
# (MoE routing skewed 4:1, planned from one seed, run with another): past
# the plan's prologue count before its end, it must neither take its tail
# for the start of the first planned iteration nor give its optimizer
# state's slots to the requests that come at their planned count -- the
# plan is kept and the run reserves no more than off
moe="--layers 8 --hidden 1024 --heads 16 --seq 1024 --micro-batches 8
	--stages 4 --experts 8 --top-k 2 --imbalance 4"
# shellcheck disable=SC2086
"$S" -o "$tmp/mp.trace" $moe --seed 5 &&
	"$S" -o "$tmp/mr.trace" $moe --seed 9 &&
	"$O/stalloc-plan" -o "$tmp/m.plan" "$tmp/mp.trace" >/dev/null &&
	{ "$R" --json --plan "$tmp/m.plan" "$tmp/mr.trace" >"$tmp/m.json" ||
		true; } &&
	"$R" --json --policy off "$tmp/mr.trace" >"$tmp/m.off.json" &&
	python3 - "$tmp/m.json" "$tmp/m.off.json" <<'PY'
import json, sys
d, off = (json.load(open(a)) for a in sys.argv[1:3])
print(f"# reserved {d['peak_reserved_bytes']} off {off['peak_reserved_bytes']}"
      f" hits {d['plan_hits']} misses {d['plan_misses']}")
assert not d.get("plan_dropped"), d
assert d["peak_reserved_bytes"] <= off["peak_reserved_bytes"] + (2 << 20), \
    (d, off)
PY
ok $? "a warm-up longer than recorded keeps the plan, at most off's peak"

# expert runs whose lengths vary shift every position after them from
# iteration to iteration; with selective recomputation the envelopes of
# those shifts cost 16% of the pool, and the planner measures lifetimes on
# the reference iteration's clock instead: no modelled lifetime left, and
# the run, planned from another seed, below every online policy
# shellcheck disable=SC2086
"$S" -o "$tmp/sp.trace" $moe --recompute selective --seed 9 &&
	"$S" -o "$tmp/sr.trace" $moe --recompute selective --seed 3 &&
	"$O/stalloc-plan" --json -o "$tmp/s.plan" "$tmp/sp.trace" \
		>"$tmp/s.plan.json" &&
	"$R" --json --plan "$tmp/s.plan" "$tmp/sr.trace" \
		>"$tmp/s.stalloc.json" &&
	for pol in off caching expandable; do
		"$R" --json --policy $pol "$tmp/sr.trace" >"$tmp/s.$pol.json" ||
			exit 1
	done &&
	python3 - "$tmp/s.plan.json" "$tmp"/s.stalloc.json "$tmp"/s.off.json \
		"$tmp"/s.caching.json "$tmp"/s.expandable.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
d, *online = (json.load(open(a)) for a in sys.argv[2:])
best = min(o["peak_reserved_bytes"] for o in online)
print(f"# model_bytes {p['model_bytes']} reserved {d['peak_reserved_bytes']}"
      f" best online {best} misses {d['plan_misses']}")
assert p["model_bytes"] == 0, p
assert p["lower_bound"] == p["live_peak"] + p["align_bytes"], p
assert not d.get("plan_dropped"), d
assert d["peak_reserved_bytes"] <= best, (d, best)
PY
ok $? "variable expert runs: lifetimes on the reference clock, below online"

"$R" "$W/cpu-torch/gpt-dense.trace" >"$tmp/text"
grep -q "^at the reserved peak" "$tmp/text" && grep -q "  pool_used" "$tmp/text"
ok $? "the text summary shows the peak accounting"

[ "$fails" = 0 ]
