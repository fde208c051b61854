#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-bounds.sh - the planner's bounds against tests/check-bounds.py
# (an independent peak-live computation over the trace) on every shared
# cpu-torch trace and on stalloc-synth traces (dense 1F1B, interleaved,
# selective recomputation, MoE).  Prints TAP.  O: build dir; SHARED: the
# shared directory (its traces are skipped when it is not there).
set -u
O=${O:-build}
SHARED=${SHARED:-../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

base="--layers 8 --hidden 1024 --heads 8 --seq 512 --stages 2 --micro-batches 4"
# shellcheck disable=SC2086
"$O/stalloc-synth" -o "$tmp/dense.trace" $base &&
	"$O/stalloc-synth" -o "$tmp/interleaved.trace" $base \
		--schedule interleaved --virtual-stages 2 &&
	"$O/stalloc-synth" -o "$tmp/selective.trace" $base \
		--recompute selective --flash-attn &&
	"$O/stalloc-synth" -o "$tmp/moe.trace" $base --experts 4 --top-k 2 ||
	{ echo "not ok 1 - stalloc-synth writes the traces"; exit 1; }
set -- "$tmp"/*.trace
for f in "$SHARED"/workloads/cpu-torch/*.trace; do
	[ -e "$f" ] && set -- "$@" "$f"
done
exec python3 tests/check-bounds.py "$O/stalloc-plan" "$@"
