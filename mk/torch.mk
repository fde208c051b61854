# SPDX-License-Identifier: MIT
#
# mk/torch.mk - libstalloc-torch.so, the C++ shim PyTorch loads
# (tools/torch/stalloc-torch.cc: out of memory as an exception, the CUDA
# graph pool hooks), and its test (tests/torch-shim.tests).

CXX ?= g++
TORCH_SO := $(O)/libstalloc-torch.so
CXX_WARNINGS := -Wall -Wextra -Werror -Wformat=2 -Wcast-align \
	-Wnull-dereference -Wno-unused-parameter

all: $(TORCH_SO)

$(TORCH_SO): tools/torch/stalloc-torch.cc include/stalloc/stalloc.h \
		$(O)/libstalloc.so
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CXX) -std=c++17 -g -O2 -fPIC -fvisibility=hidden -Iinclude \
		$(CXX_WARNINGS) $(filter -fsanitize%,$(BASE_CFLAGS)) \
		$(CXXFLAGS) -shared $(SAN_LDFLAGS) -o $@ $< -L$(O) -lstalloc \
		-Wl,--no-undefined -Wl,-rpath,'$$ORIGIN' $(LDFLAGS)

$(O)/tests/torch-shim-test: tests/torch-shim-test.cc $(TORCH_SO)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O1 -Iinclude $(CXX_WARNINGS) \
		$(filter -fsanitize%,$(BASE_CFLAGS)) $(SAN_LDFLAGS) -o $@ $< \
		-ldl

tests: $(O)/tests/torch-shim-test

.PHONY: install-torch
install-torch: $(TORCH_SO)
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0755 $(TORCH_SO) $(DESTDIR)$(LIBDIR)/

install: install-torch
