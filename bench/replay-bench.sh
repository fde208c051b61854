#!/bin/sh
# SPDX-License-Identifier: MIT
#
# bench/replay-bench.sh - make bench-replay: every shared cpu-torch trace
# replayed under every policy (peak requested, peak reserved,
# fragmentation), and stalloc's fragmentation as a ratio of the caching
# model's, measured in the same run.  Prints numbers, asserts nothing.
#
#   sh bench/replay-bench.sh BUILD_DIR SHARED_DIR
set -eu
O=${1:-build}
SHARED=${2:-../shared}
echo "== replay: traces x policies (tools/cli/replay/compare.py)"
# shellcheck disable=SC2046
python3 tools/cli/replay/compare.py --ratio "$O" \
	$(ls "$SHARED"/workloads/cpu-torch/*.trace)
