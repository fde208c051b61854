#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/run-tests.sh - run every test program, print a closing summary
#
# Each program speaks TAP (cmocka with CMOCKA_MESSAGE_OUTPUT=TAP); a program
# that crashes or exits non-zero without reporting a failure counts as one
# failed test.  The last line is "N passed, N failed, N skipped", which CI
# reads.  O is the build directory (default build).
set -u

O=${O:-build}
HAVE_CUDA_H=${HAVE_CUDA_H:-}
SHARED=${SHARED:-../shared}
FAKE=$(cd "$O" && pwd)/libcuda-fake.so
export CMOCKA_MESSAGE_OUTPUT=TAP
# Sanitizer builds: report leaks, abort on the first error.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

pass=0
fail=0
skip=0
failed_names=""

# run NAME [ENV=VALUE ...] -- COMMAND...
run() {
	name=$1
	shift
	log=$(mktemp)
	start=$(date +%s)
	(
		while [ "$1" != -- ]; do
			export "${1?}"
			shift
		done
		shift
		exec "$@"
	) >"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - start))
	sed "s/^/    /" "$log"
	# cmocka reports a skipped test as "not ok N # SKIP"
	s=$(grep -c '^\(not \)\{0,1\}ok .*# [Ss][Kk][Ii][Pp]' "$log")
	p=$(grep -v '# [Ss][Kk][Ii][Pp]' "$log" | grep -c '^ok ')
	f=$(grep -v '# [Ss][Kk][Ii][Pp]' "$log" | grep -c '^not ok ')
	total=$(grep -c '^\(not \)\{0,1\}ok ' "$log")
	if [ "$total" = 0 ]; then
		# not a TAP program: its exit code is one test
		if [ $rc = 0 ]; then p=1; else f=1; fi
	elif [ $rc != 0 ] && [ "$f" = 0 ]; then
		f=1 # crashed after its last report
	fi
	pass=$((pass + p))
	fail=$((fail + f))
	skip=$((skip + s))
	if [ "$f" != 0 ]; then
		failed_names="$failed_names $name"
		echo "FAIL $name ($p passed, $f failed, exit $rc, ${secs}s)"
	else
		echo "PASS $name ($p passed, $s skipped, ${secs}s)"
	fi
	rm -f "$log"
}

run util -- "$O/tests/test-util"
run lock -- "$O/tests/test-lock"
run options -- "$O/tests/test-options"
run planner SHARED="$SHARED" -- "$O/tests/test-planner"
run pack -- "$O/tests/test-pack"
run clear -- "$O/tests/test-clear"
run segs -- "$O/tests/test-segs"
run recorder -- "$O/tests/test-recorder"
run mapper/host -- "$O/tests/test-mapper" host
run mapper-plan/host -- "$O/tests/test-mapper-plan" host
run mapper-streams/host -- "$O/tests/test-mapper-streams" host
run stalloc-plan O="$O" SHARED="$SHARED" -- sh tests/test-cli.sh
run stalloc-timeline O="$O" SHARED="$SHARED" -- sh tests/test-timeline.sh
run lttng O="$O" -- sh tests/test-lttng.sh
case "$O" in
*san*)	# python cannot load an ASan library without preloading the runtime
	echo "SKIP python helper: not run against a sanitizer build"
	skip=$((skip + 1)) ;;
*)	run python PYTHONDONTWRITEBYTECODE=1 \
		STALLOC_LIBRARY="$(cd "$O" && pwd)/libstalloc.so" -- \
		python3 tests/python/run_tap.py ;;
esac
run vmm/host -- "$O/tests/test-vmm" host
if [ "$HAVE_CUDA_H" = y ]; then
	run fakecuda/selftest -- "$O/tests/fakecuda-selftest" "$FAKE"
	run vmm/cuda-fake STALLOC_LIBCUDA="$FAKE" -- "$O/tests/test-vmm" cuda
	run vmm/faults STALLOC_LIBCUDA="$FAKE" -- "$O/tests/test-vmm-faults"
	run mapper/cuda-fake STALLOC_LIBCUDA="$FAKE" -- \
		"$O/tests/test-mapper" cuda
	run mapper-plan/cuda-fake STALLOC_LIBCUDA="$FAKE" -- \
		"$O/tests/test-mapper-plan" cuda
	run mapper-streams/cuda-fake STALLOC_LIBCUDA="$FAKE" -- \
		"$O/tests/test-mapper-streams" cuda
else
	echo "SKIP cuda backend tests: built without CUDA headers"
	skip=$((skip + 1))
fi

# Each feature's own tests: tests/*.tests are sh fragments of run lines.
for frag in tests/*.tests; do
	[ -e "$frag" ] || continue
	# shellcheck disable=SC1090
	. "./$frag"
done

[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
