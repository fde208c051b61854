#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tests/fuzz/run-regress.sh - run the fuzz regression inputs once each
#
#   tests/fuzz/run-regress.sh BUILD_DIR [TARGET...]
#
# Every file in tests/fuzz/regress/TARGET/ (inputs that once crashed) and
# in tests/fuzz/corpus/TARGET/ (the seeds) is run once through
# BUILD_DIR/fuzz-TARGET, without fuzzing.  Prints one line per failing
# input and a total; exits 1 if any input fails, 2 on usage errors.

set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [TARGET...]" >&2; exit 2; }
BUILD=$1
shift
TARGETS=${*:-trace csv plan planner ctl}

fail=0
total=0
for t in $TARGETS; do
	bin=$BUILD/fuzz-$t
	if [ ! -x "$bin" ]; then
		echo "$0: $bin is missing" >&2
		exit 2
	fi
	for f in "$ROOT"/tests/fuzz/regress/"$t"/* "$ROOT"/tests/fuzz/corpus/"$t"/*; do
		[ -f "$f" ] || continue
		total=$((total + 1))
		if ! out=$("$bin" -timeout=30 -rss_limit_mb=2048 "$f" 2>&1); then
			fail=$((fail + 1))
			echo "FAIL fuzz-$t ${f#"$ROOT"/}"
			echo "$out" | grep -m3 -E '^(==[0-9]+==ERROR|SUMMARY|fuzz:|.*runtime error)' |
				sed 's/^/    /'
		fi
	done
done
echo "fuzz regressions: $total inputs, $fail failed"
[ "$fail" -eq 0 ]
