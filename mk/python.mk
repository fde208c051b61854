# SPDX-License-Identifier: MIT
#
# mk/python.mk - make install puts the Python package (tools/python/stalloc,
# with the shared libraries inside it: setup.py, pyproject.toml) into
# PYTHONDIR, its commands (stalloc-lttng, stalloc-import) into BINDIR.  pip
# installs it (--target: Debian's pip puts --prefix installs under
# PREFIX/local); PYTHON must have pip, setuptools and wheel (make deps), else
# the package is left out with a warning.  Its test is tests/pip.tests.

PYTHON ?= python3
# PREFIX/lib/pythonX.Y/dist-packages on Debian (on its sys.path for
# PREFIX=/usr/local), site-packages elsewhere; evaluated when used
PYTHONDIR ?= $(shell $(PYTHON) -c 'import os, sys, sysconfig; \
	print(os.path.join(sys.argv[1], "lib", "python%d.%d" % \
	sys.version_info[:2], "dist-packages" if "posix_local" in \
	sysconfig.get_scheme_names() else "site-packages"))' $(PREFIX))

.PHONY: install-python
install-python: all
	$(Q)if ! $(PYTHON) -c 'import setuptools, wheel, pip' 2>/dev/null; \
	then echo "install: WARNING: the Python package is not installed:" \
		"$(PYTHON) lacks pip, setuptools or wheel (make deps, or" \
		"PYTHON=/usr/bin/python3)" >&2; exit 0; fi; \
	d="$(DESTDIR)$(PYTHONDIR)"; \
	STALLOC_O=$(O) $(PYTHON) -m pip install -q --no-build-isolation \
		--root-user-action=ignore --no-index --no-deps \
		--no-cache-dir --upgrade --target "$$d" . \
	&& install -d $(DESTDIR)$(BINDIR) \
	&& for f in "$$d"/bin/*; do install -m 0755 "$$f" \
		$(DESTDIR)$(BINDIR)/ || exit 1; done \
	&& rm -rf "$$d/bin" && echo "install: Python package in $$d"

install: install-python

.PHONY: uninstall-python
uninstall-python:
	rm -rf $(DESTDIR)$(PYTHONDIR)/stalloc \
		$(DESTDIR)$(PYTHONDIR)/stalloc-*.dist-info \
		$(DESTDIR)$(BINDIR)/stalloc-lttng $(DESTDIR)$(BINDIR)/stalloc-import

uninstall: uninstall-python
