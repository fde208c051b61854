# SPDX-License-Identifier: MIT
#
# mk/robust.mk - reliability tests: fault sweep and perturbations over the
# replayed shared traces (tests/test-robust.c), concurrency torture
# (tests/test-torture.c), and make check-tsan: the library, the fake driver
# and the torture test built with ThreadSanitizer into build/tsan and run.

ROBUST_TESTS := $(O)/tests/test-robust $(O)/tests/test-torture
tests: $(ROBUST_TESTS)
$(ROBUST_TESTS): tests/robust-common.h

# ThreadSanitizer: a build of its own (the library's objects too), then
# the torture test on the host backend and on the fake driver.  TSan
# reports fail the run (exitcode 66); tests/tsan.supp says what is
# suppressed and why.
TSAN_O := build/tsan
# gcc warns (-Wtsan, an error with -Werror) that TSan does not model a
# standalone __atomic_thread_fence; the host backend's fences only order
# host work that is already ordered, so the warning is turned off.
TSAN_FLAGS := -fsanitize=thread -include $(abspath tests/tsan-urcu.h) $(shell $(CC) -Werror -Wno-tsan -E -x c \
	/dev/null >/dev/null 2>&1 && echo -Wno-tsan)
# 300 ms per configuration: every suppressed report (the RCU callbacks'
# frees, which TSan cannot see ordered after the grace period) makes the
# next ones slower, and a 2 s run spends minutes in them at tear-down.
TSAN_TORTURE_MS ?= 300
TSAN_RUN = TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 \
	suppressions=$(abspath tests/tsan.supp) $(TSAN_OPTIONS)" \
	CMOCKA_MESSAGE_OUTPUT=TAP SHARED=$(SHARED) \
	TORTURE_MS=$(TSAN_TORTURE_MS)

.PHONY: check-tsan
check-tsan:
	$(Q)$(MAKE) --no-print-directory O=$(TSAN_O) SANITIZE=0 LOCKDEP=1 \
		CFLAGS="$(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)" \
		$(TSAN_O)/tests/test-torture \
		$(if $(HAVE_CUDA_H),$(TSAN_O)/libcuda-fake.so)
	$(Q)$(TSAN_RUN) $(TSAN_O)/tests/test-torture host
ifeq ($(HAVE_CUDA_H),y)
	$(Q)$(TSAN_RUN) STALLOC_LIBCUDA=$(abspath $(TSAN_O)/libcuda-fake.so) \
		$(TSAN_O)/tests/test-torture cuda
endif
