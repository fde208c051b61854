# SPDX-License-Identifier: MIT
#
# mk/replay.mk - stalloc-replay (tools/cli/stalloc-replay.c, its set-up
# and report in tools/cli/replay/setup.c and report.c, and the models of
# PyTorch's allocator in tools/cli/replay/), its unit tests
# (tests/test-replay.c), the shell tests (tests/replay.sh, registered in
# tests/replay.tests) and make bench-replay (bench/replay-bench.sh).
# Documentation/replay.rst.

REPLAY_MODEL_SRCS := tools/cli/replay/caching.c tools/cli/replay/expandable.c
REPLAY_MODEL_HDRS := tools/cli/replay/replay.h tools/cli/replay/model.h
REPLAY_BIN := $(O)/stalloc-replay

# Built by the Makefile's TOOL_RULE from tools/cli/stalloc-replay.c and:
TOOL_NAMES += stalloc-replay
stalloc-replay_SRCS := tools/cli/replay/setup.c tools/cli/replay/report.c \
	tools/cli/replay/stamp.c \
	$(REPLAY_MODEL_SRCS)
stalloc-replay_HDRS := tools/cli/replay/tool.h $(REPLAY_MODEL_HDRS)

# The models' unit tests: cmocka, the model sources, no library needed.
$(O)/tests/test-replay: tests/test-replay.c $(REPLAY_MODEL_SRCS) \
		$(REPLAY_MODEL_HDRS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(TEST_CFLAGS) $(SAN_LDFLAGS) -o $@ tests/test-replay.c \
		$(REPLAY_MODEL_SRCS) $(CMOCKA_LIBS)

tests: $(O)/tests/test-replay $(REPLAY_BIN)

BENCH_EXTRA += bench-replay
.PHONY: bench-replay
bench-replay: $(REPLAY_BIN) $(O)/stalloc-plan
	$(Q)sh bench/replay-bench.sh $(O) $(SHARED)
