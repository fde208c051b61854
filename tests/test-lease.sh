#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-lease.sh - tools/gpu/lease-run.sh without a GPU: --bundle
# copies the libraries the build links that a bare CUDA image lacks, and
# the batch runs every step (each fails fast here), writing each step's log
# and a results.tgz with the logs and the runs' JSON -- what a borrowed
# machine's time limit would leave.  Prints TAP.
set -u
O=${O:-build}
. tests/tap.sh

O=$O sh tools/gpu/lease-run.sh --bundle "$tmp/libs" >"$tmp/b.out" 2>&1
[ -e "$tmp/libs/liburcu-bp.so.8" ] && [ -e "$tmp/libs/liburcu-cds.so.8" ]
ok $? "--bundle copies liburcu's libraries"
if ls "$tmp"/libs/libc.so* >/dev/null 2>&1; then r=1; else r=0; fi
ok $r "and not libc"
O=$O timeout 120 bash tools/gpu/lease-run.sh "$tmp/out" "$tmp/libs" \
	>"$tmp/run.out" 2>&1
ok $? "the batch ends (exit 0) without a GPU"
missing=
for f in versions.txt e2e-dense.log e2e-moe.log gpucheck.log \
	torch-checks.log e2e-tiny.log results.tgz; do
	[ -s "$tmp/out/$f" ] || missing="$missing $f"
done
[ -z "$missing" ]
ok $? "every step's log and results.tgz are written${missing:+ (missing:$missing)}"
tar tzf "$tmp/out/results.tgz" >"$tmp/list" 2>/dev/null &&
	grep -q '^res/dense/torch-e2e-dense.json$' "$tmp/list" &&
	grep -q '^res/gpucheck.log$' "$tmp/list"
ok $? "results.tgz holds the runs' JSON and the logs"
echo "1..$n"
[ "$fails" = 0 ]
