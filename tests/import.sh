#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/import.sh - stalloc-import on real PyTorch records, and its bad
# inputs
#
# The shared snapshots (../shared/workloads/real-gpu/, and the H100 ones
# of bench/results/) and profiler trace are imported and checked by
# tests/import-check.py, which computes the peak live bytes its own way
# (backwards from the final segments; a running sum of Bytes).  The
# caching model must come within 1% of the reserved peak the snapshots
# record.  Synthetic profiler traces with addresses and Total Allocated
# (made from a real snapshot) must agree at every event, and a planted
# difference must be seen.  Exports must be what PyTorch's viewer reads
# and import back to the same trace.  Bad inputs: exit 1, file and event
# named, no traceback, no output file.  Prints TAP.
set -u
O=${O:-build}
SHARED=${SHARED:-../shared}
I=$O/stalloc-import
R=$O/stalloc-replay
C=tests/import-check.py
. tests/tap.sh

real=$SHARED/workloads/real-gpu
snaps="$(ls "$real"/*.snapshot.pickle 2>/dev/null)
$(ls bench/results/*/*.snapshot.pickle.gz 2>/dev/null | head -2)"
snaps=$(echo "$snaps" | grep .)
kineto=$real/kineto-resnet50-v100.pt.trace.json.gz
ns=$(echo "$snaps" | wc -l)
echo "1..$((ns * 3 + 43))"

field() { # field JSON NAME
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# no_trace: stderr has no Python traceback
no_trace() {
	! grep -q "Traceback" "$tmp/err"
}

for s in $snaps; do
	name=$(basename "$s")
	"$I" -q -o "$tmp/$name.trace" "$s" 2>"$tmp/err"
	ok $? "$name: imported"
	python3 $C snapshot "$s" "$tmp/$name.trace" >"$tmp/out"
	ok $? "$name: peak live and counts as computed apart ($(cat "$tmp/out" | cut -c1-80)...)"
	j=$("$R" --policy caching --json "$tmp/$name.trace")
	d=$(field "$j" model_vs_torch)
	python3 -c "import sys; sys.exit(not abs(float('$d')) <= 0.01)" 2>/dev/null
	ok $? "$name: caching model within 1% of the recorded reserved peak ($d)"
done

# Options on the first snapshot.
s1=$(echo "$snaps" | head -1)
n1=$(grep -c "^m .* iteration" "$tmp/$(basename "$s1").trace")
"$I" -q --iteration-frame '' "$s1" >"$tmp/nm.trace" &&
	"$I" -q --iteration-frame '^no_such_function$' "$s1" >"$tmp/nm2.trace" &&
	[ "$n1" -gt 0 ] && ! grep -q "^m .* iteration" "$tmp/nm.trace" &&
	! grep -q "^m .* iteration" "$tmp/nm2.trace"
ok $? "iteration markers from the optimizer's frames ($n1), none when no frame qualifies"
"$I" -q --free requested "$s1" >"$tmp/req.trace" &&
	[ "$(grep -c '^a' "$tmp/req.trace")" = \
		"$(grep -c '^a' "$tmp/$(basename "$s1").trace")" ] &&
	"$R" --policy caching "$tmp/req.trace" >/dev/null
ok $? "--free requested: the same allocations, replayable"
grep -q "^a .* stream=0x[0-9a-f]* dev=0 ns=[0-9]*$" "$tmp/$(basename "$s1").trace"
ok $? "stream, device and time carried into the trace's keys"

# The profiler trace: no addresses, no Total Allocated.
"$I" -o "$tmp/k.trace" "$kineto" 2>"$tmp/err"
ok $? "kineto: imported"
python3 $C profiler "$kineto" "$tmp/k.trace" >"$tmp/out"
ok $? "kineto: 4110 allocations paired by size, 6 steps, peak as computed apart"
grep -q "no event carries Total Allocated" "$tmp/err"
ok $? "kineto: says no event carries Total Allocated"

# Modern profiler traces made from a real snapshot, the window starting
# late (blocks live before it).
src=$(echo "$snaps" | tail -1)
python3 $C mkprof "$src" "$tmp/p.json.gz" --skip 3000 >/dev/null
"$I" -o "$tmp/p.trace" "$tmp/p.json.gz" 2>"$tmp/err"
grep -Eq "Total Allocated: ([0-9]+) of \1 events agree" "$tmp/err"
ok $? "profiler with Addr: Total Allocated agrees at every event ($(grep -o 'Total Allocated: [0-9]* of [0-9]*' "$tmp/err"))"
python3 $C mkprof "$src" "$tmp/q.json.gz" --skip 3000 --no-addr >/dev/null
"$I" -o "$tmp/q.trace" "$tmp/q.json.gz" 2>"$tmp/err"
grep -Eq "Total Allocated: ([0-9]+) of \1 events agree" "$tmp/err"
ok $? "profiler without Addr: Total Allocated agrees at every event"
grep -Eq "\(([1-9][0-9]*) from before recording\)" "$tmp/err"
ok $? "profiler: memory live before the window imported"
grep -c "^m .* iteration" "$tmp/q.trace" | grep -qx 3
ok $? "profiler: ProfilerStep spans are iteration markers"
python3 $C mkprof "$src" "$tmp/r.json.gz" --skip 3000 --plant >/dev/null
"$I" -o "$tmp/r.trace" "$tmp/r.json.gz" 2>"$tmp/err"
grep -q "first differing" "$tmp/err" &&
	! grep -Eq "Total Allocated: ([0-9]+) of \1 events" "$tmp/err"
ok $? "profiler: a planted Total Allocated difference is reported"
"$R" --policy caching "$tmp/p.trace" >/dev/null
ok $? "profiler import replays"

# Allocator settings: max_split_size changes the model; expandable
# segments make the expandable model the one compared.
python3 - "$tmp" <<'PY'
import pickle, sys
M = 1 << 20
def snap(path, settings):
    ev = [dict(action="alloc", addr=1 << 32, size=100 * M, stream=0),
          dict(action="free_completed", addr=1 << 32, size=100 * M,
               stream=0),
          dict(action="alloc", addr=1 << 32, size=50 * M, stream=0)]
    seg = dict(device=0, address=1 << 32, total_size=150 * M, stream=0,
               blocks=[])
    pickle.dump(dict(device_traces=[ev], segments=[seg],
                     allocator_settings=settings), open(path, "wb"))
snap(sys.argv[1] + "/ms.pickle", dict(max_split_size=64 * M,
                                      expandable_segments=False))
snap(sys.argv[1] + "/exp.pickle", dict(max_split_size=-1,
                                       expandable_segments=True))
PY
"$I" -q -o "$tmp/ms.trace" "$tmp/ms.pickle" &&
	j=$("$R" --policy caching --json "$tmp/ms.trace") &&
	[ "$(field "$j" peak_reserved_bytes)" = $((150 << 20)) ] &&
	[ "$(field "$j" model_vs_torch)" = 0.0 ]
ok $? "max_split_size from the snapshot applied (150M reserved, as recorded)"
j=$("$R" --policy caching --max-split-size 1T --json "$tmp/ms.trace")
[ "$(field "$j" peak_reserved_bytes)" = $((100 << 20)) ]
ok $? "--max-split-size overrides the snapshot's"
"$I" -q -o "$tmp/exp.trace" "$tmp/exp.pickle" &&
	j=$("$R" --policy caching --json "$tmp/exp.trace") &&
	[ "$(field "$j" model_vs_torch)" = None ] &&
	[ "$(field "$j" torch_allocator)" = expandable ] &&
	j=$("$R" --policy expandable --json "$tmp/exp.trace") &&
	[ "$(field "$j" model_vs_torch)" != None ]
ok $? "expandable_segments: compared under the expandable model only"

# Export: what the viewer reads, and back again.
"$I" -q -o "$tmp/o.trace" "$s1"
for p in stalloc caching expandable off; do
	"$I" -q --policy $p --export-snapshot "$tmp/e.$p.pickle" "$s1" &&
		python3 $C viewer "$tmp/e.$p.pickle" >/dev/null
	ok $? "export $p: the layout PyTorch's viewer reads"
	"$I" -q -o "$tmp/rt.trace" "$tmp/e.$p.pickle" &&
		python3 $C roundtrip "$tmp/o.trace" "$tmp/rt.trace" >/dev/null
	ok $? "export $p: imports back to the same allocations and peak"
done
j=$("$R" --policy caching --json "$tmp/o.trace")
python3 - "$tmp/e.caching.pickle" "$(field "$j" peak_reserved_bytes)" <<'PY'
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
sys.exit(sum(s["total_size"] for s in d["segments"]) != int(sys.argv[2]))
PY
ok $? "export caching: the model's segments, adding up to its reserved bytes"
"$R" --policy stalloc --segment-log "$tmp/seg" "$tmp/o.trace" >/dev/null 2>&1
[ $? = 2 ]
ok $? "--segment-log with libstalloc's policies: usage, exit 2"
"$I" -q --export-snapshot "$tmp/e.trace.pickle" "$tmp/k.trace" &&
	python3 $C viewer "$tmp/e.trace.pickle" >/dev/null
ok $? "export from a stalloc trace"

# --compare
"$R" --compare "$s1" >"$tmp/out" 2>"$tmp/err"
[ $? = 0 ] && for p in caching expandable off stalloc; do
	grep -q "^$p " "$tmp/out" || exit 1
done && grep -q "^recorded: " "$tmp/out"
ok $? "stalloc-replay --compare: four policies and the recorded peak"

# Bad inputs: exit 1, named, no traceback, nothing written.
echo "keep" >"$tmp/keep.trace"
bad() { # bad DESCRIPTION PATTERN FILE
	"$I" -o "$tmp/keep.trace" "$3" >/dev/null 2>"$tmp/err"
	rc=$?
	[ $rc = 1 ] && grep -q "$2" "$tmp/err" && no_trace &&
		[ "$(cat "$tmp/keep.trace")" = keep ] &&
		[ -z "$(ls -a "$tmp" | grep '^\.stalloc-import-')" ]
	ok $? "$1: exit 1, named, output untouched (exit $rc: $(head -c 150 "$tmp/err"))"
}
echo "hello" >"$tmp/text.txt"
bad "not a record" "text.txt: neither" "$tmp/text.txt"
head -c 20000 "$kineto" >"$tmp/cut.json.gz"
bad "truncated gzip" "cut.json.gz: bad or truncated gzip" "$tmp/cut.json.gz"
head -c 5000 "$s1" >"$tmp/cut.pickle"
bad "truncated pickle" "cut.pickle: not a readable pickle" "$tmp/cut.pickle"
python3 - "$tmp" <<'PY'
import collections, pickle, sys
t = sys.argv[1]
pickle.dump(collections.OrderedDict(device_traces=[]),
            open(t + "/class.pickle", "wb"))
# a pickle that would run a command: os.system("touch t/pwned")
open(t + "/evil.pickle", "wb").write(
    b"\x80\x02cos\nsystem\nq\x00X" + bytes([len(t) + 12]) +
    b"\x00\x00\x00touch " + t.encode() + b"/pwned\x85R.")
pickle.dump(dict(segments=[]), open(t + "/nodt.pickle", "wb"))
ev = [dict(action="alloc", addr=4096, stream=0)]
pickle.dump(dict(device_traces=[ev], segments=[]),
            open(t + "/nosize.pickle", "wb"))
ev = [dict(action="alloc", addr=4096, size=512, stream=0),
      dict(action="free_completed", addr=8192, size=512, stream=0)]
pickle.dump(dict(device_traces=[ev], segments=[]),
            open(t + "/unknown.pickle", "wb"))
ev = [dict(action="frobnicate", addr=4096, size=512)]
pickle.dump(dict(device_traces=[ev]), open(t + "/action.pickle", "wb"))
open(t + "/nomem.json", "w").write('{"traceEvents": [{"name": "x"}]}')
open(t + "/badmem.json", "w").write(
    '{"traceEvents": [{"name": "[memory]", "ts": 1, "args": '
    '{"Device Type": 1, "Device Id": 0}}]}')
PY
bad "another pickle's classes" "names a class (collections.OrderedDict)" "$tmp/class.pickle"
bad "a pickle that runs a command" "names a class (os.system)" "$tmp/evil.pickle"
[ ! -e "$tmp/pwned" ]
ok $? "the command in the pickle did not run"
bad "no device_traces" "without 'device_traces'" "$tmp/nodt.pickle"
bad "missing key" "device_traces\[0\]\[0\] (alloc): missing key 'size'" "$tmp/nosize.pickle"
bad "free of an unknown block" "device_traces\[0\]\[1\] (free_completed): free of unknown block 0x2000" "$tmp/unknown.pickle"
bad "unknown action" "device_traces\[0\]\[0\]: unknown action 'frobnicate'" "$tmp/action.pickle"
bad "profiler trace without memory" "nomem.json: no \[memory\] event" "$tmp/nomem.json"
bad "profiler event without Bytes" "badmem.json: traceEvents\[0\] (\[memory\]): missing 'Bytes'" "$tmp/badmem.json"
"$I" "$tmp/missing.pickle" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "missing.pickle" "$tmp/err" && no_trace
ok $? "missing file: exit 1, named"
"$I" --device 3 "$s1" >/dev/null 2>"$tmp/err"
[ $? = 1 ] && grep -q "device 3 has no events" "$tmp/err"
ok $? "--device of a device without events: exit 1, named"
"$I" --bogus "$s1" >/dev/null 2>&1
[ $? = 2 ]
ok $? "bad option: usage, exit 2"
"$I" --iteration-frame '(' "$s1" >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "bad --iteration-frame" "$tmp/err" && no_trace
ok $? "bad --iteration-frame regex: usage, exit 2, no traceback"
# -o a FIFO (or /dev/null): written into, never renamed over
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/from-fifo" &
reader=$!
"$I" -o "$tmp/fifo" "$s1" 2>/dev/null
rc=$?
wait $reader
[ "$rc" = 0 ] && [ -p "$tmp/fifo" ] && grep -q '^stalloc-trace 1' "$tmp/from-fifo"
ok $? "-o a FIFO writes into it and leaves it a FIFO"
[ "$fails" = 0 ]
