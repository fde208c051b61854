# SPDX-License-Identifier: MIT
#
# mk/synth.mk - stalloc-synth, the Megatron-like trace generator
# (tools/stalloc-synth.c; Documentation/workloads.rst), its test
# (tests/test-synth.sh, registered in tests/synth.tests) and make
# bench-workloads (bench/workloads-bench.py), which uses stalloc-replay
# when mk/replay.mk builds it ($(REPLAY_BIN)).
TOOL_NAMES += stalloc-synth

BENCH_EXTRA += bench-workloads
.PHONY: bench-workloads
bench-workloads: $(O)/stalloc-synth $(O)/stalloc-plan $(REPLAY_BIN)
	$(Q)python3 bench/workloads-bench.py $(O) $(SHARED)
