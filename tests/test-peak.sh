#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-peak.sh - the peak accounting (struct stalloc_peak) from the
# outside: at the reserved peak of a replayed run every reserved byte is in
# exactly one place (the parts add up to the peak, which is the run's
# reserved peak), the planned part holds the plan's requests, and a plan
# the run follows leaves no warm-up leftover to speak of.  Prints TAP.
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

"$R" "$W/cpu-torch/gpt-dense.trace" >"$tmp/text"
grep -q "^at the reserved peak" "$tmp/text" && grep -q "  pool_used" "$tmp/text"
ok $? "the text summary shows the peak accounting"

[ "$fails" = 0 ]
