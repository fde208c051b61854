# SPDX-License-Identifier: MIT
#
# stalloc - top-level Makefile (GNU make; no autotools, no CMake)
#
#   make                  library, tools, fake driver        -> build/
#   make check            build and run every test (SANITIZE=1: ASan+UBSan)
#   make bench            benchmarks, numbers printed
#   make demo             the README's main job
#   make install          PREFIX=/usr/local DESTDIR=
#   make installcheck     install into build/installcheck, build against it
#   make deps             install missing Debian packages (root)
#   make format-check     clang-format, house style
#   make lint             cppcheck and clang-tidy
#   make htmldocs         Documentation/ as HTML, API reference from headers
#   make fuzz             libFuzzer targets, FUZZ_SECONDS each; fuzz-regress
#
# Outputs go under $(O) (default build/, build/san/ with SANITIZE=1).
# V=1 shows the commands.

# The version lives in one place, include/stalloc/stalloc.h (the Python
# package's setup.py reads it there too).
stalloc_version = $(shell sed -n 's/^\#define STALLOC_VERSION_$(1) \([0-9]*\)$$/\1/p' \
	include/stalloc/stalloc.h)
VERSION_MAJOR := $(call stalloc_version,MAJOR)
VERSION_MINOR := $(call stalloc_version,MINOR)
VERSION_PATCH := $(call stalloc_version,PATCH)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

SANITIZE ?= 0
ifeq ($(SANITIZE),1)
O ?= build/san
else
O ?= build
endif
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
CUDA_HOME ?= /usr/local/cuda
PKG_CONFIG ?= pkg-config
CC ?= cc

ifeq ($(V),1)
Q :=
else
Q := @
endif

DEPS_SH ?= tools/deps.sh

# Goals that must work before the dependencies are installed.
NODEP_GOALS := deps clean distclean format-check format help htmldocs
ifneq ($(and $(filter deps,$(MAKECMDGOALS)),$(filter-out deps,$(MAKECMDGOALS))),)
# "make deps demo" on a fresh machine: this make read pkg-config before
# deps installed anything, so install first and make the other goals in a
# fresh make, which reads pkg-config again (tests/test-make-deps.sh).
DEPS_REST := $(filter-out deps,$(MAKECMDGOALS))
.PHONY: deps deps-then-rest $(DEPS_REST)
.NOTPARALLEL:
deps:
	$(Q)sh $(DEPS_SH)
# (make -n: nothing was installed, so only say what would be made)
deps-then-rest: deps
ifneq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
	@echo "make $(DEPS_REST)  # in a fresh make, after deps"
else
	$(Q)$(MAKE) --no-print-directory $(DEPS_REST)
endif
$(DEPS_REST): deps-then-rest
	@:
else # the rest of this file: "make deps" alone, or no deps goal at all
ifneq ($(filter-out $(NODEP_GOALS),$(or $(MAKECMDGOALS),all)),)
ifneq ($(shell $(PKG_CONFIG) --exists liburcu-bp && echo y),y)
$(error liburcu-bp not found by pkg-config: run "make deps" first)
endif
endif

HAVE_CUDA_H := $(shell test -f $(CUDA_HOME)/include/cuda.h && echo y)
HAVE_CMOCKA := $(shell $(PKG_CONFIG) --exists cmocka && echo y)
HAVE_LTTNG := $(shell $(PKG_CONFIG) --exists lttng-ust && echo y)

WARNINGS := -Wall -Wextra -Werror -Wshadow -Wmissing-prototypes \
	-Wstrict-prototypes -Wold-style-definition -Wformat=2 \
	-Wformat-security -Wpointer-arith -Wcast-align -Wundef -Wvla \
	-Wwrite-strings -Wnull-dereference -Wimplicit-fallthrough \
	-Wno-unused-parameter -Wno-missing-field-initializers

BASE_CFLAGS := -std=gnu11 -g -O2 -fPIC -fvisibility=hidden \
	-fno-strict-aliasing -D_GNU_SOURCE -Iinclude -I. $(WARNINGS)
ifeq ($(SANITIZE),1)
BASE_CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
SAN_LDFLAGS := -fsanitize=address,undefined
LOCKDEP ?= 1
endif
# The lock-order checker (lib/lock.h): on in the sanitizer and TSan builds,
# LOCKDEP=1 for any other.
ifeq ($(LOCKDEP),1)
BASE_CFLAGS += -DSTALLOC_LOCKDEP
endif

URCU_CFLAGS := $(shell $(PKG_CONFIG) --cflags liburcu-bp liburcu-cds 2>/dev/null)
URCU_LIBS := $(shell $(PKG_CONFIG) --libs liburcu-bp liburcu-cds 2>/dev/null)
ZLIB_LIBS := $(shell $(PKG_CONFIG) --libs zlib 2>/dev/null || echo -lz)
CMOCKA_CFLAGS := $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
CMOCKA_LIBS := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null)
CUDA_CFLAGS := -isystem $(CUDA_HOME)/include

ALL_CFLAGS = $(BASE_CFLAGS) $(URCU_CFLAGS) $(CFLAGS)
LIB_LDLIBS := $(URCU_LIBS) $(ZLIB_LIBS) -ldl -lpthread -lm

# ---------------------------------------------------------------- library
LIB_SRCS := lib/util.c lib/lock.c lib/options.c vmm/space.c vmm/map.c \
	vmm/backend-host.c \
	$(sort $(wildcard planner/*.c)) \
	$(sort $(filter-out tracing/lttng-provider.c,$(wildcard tracing/*.c))) \
	$(sort $(wildcard mapper/*.c))
ifeq ($(HAVE_CUDA_H),y)
LIB_SRCS += vmm/backend-cuda.c
else
LIB_SRCS += vmm/backend-cuda-none.c
endif
LIB_OBJS := $(LIB_SRCS:%.c=$(O)/obj/%.o)

SONAME := libstalloc.so.$(VERSION_MAJOR)
LIB_SO := $(O)/libstalloc.so.$(VERSION)
LIB_A := $(O)/libstalloc-internal.a

# ---------------------------------------------------------------- tests
FAKE_SO := $(O)/libcuda-fake.so
FAKE_SRCS := $(wildcard tests/fakecuda/fakecuda*.c)
TEST_NAMES := test-vmm test-util test-vmm-faults test-planner test-pack \
	test-recorder test-mapper test-mapper-plan test-mapper-streams \
	test-lock test-options test-clear test-segs
TEST_BINS := $(TEST_NAMES:%=$(O)/tests/%)
ifeq ($(HAVE_CUDA_H),y)
TEST_BINS += $(O)/tests/fakecuda-selftest
endif
BENCH_BINS := $(O)/bench/bench-vmm $(O)/bench/bench-pack $(O)/bench/bench-mapper \
	$(O)/bench/bench-tp
DEMO_BIN := $(O)/stalloc-vmm-demo

# Command-line tools (tools/cli/): public headers only, linked to the
# shared library, every one by TOOL_RULE below.  Tool NAME is built from
# tools/cli/NAME.c and NAME_SRCS, its other sources, and is rebuilt when
# NAME_HDRS change; mk/*.mk add their tools to TOOL_NAMES and set these.
TOOL_NAMES := stalloc-plan stalloc-timeline stalloc-options
LINT_SRCS :=
BENCH_EXTRA :=

# Each feature's own rules (tools, tests, benchmarks) live in mk/*.mk.
include $(sort $(wildcard mk/*.mk))

PROGRAMS := $(TOOL_NAMES:%=$(O)/%)
TOOL_SRCS := $(sort $(foreach t,$(TOOL_NAMES),tools/cli/$(t).c $($(t)_SRCS)))

.PHONY: all check bench demo install uninstall deps clean distclean \
	format format-check lint help tests installcheck

LTTNG_SO := $(O)/libstalloc-lttng.so

all: $(LIB_SO) $(O)/libstalloc.so $(LIB_A) $(PROGRAMS) \
	$(if $(HAVE_CUDA_H),$(FAKE_SO)) $(if $(HAVE_LTTNG),$(LTTNG_SO))

# The lttng-ust provider: a library of its own, loaded on demand.
$(LTTNG_SO): tracing/lttng-provider.c tracing/lttng-provider.h tracing/tp.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(BASE_CFLAGS) -Wno-redundant-decls \
		$(shell $(PKG_CONFIG) --cflags lttng-ust) $(CFLAGS) -shared \
		$(SAN_LDFLAGS) -o $@ $< $(shell $(PKG_CONFIG) --libs lttng-ust)

$(O)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(if $(findstring backend-cuda,$<),$(CUDA_CFLAGS)) \
		-MMD -MP -c -o $@ $<

$(LIB_SO): $(LIB_OBJS) lib/libstalloc.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) \
		-Wl,--version-script=lib/libstalloc.map -Wl,--no-undefined \
		-Wl,-z,defs $(SAN_LDFLAGS) $(LDFLAGS) -o $@ $(LIB_OBJS) \
		$(LIB_LDLIBS)

$(O)/libstalloc.so: $(LIB_SO)
	$(Q)ln -sf libstalloc.so.$(VERSION) $(O)/$(SONAME)
	$(Q)ln -sf libstalloc.so.$(VERSION) $@

$(LIB_A): $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(FAKE_SO): $(FAKE_SRCS) $(wildcard tests/fakecuda/*.h)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(filter-out -D_GNU_SOURCE,$(BASE_CFLAGS)) $(CUDA_CFLAGS) \
		$(CFLAGS) -shared \
		$(SAN_LDFLAGS) -o $@ $(FAKE_SRCS) -lpthread

# The one link rule of the command-line tools (see TOOL_NAMES).
define TOOL_RULE
$$(O)/$(1): tools/cli/$(1).c $$($(1)_SRCS) $$($(1)_HDRS) $$(O)/libstalloc.so
	@$$(if $$(Q),echo "  CC      $$@")
	$$(Q)$$(CC) $$(filter-out -fvisibility=hidden,$$(BASE_CFLAGS)) \
		$$(CFLAGS) $$(SAN_LDFLAGS) -o $$@ $$(filter %.c,$$^) \
		-L$$(O) -lstalloc -Wl,-rpath,'$$$$ORIGIN' \
		-Wl,-rpath,'$$$$ORIGIN/../lib' $$(LDFLAGS)
endef
$(foreach t,$(TOOL_NAMES),$(eval $(call TOOL_RULE,$(t))))

# Test programs link the internal archive: they test internal interfaces.
TEST_CFLAGS = $(ALL_CFLAGS) $(CMOCKA_CFLAGS) -I. -Wno-cast-align
TEST_LDLIBS = $(LIB_A) $(CMOCKA_LIBS) $(LIB_LDLIBS)
SHARED ?= $(abspath ../shared)

$(O)/tests/%: tests/%.c $(LIB_A) tests/vmm-fixture.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(TEST_CFLAGS) $(SAN_LDFLAGS) -o $@ $< $(TEST_LDLIBS)

$(addprefix $(O)/tests/,test-mapper test-mapper-plan test-mapper-streams): \
	tests/mapper-fixture.h

$(O)/tests/fakecuda-selftest: tests/fakecuda/selftest.c $(FAKE_SO)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(TEST_CFLAGS) $(CUDA_CFLAGS) $(SAN_LDFLAGS) -o $@ $< \
		$(CMOCKA_LIBS) -ldl -lpthread

$(O)/bench/%: bench/%.c $(LIB_A) tests/vmm-fixture.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(TEST_CFLAGS) $(SAN_LDFLAGS) -o $@ $< $(TEST_LDLIBS)

$(DEMO_BIN): tests/vmm-demo.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(TEST_CFLAGS) $(SAN_LDFLAGS) -o $@ $< $(TEST_LDLIBS)

# The public headers must compile as C99 (pedantic) and as C++11.
$(O)/tests/header-c99.stamp: $(wildcard include/stalloc/*.h) tests/header-cxx.cc
	@mkdir -p $(dir $@)
	$(Q)for h in $(notdir $(wildcard include/stalloc/*.h)); do \
		echo "#include <stalloc/$$h>" | $(CC) -std=c99 -pedantic \
		-Wall -Wextra -Werror -Iinclude -x c -fsyntax-only - || exit 1; \
		echo "#include <stalloc/$$h>" | $(CXX) -std=c++11 -pedantic \
		-Wall -Wextra -Werror -Iinclude -x c++ -fsyntax-only - || \
		exit 1; done
	$(Q)$(CXX) -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude \
		-fsyntax-only tests/header-cxx.cc
	$(Q)touch $@

# A program using the public API only, for the lttng end-to-end test.
$(O)/tests/lttng-demo: tests/lttng-demo.c $(O)/libstalloc.so
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out -fvisibility=hidden,$(BASE_CFLAGS)) $(CFLAGS) \
		$(SAN_LDFLAGS) -o $@ $< -L$(O) -lstalloc \
		-Wl,-rpath,'$$ORIGIN/..'

tests: all $(TEST_BINS) $(O)/tests/header-c99.stamp $(O)/tests/lttng-demo

check: tests
ifneq ($(HAVE_CMOCKA),y)
	$(error cmocka not found by pkg-config: run "make deps" first)
endif
	$(Q)O=$(O) HAVE_CUDA_H=$(HAVE_CUDA_H) SHARED=$(SHARED) \
		sh tests/run-tests.sh

bench: all $(BENCH_BINS)
	$(Q)$(O)/bench/bench-vmm host
ifeq ($(HAVE_CUDA_H),y)
	$(Q)STALLOC_LIBCUDA=$(abspath $(FAKE_SO)) $(O)/bench/bench-vmm cuda
endif
	$(Q)$(O)/bench/bench-mapper
	$(Q)$(O)/bench/bench-tp $(abspath $(LTTNG_SO))
	$(Q)python3 bench/plan-bench.py $(O) $(SHARED)
	$(Q)for t in $(BENCH_EXTRA); do \
		$(MAKE) --no-print-directory $$t || exit 1; done

DEMO_TRACES = $(wildcard $(SHARED)/workloads/cpu-torch/*.trace)

demo: all $(DEMO_BIN)
	$(Q)STALLOC_BACKEND=$${STALLOC_BACKEND:-auto} $(DEMO_BIN)
	$(Q)for t in $(DEMO_TRACES); do \
		echo; $(O)/stalloc-plan -o $(O)/$$(basename $$t .trace).plan \
		$$t || exit 1; \
		echo "  plan written to $(O)/$$(basename $$t .trace).plan"; \
	done
	@echo; echo "== replay: each trace under libstalloc (host backend)" \
		"and models of PyTorch's allocator (Documentation/replay.rst)"
	$(Q)python3 tools/cli/replay/compare.py $(O) $(DEMO_TRACES)
	@echo; echo "== timelines (Documentation/tracing.rst)"
	$(Q)for t in $(DEMO_TRACES); do n=$$(basename $$t .trace); \
		$(O)/stalloc-timeline -o $(O)/$$n.svg --plan $(O)/$$n.plan \
		$$t >/dev/null || exit 1; \
		echo "  timeline drawn: $(O)/$$n.svg"; \
	done
	$(Q)if nvidia-smi >/dev/null 2>&1; then echo; \
		echo "A GPU is here: to use stalloc as PyTorch's allocator,"; \
		echo "  pip install --no-build-isolation . (or" \
			"PYTHONPATH=tools/python), then in the script:"; \
		echo "  import stalloc; stalloc.enable()   # first; see" \
			"Documentation/pytorch.rst"; fi

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR)/stalloc \
		$(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 0755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	$(if $(HAVE_LTTNG),install -m 0755 $(LTTNG_SO) $(DESTDIR)$(LIBDIR)/)
	ln -sf libstalloc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf libstalloc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libstalloc.so
	install -m 0644 include/stalloc/*.h $(DESTDIR)$(INCDIR)/stalloc/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCDIR@|$(INCDIR)|' -e 's|@VERSION@|$(VERSION)|' \
		lib/stalloc.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/stalloc.pc
	$(if $(PROGRAMS),install -m 0755 $(PROGRAMS) $(DESTDIR)$(BINDIR)/)

# Install into a scratch tree and build a program against it with pkg-config.
installcheck:
	$(Q)rm -rf $(O)/installcheck
	$(Q)$(MAKE) --no-print-directory install PREFIX=$(abspath $(O))/installcheck \
		>/dev/null
	$(Q)r=$(abspath $(O))/installcheck; \
		$(CC) -Wall -Werror -o $$r/smoke tests/install-smoke.c \
		$$(PKG_CONFIG_PATH=$$r/lib/pkgconfig $(PKG_CONFIG) --cflags \
		--libs stalloc) && LD_LIBRARY_PATH=$$r/lib $$r/smoke

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libstalloc.so* \
		$(DESTDIR)$(LIBDIR)/pkgconfig/stalloc.pc
	rm -rf $(DESTDIR)$(INCDIR)/stalloc

deps:
	$(Q)sh $(DEPS_SH)

SOURCES = $(shell git ls-files '*.c' '*.h' 2>/dev/null || \
	find include lib vmm planner mapper tracing tools tests bench \
	-name '*.[ch]')

format:
	clang-format -i $(SOURCES)

format-check:
	$(Q)clang-format --dry-run --Werror $(SOURCES) && \
		echo "format-check: $(words $(SOURCES)) files clean"

lint:
	$(Q)cppcheck --quiet --error-exitcode=1 --inline-suppr \
		--enable=warning,performance,portability --std=c11 \
		-D__GNUC__ -D__STDC__=1 -D__x86_64__ -D__linux__ -Iinclude \
		$(URCU_CFLAGS) \
		$(LIB_SRCS) $(FAKE_SRCS) $(TOOL_SRCS) \
		$(filter-out $(TOOL_SRCS),$(LINT_SRCS)) && \
		echo "lint: cppcheck clean"
	@mkdir -p $(O)
	$(Q)clang-tidy --quiet $(LIB_SRCS) $(TOOL_SRCS) \
		$(filter-out $(TOOL_SRCS),$(LINT_SRCS)) -- \
		$(filter-out -f%,$(BASE_CFLAGS)) \
		$(URCU_CFLAGS) $(CUDA_CFLAGS) >$(O)/clang-tidy.log 2>&1; \
		rc=$$?; grep -v "warnings generated" $(O)/clang-tidy.log; \
		test $$rc = 0 && echo "lint: clang-tidy clean"

clean:
	rm -rf build

distclean: clean

help:
	@sed -n '3,19p' Makefile

# ---------------------------------------------------------------- fuzzing
# libFuzzer targets (clang; not part of all or check).  make fuzz runs each
# target FUZZ_SECONDS; make fuzz-regress replays the committed inputs.
FUZZ_CC ?= clang
FUZZ_O := $(O)/fuzz
FUZZ_CFLAGS := -std=gnu11 -g -O1 -D_GNU_SOURCE -Iinclude -I. $(CUDA_CFLAGS) \
	$(URCU_CFLAGS) -fsanitize=fuzzer,address,undefined
FUZZ_LIB_OBJS := $(LIB_SRCS:%.c=$(FUZZ_O)/obj/%.o)
FUZZ_BINS := $(patsubst %,$(FUZZ_O)/fuzz-%,trace csv plan planner ctl)
FUZZ_SECONDS ?= 60

.PHONY: fuzz fuzz-build fuzz-regress
$(FUZZ_O)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<

$(FUZZ_O)/fuzz-%: tests/fuzz/fuzz-%.c tests/fuzz/fuzz-common.h $(FUZZ_LIB_OBJS)
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LIB_OBJS) $(LIB_LDLIBS)

fuzz-build: $(FUZZ_BINS)

.SECONDARY: $(FUZZ_LIB_OBJS)

fuzz: fuzz-build all
	$(Q)SHARED=$(SHARED) STALLOC_PLAN=$(O)/stalloc-plan \
		sh tests/fuzz/run-fuzz.sh $(FUZZ_O) $(FUZZ_SECONDS)

fuzz-regress: fuzz-build
	$(Q)sh tests/fuzz/run-regress.sh $(FUZZ_O)

-include $(shell find $(O)/obj -name '*.d' 2>/dev/null)
-include $(shell find $(FUZZ_O)/obj -name '*.d' 2>/dev/null)

# On a machine with an NVIDIA GPU: the vmm and runtime suites, the demo and
# the vmm benchmark on the real driver, then PyTorch (tools/gpu/) when a
# CUDA build of it is there; torch-e2e.py --ddp 2 skips itself (exit 0)
# with fewer than two GPUs.  Documentation/testing.rst.
.PHONY: gpucheck
# The option tables of README.md and Documentation/options.rst, from the
# one table in lib/options.c (tests/test-options.sh checks them).
.PHONY: options-doc
options-doc: $(O)/stalloc-options
	$(Q)sh tools/options-doc.sh $(O)

gpucheck: tests $(O)/bench/bench-vmm $(DEMO_BIN)
	$(Q)O=$(O) sh tools/gpu/gpucheck.sh
	$(Q)if python3 -c 'import sys, torch; \
		sys.exit(not torch.cuda.is_available())' 2>/dev/null; then \
		python3 tools/gpu/torch-checks.py && \
		python3 tools/gpu/torch-e2e.py --model tiny --steps 12 \
			--graphs --out $(O)/gpu && \
		python3 tools/gpu/torch-e2e.py --model tiny --steps 12 \
			--ddp 2 --out $(O)/gpu; \
	else echo "gpucheck: no CUDA build of PyTorch: torch checks skipped"; fi

endif # deps first
