# SPDX-License-Identifier: MIT
# The admin tool for the control socket (mapper/ctl-server.c, ctl-answer.c): build/stallocctl.
# Built by the Makefile's TOOL_RULE from tools/cli/stallocctl.c.
TOOL_NAMES += stallocctl

# The held job of the control socket's end-to-end test.
tests: $(O)/tests/ctl-hold
$(O)/tests/ctl-hold: tests/ctl-hold.c $(O)/libstalloc.so
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out -fvisibility=hidden,$(BASE_CFLAGS)) $(CFLAGS) \
		$(SAN_LDFLAGS) -o $@ $< -L$(O) -lstalloc \
		-Wl,-rpath,'$$ORIGIN/..'
tests: $(O)/stalloc-replay
