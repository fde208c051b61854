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

TORCH_CXXFLAGS = -std=c++17 -g -O2 -fPIC -fvisibility=hidden -Iinclude \
	$(CXX_WARNINGS) $(filter -fsanitize%,$(BASE_CFLAGS)) $(CXXFLAGS)
TORCH_OBJS := $(O)/obj/torch/stalloc-torch.o $(O)/obj/torch/c10-error.o \
	$(O)/obj/torch/c10-error-abi0.o

$(O)/obj/torch/%.o: tools/torch/%.cc tools/torch/shim.h \
		include/stalloc/stalloc.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX     $@")
	$(Q)$(CXX) $(TORCH_CXXFLAGS) -c -o $@ $<

# the pre-C++11 std::string, for a libc10 built with it (tools/torch/shim.h)
$(O)/obj/torch/c10-error-abi0.o: TORCH_CXXFLAGS += -D_GLIBCXX_USE_CXX11_ABI=0

$(TORCH_SO): $(TORCH_OBJS) $(O)/libstalloc.so
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CXX) $(TORCH_CXXFLAGS) -shared $(SAN_LDFLAGS) -o $@ \
		$(TORCH_OBJS) -L$(O) -lstalloc -ldl \
		-Wl,--no-undefined -Wl,-rpath,'$$ORIGIN' $(LDFLAGS)

$(O)/tests/torch-shim-test: tests/torch-shim-test.cc $(TORCH_SO)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O1 -Iinclude $(CXX_WARNINGS) \
		$(filter -fsanitize%,$(BASE_CFLAGS)) $(SAN_LDFLAGS) -o $@ $< \
		-ldl

# stand-ins for PyTorch's libc10 in both string ABIs (tests/mock-c10.cc)
MOCK_C10 := $(O)/tests/mock-c10/libc10.so $(O)/tests/mock-c10-abi0/libc10.so

$(MOCK_C10): tests/mock-c10.cc
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O1 -fPIC -shared -fvisibility=hidden \
		$(CXX_WARNINGS) $(filter -fsanitize%,$(BASE_CFLAGS)) \
		$(if $(findstring abi0,$@),-D_GLIBCXX_USE_CXX11_ABI=0) \
		$(SAN_LDFLAGS) -o $@ $<

# PyTorch's exception translation, for tests/torch/run_oom.py
$(O)/tests/libtorch-oom-probe.so: tests/torch-oom-probe.cc
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++17 -g -O1 -fPIC -shared -fvisibility=hidden \
		$(CXX_WARNINGS) $(filter -fsanitize%,$(BASE_CFLAGS)) \
		$(SAN_LDFLAGS) -o $@ $<

tests: $(O)/tests/torch-shim-test $(MOCK_C10) $(O)/tests/libtorch-oom-probe.so

.PHONY: install-torch
install-torch: $(TORCH_SO)
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0755 $(TORCH_SO) $(DESTDIR)$(LIBDIR)/

install: install-torch
