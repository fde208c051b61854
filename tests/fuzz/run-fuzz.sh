#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tests/fuzz/run-fuzz.sh - run every libFuzzer target for a while
#
#   tests/fuzz/run-fuzz.sh BUILD_DIR SECONDS [TARGET...]
#
# BUILD_DIR holds fuzz-trace, fuzz-csv, fuzz-plan, fuzz-planner and fuzz-ctl (this
# script builds nothing).  Each target runs SECONDS seconds, seeded from
# tests/fuzz/corpus/TARGET/ and the shared workloads:
#
#   trace, planner   $SHARED/workloads/cpu-torch/*.trace
#   csv, planner     $SHARED/workloads/{minimalloc,idealloc}/*.csv
#   plan             plans made with $STALLOC_PLAN -o from those
#
# An input larger than the target's -max_len is cut at the last newline
# before the limit (a prefix of a trace or a CSV problem is still one).
#
# Environment:
#   SHARED       shared checkout (default: ../shared from the repository)
#   STALLOC_PLAN the planner tool for plan seeds (default build/stalloc-plan;
#                skipped with a note if missing)
#   FUZZ_OUT     work directory (default: a new /tmp/stalloc-fuzz.XXXXXX);
#                new corpus inputs in FUZZ_OUT/corpus/TARGET, logs in
#                FUZZ_OUT/TARGET.log, crash inputs in FUZZ_OUT/crashes/
#   FUZZ_FLAGS   extra libFuzzer flags
#
# Prints executions and crashes per target; exits 1 if any target crashed
# (copy the input into tests/fuzz/regress/TARGET/ to keep it as a test),
# 2 on usage errors.

set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ALL_TARGETS="trace csv plan planner ctl"

usage() {
	echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
	echo "  targets: $ALL_TARGETS" >&2
	exit 2
}

[ $# -ge 2 ] || usage
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: no directory $1" >&2; exit 2; }
SECS=$2
shift 2
case $SECS in
'' | *[!0-9]*) usage ;;
esac
TARGETS=${*:-$ALL_TARGETS}

SHARED=${SHARED:-$ROOT/../shared}
WORK=$SHARED/workloads
STALLOC_PLAN=${STALLOC_PLAN:-$ROOT/build/stalloc-plan}
OUT=${FUZZ_OUT:-$(mktemp -d /tmp/stalloc-fuzz.XXXXXX)}
CRASHES=$OUT/crashes
mkdir -p "$CRASHES" || exit 2

max_len() {
	case $1 in
	planner) echo 4096 ;;	# every input is planned: keep them small
	ctl) echo 1024 ;;	# one request line (at most 256 bytes) and some
	*) echo 65536 ;;
	esac
}

# Per-input time limit in seconds: a hang is reported as a crash.
input_timeout() {
	case $1 in
	planner) echo 30 ;;
	*) echo 10 ;;
	esac
}

# seed FILE DIR MAXLEN: copy FILE into DIR, cut at a newline if too long.
seed() {
	local f=$1 dir=$2 max=$3 dst
	[ -f "$f" ] || return 0
	dst=$dir/$(basename "$f")
	if [ "$(stat -c %s "$f")" -le "$max" ]; then
		cp "$f" "$dst"
	else
		head -c "$max" "$f" | sed '$d' > "$dst.prefix"
	fi
}

seed_plans() {
	local dir=$1 max=$2 f name
	if [ ! -x "$STALLOC_PLAN" ]; then
		echo "note: $STALLOC_PLAN not found: no plan seeds from the workloads" >&2
		return 0
	fi
	for f in "$WORK"/cpu-torch/*.trace "$WORK"/minimalloc/*.csv \
		 "$WORK"/idealloc/iree_*.csv; do
		[ -f "$f" ] || continue
		name=$(basename "$f")
		"$STALLOC_PLAN" -t 0.2 -o "$OUT/tmp.plan" "$f" > /dev/null 2>&1 &&
			seed "$OUT/tmp.plan" "$dir" "$max" &&
			mv "$dir/tmp.plan"* "$dir/$name.plan" 2>/dev/null
	done
	rm -f "$OUT/tmp.plan"
}

make_seeds() {
	local t=$1 dir=$2 max=$3 f
	mkdir -p "$dir"
	cp "$ROOT"/tests/fuzz/corpus/"$t"/* "$dir"/ 2>/dev/null
	[ -d "$WORK" ] || { echo "note: no $WORK: repository seeds only" >&2; return 0; }
	case $t in
	trace | planner)
		for f in "$WORK"/cpu-torch/*.trace; do seed "$f" "$dir" "$max"; done
		;;
	esac
	case $t in
	csv | planner)
		for f in "$WORK"/minimalloc/*.csv "$WORK"/idealloc/*.csv; do
			seed "$f" "$dir" "$max"
		done
		;;
	plan)
		seed_plans "$dir" "$max"
		;;
	esac
}

status=0
printf '%-8s %12s %8s  %s\n' target executions crashes log
for t in $TARGETS; do
	bin=$BUILD/fuzz-$t
	if [ ! -x "$bin" ]; then
		echo "$0: $bin is missing" >&2
		status=1
		continue
	fi
	max=$(max_len "$t")
	seeds=$OUT/seeds/$t
	corpus=$OUT/corpus/$t
	rm -rf "$seeds"
	make_seeds "$t" "$seeds" "$max"
	mkdir -p "$corpus"
	dict=
	[ -f "$ROOT/tests/fuzz/dict/$t.dict" ] &&
		dict=-dict=$ROOT/tests/fuzz/dict/$t.dict
	log=$OUT/$t.log
	# New inputs go to the first directory, never to the repository.
	# shellcheck disable=SC2086
	"$bin" -max_total_time="$SECS" -max_len="$max" \
		-timeout="$(input_timeout "$t")" -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$CRASHES/$t-" \
		$dict ${FUZZ_FLAGS:-} "$corpus" "$seeds" > "$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	crashes=$(find "$CRASHES" -maxdepth 1 -type f \
		\( -name "$t-crash-*" -o -name "$t-leak-*" -o \
		   -name "$t-timeout-*" -o -name "$t-oom-*" \) | wc -l)
	[ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes="?(rc $rc)"
	printf '%-8s %12s %8s  %s\n' "$t" "${execs:-?}" "$crashes" "$log"
	if [ "$crashes" != 0 ]; then
		status=1
		grep -m1 -E '^(==[0-9]+==ERROR|SUMMARY|fuzz:|.*runtime error)' \
			"$log" | sed 's/^/    /'
	fi
done
echo "crash inputs: $CRASHES"
exit $status
