# SPDX-License-Identifier: MIT
#
# mk/cpu.mk - libstalloc-cpu.so, the LD_PRELOAD library for PyTorch CPU
# tensors (tools/preload/stalloc-cpu.c; Documentation/cpu-preload.rst), and its
# install target.  Its test is tests/cpu.tests (tests/torch/).

CPU_SO := $(O)/libstalloc-cpu.so

all: $(CPU_SO)

LINT_SRCS += tools/preload/stalloc-cpu.c

$(CPU_SO): tools/preload/stalloc-cpu.c include/stalloc/stalloc.h \
		$(O)/libstalloc.so
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(BASE_CFLAGS) $(CFLAGS) -shared $(SAN_LDFLAGS) -o $@ $< \
		-L$(O) -lstalloc -Wl,--no-undefined -Wl,-z,defs \
		-Wl,-rpath,'$$ORIGIN' $(LDFLAGS) -lpthread

.PHONY: install-cpu
install-cpu: $(CPU_SO)
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0755 $(CPU_SO) $(DESTDIR)$(LIBDIR)/
