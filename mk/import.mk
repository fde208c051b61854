# SPDX-License-Identifier: MIT
#
# mk/import.mk - stalloc-import, PyTorch's memory records (snapshot
# pickles, profiler traces) to stalloc traces: a launcher
# (tools/stalloc-import.in) for the Python module
# tools/python/stalloc/importer.py, installed with the package under
# $(LIBDIR)/stalloc/python; its tests (tests/import.sh, registered in
# tests/import.tests) and make bench-import (bench/import-bench.py).
# Documentation/import.rst.

IMPORT_BIN := $(O)/stalloc-import
IMPORT_PY := tools/python/stalloc/__init__.py tools/python/stalloc/importer.py
IMPORT_PYDIR := $(LIBDIR)/stalloc/python

all: $(IMPORT_BIN)

$(IMPORT_BIN): tools/stalloc-import.in $(IMPORT_PY)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)sed 's|@PYDIR@|$(abspath tools/python)|' $< >$@.tmp && \
		chmod 0755 $@.tmp && mv $@.tmp $@

.PHONY: install-import uninstall-import bench-import
install: install-import
install-import: $(IMPORT_BIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(IMPORT_PYDIR)/stalloc
	install -m 0644 $(IMPORT_PY) $(DESTDIR)$(IMPORT_PYDIR)/stalloc/
	sed 's|@PYDIR@|$(IMPORT_PYDIR)|' tools/stalloc-import.in \
		>$(DESTDIR)$(BINDIR)/stalloc-import
	chmod 0755 $(DESTDIR)$(BINDIR)/stalloc-import

uninstall: uninstall-import
uninstall-import:
	rm -f $(DESTDIR)$(BINDIR)/stalloc-import
	rm -rf $(DESTDIR)$(IMPORT_PYDIR)

tests: $(IMPORT_BIN)

BENCH_EXTRA += bench-import
bench-import: $(IMPORT_BIN) $(REPLAY_BIN)
	$(Q)python3 bench/import-bench.py $(O) $(SHARED)
