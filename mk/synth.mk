# SPDX-License-Identifier: MIT
#
# mk/synth.mk - stalloc-synth, the Megatron-like trace generator
# (tools/cli/stalloc-synth.c and tools/cli/synth/, built by the
# Makefile's TOOL_RULE; Documentation/workloads.rst), its test
# (tests/test-synth.sh, registered in tests/synth.tests) and make
# bench-workloads (bench/workloads-bench.py), which uses stalloc-replay
# when mk/replay.mk builds it ($(REPLAY_BIN)).
TOOL_NAMES += stalloc-synth

stalloc-synth_SRCS := tools/cli/synth/events.c tools/cli/synth/model.c
stalloc-synth_HDRS := tools/cli/synth/synth.h

BENCH_EXTRA += bench-workloads
.PHONY: bench-workloads
bench-workloads: $(O)/stalloc-synth $(O)/stalloc-plan $(REPLAY_BIN)
	$(Q)python3 bench/workloads-bench.py $(O) $(SHARED)
