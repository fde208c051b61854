# SPDX-License-Identifier: MIT
#
# mk/synth.mk - stalloc-synth, the Megatron-like trace generator
# (tools/stalloc-synth.c and tools/synth/; Documentation/workloads.rst), its test
# (tests/test-synth.sh, registered in tests/synth.tests) and make
# bench-workloads (bench/workloads-bench.py), which uses stalloc-replay
# when mk/replay.mk builds it ($(REPLAY_BIN)).
TOOL_NAMES += stalloc-synth

SYNTH_SRCS := tools/stalloc-synth.c tools/synth/events.c tools/synth/model.c
LINT_SRCS += tools/synth/events.c tools/synth/model.c

$(O)/stalloc-synth: $(SYNTH_SRCS) tools/synth/synth.h $(O)/libstalloc.so
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(filter-out -fvisibility=hidden,$(BASE_CFLAGS)) $(CFLAGS) \
		$(SAN_LDFLAGS) -o $@ $(SYNTH_SRCS) -L$(O) -lstalloc \
		-Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib' $(LDFLAGS)

BENCH_EXTRA += bench-workloads
.PHONY: bench-workloads
bench-workloads: $(O)/stalloc-synth $(O)/stalloc-plan $(REPLAY_BIN)
	$(Q)python3 bench/workloads-bench.py $(O) $(SHARED)
