#!/bin/bash
# SPDX-License-Identifier: MIT
# tools/gpu/lease-run.sh - every GPU check in one batch, for a borrowed GPU
#
# A machine lent for a few minutes gets one prepared command: this.  Built
# here (make all tests build/bench/bench-vmm build/stalloc-vmm-demo) and
# carried there with the shared libraries the build links that a bare CUDA
# image lacks (--bundle DIR copies them, here); there, it prints the
# versions, trains the GPT-like models under every allocator
# (tools/gpu/torch-e2e.py: dense and MoE, 30 steps, with the caching run's
# snapshot and stalloc's traces kept), runs tools/gpu/gpucheck.sh and
# tools/gpu/torch-checks.py, and the tiny model with CUDA graphs.  What
# each step printed goes to OUT/*.log as it runs, and everything -- logs,
# JSON, traces, snapshots -- into OUT/results.tgz after each step, so that
# a run stopped at its time limit still returns what it did.  Each step has
# a time limit of its own; about 5 minutes in all on an H100.
#
# Usage: tools/gpu/lease-run.sh --bundle DIR    (here: copy the libraries)
#        tools/gpu/lease-run.sh OUT [LIBDIR]    (there; LIBDIR: the copies)
# Environment: O (the build directory, default build); STEPS (e2e steps).
set -u
O=${O:-build}

if [ "${1:-}" = --bundle ]; then
	dir=${2:?--bundle DIR}
	mkdir -p "$dir" || exit 1
	# what libstalloc and the test programs link, less libc and the like
	for f in "$O"/libstalloc.so "$O"/tests/test-vmm; do
		ldd "$f"
	done | awk '/=> \// { print $3 }' | sort -u |
		grep -E 'liburcu|libcmocka|libnuma|liblttng' |
		while read -r lib; do
			cp -L "$lib" "$dir/" || exit 1
		done
	ls "$dir"
	exit 0
fi

OUT=${1:?usage: lease-run.sh OUT [LIBDIR] or --bundle DIR}
if [ -n "${2:-}" ]; then
	libs=$(cd "$2" && pwd) || exit 1
	export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export PYTHONUNBUFFERED=1 O
W=$(mktemp -d) || exit 1
trap 'rm -rf "$W"' EXIT
R=$W/res
mkdir -p "$R" "$OUT" || exit 1
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0)) s] $*"; }
pack() { tar czf "$OUT/results.tgz" -C "$W" res 2>/dev/null; }

{
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
		--format=csv,noheader
	python3 -c 'import sys, torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "python", sys.version.split()[0])'
	nvcc --version | tail -n 1
	sed -n 's/^PRETTY_NAME=//p' /etc/os-release
	uname -sr
} >"$OUT/versions.txt" 2>&1
cp "$OUT/versions.txt" "$R/"
cat "$OUT/versions.txt"
if ldd "$O/libstalloc.so" | grep -q 'not found'; then
	say "libstalloc.so: libraries not found (carry --bundle's copies):"
	ldd "$O/libstalloc.so" | grep 'not found'
fi

for m in dense moe; do
	say "e2e $m"
	timeout 180 python3 tools/gpu/torch-e2e.py --model $m --snapshot \
		--steps "${STEPS:-30}" --timeout 60 --out "$R/$m" \
		>"$OUT/e2e-$m.log" 2>&1
	say "e2e $m: exit $?"
	tail -n 8 "$OUT/e2e-$m.log"
	pack
done
say gpucheck
timeout 200 sh tools/gpu/gpucheck.sh >"$OUT/gpucheck.log" 2>&1
say "gpucheck: exit $?"
grep -E '^(PASS|FAIL|SKIP)|^gpucheck:|^ok|^not ok' "$OUT/gpucheck.log"
say torch-checks
timeout 90 python3 tools/gpu/torch-checks.py >"$OUT/torch-checks.log" 2>&1
say "torch-checks: exit $?"
grep -E '^ok|^not ok' "$OUT/torch-checks.log"
say "e2e tiny, graphs"
timeout 100 python3 tools/gpu/torch-e2e.py --model tiny --steps 12 \
	--graphs --timeout 30 --out "$R/tiny" >"$OUT/e2e-tiny.log" 2>&1
say "e2e tiny: exit $?"
tail -n 8 "$OUT/e2e-tiny.log"
cp "$OUT"/*.log "$R/" 2>/dev/null
pack
say "done"
