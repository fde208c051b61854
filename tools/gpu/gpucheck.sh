#!/bin/sh
# SPDX-License-Identifier: MIT
# tools/gpu/gpucheck.sh - the vmm and runtime suites on the real CUDA driver
#
# Run by `make gpucheck` on a machine with an NVIDIA GPU: the suites that
# make check runs on the fake driver (tests/test-vmm, tests/test-mapper*),
# here against the real libcuda.so.1, the vmm demo on the cuda backend, the
# vmm benchmark on the real driver, and tools/gpu/kernel-check.cu (built with
# nvcc when it is there): real kernels writing and checking stalloc memory
# across streams, planned iterations and graph replays.  Prints the GPU, driver and CUDA
# versions first, so a saved log says what it ran on.
#
# Usage: O=build sh tools/gpu/gpucheck.sh
#        STALLOC_LIBCUDA=build/libcuda-fake.so sh tools/gpu/gpucheck.sh
#        (the same checks on another driver: make check runs it on the fake)
# Exit status: 0 all passed, 1 a check failed, 77 no GPU here.
set -u
O=${O:-build}
fail=0

if [ -n "${STALLOC_LIBCUDA:-}" ]; then
	echo "== driver: $STALLOC_LIBCUDA"
elif ! nvidia-smi >/dev/null 2>&1; then
	echo "gpucheck: no NVIDIA GPU here (nvidia-smi fails): nothing to do"
	exit 77
else
	machine=y
fi
[ -n "${machine:-}" ] && echo "== machine"
if [ -n "${machine:-}" ]; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
		--format=csv,noheader
	nvidia-smi |
		sed -n 's/.*CUDA Version: *\([0-9.]*\).*/CUDA (driver API): \1/p'
	uname -sr
fi

check() {
	name=$1
	shift
	echo "== $name"
	if timeout 180 "$@"; then
		echo "PASS $name"
	else
		echo "FAIL $name (exit $?)"
		fail=1
	fi
}

check vmm/cuda "$O/tests/test-vmm" cuda
check mapper/cuda "$O/tests/test-mapper" cuda
check mapper-plan/cuda "$O/tests/test-mapper-plan" cuda
check mapper-streams/cuda "$O/tests/test-mapper-streams" cuda
[ -x "$O/stalloc-vmm-demo" ] &&
	check vmm-demo env STALLOC_BACKEND=cuda "$O/stalloc-vmm-demo"
if [ -x "$O/bench/bench-vmm" ]; then
	check bench-vmm/cuda "$O/bench/bench-vmm" cuda
fi
# Real kernels on stalloc memory: the GPU only (the fake runs no kernel).
if [ -n "${machine:-}" ]; then
	NVCC=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
	if [ -x "$NVCC" ]; then
		mkdir -p "$O/gpu"
		if "$NVCC" -O2 -std=c++17 -Iinclude -o "$O/gpu/kernel-check" \
			tools/gpu/kernel-check.cu -L"$O" -lstalloc \
			-Xlinker -rpath -Xlinker "$(cd "$O" && pwd)"; then
			check kernel-check "$O/gpu/kernel-check"
		else
			echo "FAIL kernel-check (nvcc failed)"
			fail=1
		fi
	else
		echo "SKIP kernel-check: no nvcc"
	fi
fi
[ "$fail" = 0 ] && echo "gpucheck: all passed" || echo "gpucheck: FAILED"
exit "$fail"
