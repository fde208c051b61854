#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-ctl.sh - the control socket end to end: a job held half-way
# (tests/ctl-hold), stallocctl list / stats / maps / plan / trim against it,
# agreement with the job's own statistics, malformed and slow clients, a
# client of another uid, dead pids and stale sockets, STALLOC_CTL=0.
# Needs O (build directory); speaks TAP.
set -u
O=${O:-build}
. tests/tap.sh
CTL=$O/stallocctl
HOLD=$O/tests/ctl-hold
export XDG_RUNTIME_DIR="$tmp/run"
mkdir -p "$XDG_RUNTIME_DIR"
chmod 755 "$tmp" "$XDG_RUNTIME_DIR"
DIR="$XDG_RUNTIME_DIR/stalloc"
export STALLOC_BACKEND=host STALLOC_HOST_MEM=1G STALLOC_VA_SIZE=4G

# A plan for the held job: trace it once (it holds; stop it at once).
STALLOC_MODE=trace STALLOC_TRACE="$tmp/job.trace" STALLOC_CTL=0 \
	"$HOLD" "$tmp/trace.stats" >"$tmp/trace.out" &
pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/trace.out" && break; sleep 0.1; done
kill -TERM $pid; wait $pid
$O/stalloc-plan -o "$tmp/job.plan" "$tmp/job.trace" >/dev/null
ok $? "the job is traced and planned"
test ! -e "$DIR"
ok $? "STALLOC_CTL=0: no control socket"

STALLOC_MODE=plan STALLOC_PLAN="$tmp/job.plan" "$HOLD" "$tmp/job.stats" \
	>"$tmp/job.out" &
pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/job.out" && break; sleep 0.1; done
grep -q "ready $pid" "$tmp/job.out"
ok $? "the planned job holds"
test -S "$DIR/$pid.sock" && [ "$(stat -c %a "$DIR")" = 700 ] &&
	[ "$(stat -c %a "$DIR/$pid.sock")" = 600 ]
ok $? "its socket is $DIR/PID.sock, directory 0700, socket 0600"

$CTL list >"$tmp/list" && grep -q "^$pid  *live" "$tmp/list"
ok $? "stallocctl list shows it live"
$CTL stats >"$tmp/stats.txt" && grep -q "mode plan" "$tmp/stats.txt"
ok $? "stallocctl stats (the only process, no -p): mode plan"

$CTL -p $pid --json stats >"$tmp/stats.json" &&
	$CTL -p $pid --json maps >"$tmp/maps.json" &&
	$CTL -p $pid --json plan >"$tmp/plan.json"
ok $? "stats, maps and plan with --json"

# Compare with the job's own statistics and the plan file.
python3 - "$tmp" "$pid" <<'PY'
import json, subprocess, sys
tmp, pid = sys.argv[1], int(sys.argv[2])
own = dict(l.split() for l in open(tmp + "/job.stats"))
own = {k: int(v) for k, v in own.items()}
st = json.load(open(tmp + "/stats.json"))
mp = json.load(open(tmp + "/maps.json"))
pl = json.load(open(tmp + "/plan.json"))
d = st["devices"][0]
fails = []
def ok(cond, what):
    if not cond:
        fails.append(what)
assert st["pid"] == pid
for k in ("allocated", "mapped", "reserved", "plan_hits", "plan_misses"):
    ok(d[k] == own[k], "stats %s %d != own %d" % (k, d[k], own[k]))
m = mp["devices"][0]
chunk = m["chunk_bytes"]
ok(sum(r["bytes"] for r in m["ranges"]) == own["mapped"], "maps bytes")
ok(m["mapped_bytes"] == own["mapped"], "maps mapped_bytes")
prev = 0
ids = set()
for r in m["ranges"]:
    s, e = int(r["start"], 16), int(r["end"], 16)
    ok(s >= prev and e - s == r["bytes"] == r["chunks"] * chunk, "range %r" % r)
    ok(r["last_chunk_id"] - r["first_chunk_id"] + 1 == r["chunks"], "ids %r" % r)
    for i in range(r["first_chunk_id"], r["last_chunk_id"] + 1):
        ok(i not in ids, "chunk id %d twice" % i)
        ids.add(i)
    prev = e
states = {(r["state"], r["owner"]) for r in m["ranges"]}
ok(("static", "plan") in states, "a static plan range: %r" % states)
ok(any(s == "dynamic" and "dynamic" in o for s, o in states), "dynamic: %r" % states)
ok(any("slab" in o for s, o in states), "slab: %r" % states)
p = pl["devices"][0]
ok(p["state"] == "in use" and p["plan"].endswith("job.plan"), "plan %r" % p)
ok(p["plan_hits"] == own["plan_hits"] and p["iterations"] == 6, "plan %r" % p)
if fails:
    print("\n".join(fails))
    sys.exit(1)
PY
ok $? "stats, maps and plan agree with the job's own statistics"

fp=$($O/stalloc-plan --json "$tmp/job.trace" | python3 -c \
	'import json,sys; print(json.load(sys.stdin)["fingerprint"])')
grep -q "\"fingerprint\":\"$fp\"" "$tmp/plan.json"
ok $? "the plan's fingerprint is the plan file's ($fp)"

$CTL -p $pid maps >"$tmp/maps.txt" &&
	grep -q "^  START  *END  *SIZE  *CHUNKS  *CHUNK IDS  *STATE  *OWNER" \
		"$tmp/maps.txt" && grep -q "static  *plan$" "$tmp/maps.txt"
ok $? "human maps: an aligned table"
cat "$tmp/maps.txt" | sed 's/^/# /'

# Malformed, oversized, binary, empty and slow clients; then it still works.
python3 - "$DIR/$pid.sock" <<'PY'
import socket, sys, time
path = sys.argv[1]
def ask(data, close_write=True):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    if data:
        s.sendall(data)
    if close_write:
        s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    return out
cases = {
    b"bogus\n": b"error unknown command",
    b"stats --yaml\n": b"error malformed",
    b"stats --json extra\n": b"error malformed",
    b"\x00\x01\xff\n": b"error malformed",
    b"x" * 5000: b"error request too long",
    b"": b"error malformed",
    b"\n": b"error malformed",
}
bad = 0
for req, want in cases.items():
    got = ask(req)
    if not got.startswith(want):
        print("%r -> %r (want %r)" % (req[:20], got[:60], want))
        bad += 1
# a silent client is dropped after its deadline, and nobody else starves
s = socket.socket(socket.AF_UNIX)
s.connect(path)
t = time.time()
got = ask(b"ping\n")
if not got.startswith(b"ok\n"):
    print("ping after a silent client: %r" % got)
    bad += 1
s.close()
sys.exit(1 if bad else 0)
PY
ok $? "malformed, oversized, binary, empty and silent clients get errors"
kill -0 $pid
ok $? "the job survived them"

# Another uid: the directory stops it; opened up, SO_PEERCRED does.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
	$nobody $CTL -S "$DIR/$pid.sock" stats >/dev/null 2>"$tmp/err1"
	rc=$?
	chmod 755 "$DIR"
	chmod 666 "$DIR/$pid.sock"
	$nobody $CTL -S "$DIR/$pid.sock" stats >/dev/null 2>"$tmp/err2"
	rc2=$?
	chmod 700 "$DIR"
	chmod 600 "$DIR/$pid.sock"
	[ $rc = 1 ] && [ $rc2 = 1 ] && grep -q "permission denied" "$tmp/err2"
	ok $? "a client of another uid is refused ($(cat "$tmp/err2"))"
else
	echo "ok $((n = n + 1)) # SKIP another uid: needs root and setpriv"
fi

$CTL -p $pid --json trim >"$tmp/trim.json" && python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
sys.exit(0 if t["reserved_after"] < t["reserved_before"] else 1)' \
	"$tmp/trim.json"
ok $? "trim gives the cached chunks back ($(cat "$tmp/trim.json"))"

$CTL -p 999999999 stats 2>"$tmp/err"
[ $? = 1 ] && grep -q "no process with pid 999999999" "$tmp/err"
ok $? "a dead pid: exit 1, said so"
touch "$DIR/999999998.sock"
$CTL -p 999999998 stats 2>"$tmp/err"
[ $? = 1 ] && grep -q "stale" "$tmp/err" &&
	$CTL list | grep -q "^999999998  *stale"
ok $? "a stale socket: told apart in list and -p"
rm -f "$DIR/999999998.sock"
$CTL frobnicate 2>/dev/null
[ $? = 2 ]
ok $? "an unknown command: exit 2"

kill -TERM $pid
wait $pid
ok $? "the job ends cleanly on SIGTERM"
test ! -e "$DIR/$pid.sock"
ok $? "and its socket is gone"

# A replay held with --hold: stallocctl agrees with the replay's own report.
SHARED=${SHARED:-../shared}
dense=$SHARED/workloads/cpu-torch/gpt-dense.trace
if [ -f "$dense" ] && [ -x "$O/stalloc-replay" ]; then
	"$O/stalloc-replay" --json --hold "$dense" >"$tmp/replay.out" &
	pid=$!
	for _ in $(seq 200); do
		grep -q holding "$tmp/replay.out" && break
		sleep 0.1
	done
	$CTL -p $pid --json stats >"$tmp/rstats.json" &&
		$CTL -p $pid --json maps >"$tmp/rmaps.json" &&
		python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
rep = json.loads(open(tmp + "/replay.out").readline())
st = json.load(open(tmp + "/rstats.json"))["devices"][0]
mp = json.load(open(tmp + "/rmaps.json"))["devices"][0]
pairs = [("peak_reserved_bytes", "reserved_peak"), ("plan_hits", "plan_hits"),
         ("plan_misses", "plan_misses"), ("driver_calls", "driver_calls"),
         ("allocs", "allocs"), ("peak_requested_bytes", "allocated_peak")]
bad = [(a, rep[a], st[b]) for a, b in pairs if rep[a] != st[b]]
if sum(r["bytes"] for r in mp["ranges"]) != st["mapped"]:
    bad.append(("mapped", st["mapped"]))
print(bad or "agree")
sys.exit(1 if bad else 0)
PY
	ok $? "a replay held with --hold: stats and maps agree with its report"
	kill -INT $pid
	wait $pid
	ok $? "the held replay ends on SIGINT"
	# a plan its check rejected: stallocctl plan says so, and why
	"$O/stalloc-plan" --no-check -o "$tmp/rj.plan" "$dense" >/dev/null &&
		python3 - "$tmp/rj.plan" <<'PY'
import sys, zlib
path = sys.argv[1]
text = open(path).read()
body = text[:text.index("checksum ")].replace(
    "\ncheck none 0 0 0 0\n", "\ncheck reject 300 200 200 180\n")
open(path, "w").write(body + "checksum 0x%08x\n" % zlib.crc32(body.encode()))
PY
	"$O/stalloc-replay" --hold --plan "$tmp/rj.plan" "$dense" \
		>"$tmp/rj.out" 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		grep -q holding "$tmp/rj.out" && break
		sleep 0.1
	done
	$CTL -p $pid plan >"$tmp/rj.ctl" &&
		grep -q "plan rejected by its check (its fallback)" "$tmp/rj.ctl" &&
		grep -q "rj.plan (replayed on its trace: 300 bytes reserved with it, 200 in off mode, 180 in this fallback)" "$tmp/rj.ctl"
	ok $? "stallocctl plan: a plan its check rejected, named, with both peaks"
	kill -INT $pid
	wait $pid
else
	echo "ok $((n = n + 1)) # SKIP held replay: no $dense or stalloc-replay"
fi

# A directory that is not private: no socket, the job goes on.
rm -rf "$DIR" && mkdir -m 755 "$DIR"
STALLOC_LOG=warn STALLOC_MODE=off "$HOLD" "$tmp/x.stats" >"$tmp/x.out" \
	2>"$tmp/x.err" &
pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/x.out" && break; sleep 0.1; done
grep -q "not a private directory" "$tmp/x.err" && test ! -e "$DIR/$pid.sock"
ok $? "a non-private directory: a warning, no socket, the job goes on"
kill -TERM $pid
wait $pid

echo "1..$n"
[ "$fails" = 0 ]
