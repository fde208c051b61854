# SPDX-License-Identifier: MIT
#
# mk/replay.mk - stalloc-replay (tools/stalloc-replay.c, its set-up and
# report in tools/replay/setup.c and report.c, and the models of
# PyTorch's allocator in tools/replay/), its unit tests (tests/test-replay.c),
# the shell tests (tests/replay.sh, registered in tests/replay.tests) and
# make bench-replay (bench/replay-bench.sh).  Documentation/replay.rst.

REPLAY_MODEL_SRCS := tools/replay/caching.c tools/replay/expandable.c
REPLAY_MODEL_HDRS := tools/replay/replay.h tools/replay/model.h
REPLAY_TOOL_SRCS := tools/stalloc-replay.c tools/replay/setup.c \
	tools/replay/report.c
REPLAY_BIN := $(O)/stalloc-replay

EXTRA_PROGRAMS += $(REPLAY_BIN)
LINT_SRCS += $(REPLAY_TOOL_SRCS) $(REPLAY_MODEL_SRCS)

# A tool: public headers only, linked to the shared library.
$(REPLAY_BIN): $(REPLAY_TOOL_SRCS) $(REPLAY_MODEL_SRCS) \
		$(REPLAY_MODEL_HDRS) tools/replay/tool.h $(O)/libstalloc.so
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(filter-out -fvisibility=hidden,$(BASE_CFLAGS)) $(CFLAGS) \
		$(SAN_LDFLAGS) -o $@ $(REPLAY_TOOL_SRCS) \
		$(REPLAY_MODEL_SRCS) -L$(O) -lstalloc \
		-Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib' $(LDFLAGS)

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
