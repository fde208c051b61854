# SPDX-License-Identifier: MIT
#
# Documentation/conf.py - Sphinx configuration for make htmldocs (mk/docs.mk)
#
# The API reference (core-api/) comes from the public headers' kernel-doc
# comments: Doxygen reads them (Documentation/Doxyfile) into XML, Breathe
# renders that here.  STALLOC_DOXYGEN_XML names the XML directory; make
# htmldocs sets it and STALLOC_VERSION.
import logging
import os
import re
import xml.etree.ElementTree as ET

project = "stalloc"
author = "the stalloc authors"
copyright = "the stalloc authors (MIT)"
version = release = os.environ.get("STALLOC_VERSION", "")

root_doc = "index"
source_suffix = ".rst"
exclude_patterns = []
extensions = ["breathe"]

here = os.path.dirname(os.path.abspath(__file__))
breathe_projects = {
    "stalloc": os.environ.get(
        "STALLOC_DOXYGEN_XML",
        os.path.join(here, os.pardir, "build", "doxygen", "xml")),
}
breathe_default_project = "stalloc"
breathe_domain_by_extension = {"h": "c"}
breathe_show_include = True
primary_domain = "c"
highlight_language = "none"

html_theme = "alabaster"
html_title = "stalloc documentation"
html_show_sourcelink = False


# C keeps struct tags and functions apart, Sphinx's C domain does not: a
# struct named like a function (struct stalloc_stats and stalloc_stats())
# is reported as a duplicate declaration.  Only those reports are dropped:
# a struct whose name Doxygen's index also lists as a function.
def _functions():
    index = os.path.join(breathe_projects["stalloc"], "index.xml")
    try:
        root = ET.parse(index).getroot()
    except (OSError, ET.ParseError):
        return set()
    return {m.findtext("name") for m in root.iter("member")
            if m.get("kind") == "function"}


class _TagClash(logging.Filter):
    pattern = re.compile(r"Duplicate C declaration.*\n"
                         r"Declaration is '\.\. c:struct:: (\w+)'")

    def __init__(self, names):
        super().__init__()
        self.names = names

    def filter(self, record):
        m = self.pattern.search(record.getMessage())
        return not (m and m.group(1) in self.names)


def setup(app):
    logging.getLogger("sphinx.sphinx.domains.c").addFilter(
        _TagClash(_functions()))
