# SPDX-License-Identifier: MIT
#
# mk/docs.mk - make htmldocs: Documentation/ as HTML in $(O)/htmldocs, with
# the API reference (Documentation/core-api/) from the public headers'
# kernel-doc comments: Doxygen (Documentation/Doxyfile) writes XML to
# $(O)/doxygen, Sphinx renders it with Breathe (Documentation/conf.py).
# A warning of either tool is an error.  Needs doxygen, sphinx-build and
# Breathe (make deps); tests/docs.tests runs it in make check when they are
# there.  Documentation/process/dependencies.rst says why these tools.
DOXYGEN ?= doxygen
SPHINXBUILD ?= sphinx-build
DOCS_O = $(O)/htmldocs
DOXYGEN_O = $(O)/doxygen

.PHONY: htmldocs
htmldocs:
	$(Q)for t in $(DOXYGEN) $(SPHINXBUILD); do \
		command -v $$t >/dev/null || { echo "htmldocs: $$t not" \
		"found: run make deps" >&2; exit 1; }; done
	$(Q)rm -rf $(DOXYGEN_O) && mkdir -p $(DOXYGEN_O)
	@$(if $(Q),echo "  DOXYGEN $(DOXYGEN_O)/xml")
	$(Q)DOXYGEN_OUT=$(DOXYGEN_O) $(DOXYGEN) Documentation/Doxyfile
	@$(if $(Q),echo "  SPHINX  $(DOCS_O)")
	$(Q)STALLOC_DOXYGEN_XML=$(abspath $(DOXYGEN_O))/xml \
		STALLOC_VERSION=$(VERSION) $(SPHINXBUILD) -W --keep-going -q \
		-E -b html -d $(O)/doctrees Documentation $(DOCS_O)
	@echo "htmldocs: $(DOCS_O)/index.html"
