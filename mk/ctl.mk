# SPDX-License-Identifier: MIT
# The admin tool for the control socket (mapper/ctl-server.c, ctl-answer.c): build/stallocctl.
EXTRA_PROGRAMS += $(O)/stallocctl
LINT_SRCS += tools/stallocctl.c

$(O)/stallocctl: tools/stallocctl.c $(O)/libstalloc.so
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(filter-out -fvisibility=hidden,$(BASE_CFLAGS)) $(CFLAGS) \
		$(SAN_LDFLAGS) -o $@ $< -L$(O) -lstalloc \
		-Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib' $(LDFLAGS)

# The held job of the control socket's end-to-end test.
tests: $(O)/tests/ctl-hold
$(O)/tests/ctl-hold: tests/ctl-hold.c $(O)/libstalloc.so
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out -fvisibility=hidden,$(BASE_CFLAGS)) $(CFLAGS) \
		$(SAN_LDFLAGS) -o $@ $< -L$(O) -lstalloc \
		-Wl,-rpath,'$$ORIGIN/..'
tests: $(O)/stalloc-replay
