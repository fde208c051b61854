#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-lttng.sh - an lttng session end to end
#
# A small program using libstalloc (tests/lttng-demo) runs in trace mode
# under "stalloc-lttng record", so the same run leaves a native trace and
# an lttng session; "stalloc-lttng convert" turns the session into a trace,
# which must match the native one event by event (kind, ID, size, stream,
# device, markers), and the planner must accept it.  Bad input to the tool
# is checked too.  Needs root (the session daemon), lttng-tools, babeltrace2
# and the provider library; without them it says so and skips.  TAP.
set -u
O=${O:-build}
. tests/tap.sh
T=tools/stalloc-lttng

if [ "$(id -u)" != 0 ] || ! command -v lttng >/dev/null ||
	! command -v babeltrace2 >/dev/null || [ ! -f "$O/libstalloc-lttng.so" ]
then
	echo "1..1"
	echo "ok 1 # SKIP needs root, lttng-tools, babeltrace2 and the provider"
	exit 0
fi
echo "1..8"

STALLOC_BACKEND=host STALLOC_HOST_MEM=1G STALLOC_VA_SIZE=4G \
	STALLOC_MODE=trace STALLOC_TRACE="$tmp/native-%d.trace" \
	STALLOC_LTTNG_LIB="$O/libstalloc-lttng.so" \
	$T record -o "$tmp/session" -- "$O/tests/lttng-demo" >"$tmp/out" 2>&1
ok $? "record a run of the demo"
$T convert -o "$tmp/conv" "$tmp/session" >"$tmp/out" 2>&1
ok $? "convert the session"
conv=$(ls "$tmp"/conv/*.trace 2>/dev/null | head -n 1)
python3 - "$tmp/native-0.trace" "$conv" <<'PY'
import sys
def events(path):
    out = []
    for line in open(path):
        f = line.split()
        if not f or f[0] in ("#", "stalloc-trace"):
            continue
        keys = {k: v for k, v in (x.split("=", 1) for x in f[3:]
                                  if "=" in x)}
        if f[0] == "a":
            out.append(("a", f[2], f[3], keys["stream"], keys["dev"]))
        elif f[0] == "f":
            out.append(("f", f[2], keys["stream"], keys["dev"]))
        else:
            out.append(("m", f[2]))
    return out
a, b = events(sys.argv[1]), events(sys.argv[2])
assert len(a) == len(b) == 35, (len(a), len(b))
for i, (x, y) in enumerate(zip(a, b)):
    assert x == y, (i, x, y)
PY
ok $? "the converted trace matches the native one event by event"
"$O/stalloc-plan" "$conv" >"$tmp/out" 2>&1
ok $? "the planner accepts the converted trace"
$T convert "$tmp/nonexistent" >/dev/null 2>&1
[ $? = 1 ]
ok $? "a missing directory is an error"
mkdir "$tmp/empty"
$T convert "$tmp/empty" >/dev/null 2>&1
[ $? = 1 ]
ok $? "an empty directory is an error"
$T convert -o /proc/nope "$tmp/session" >/dev/null 2>&1
[ $? = 1 ]
ok $? "an unwritable output is an error"
$T frobnicate >/dev/null 2>&1
[ $? = 2 ]
ok $? "an unknown command is a usage error"
[ "$fails" = 0 ]
