#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tools/options-doc.sh O - rewrite the generated option tables (between
# the "options:begin" and "options:end" marker lines) of README.md and
# Documentation/options.rst from build O's stalloc-options (make
# options-doc).
set -eu
O=${1:-build}

# splice FILE FORMAT: replace the lines between the markers
splice() {
	"$O/stalloc-options" "$2" >"$1.gen"
	awk -v gen="$1.gen" '
		/options:begin/ { print; while ((getline l < gen) > 0) print l; skip = 1; next }
		/options:end/ { skip = 0 }
		!skip { print }
	' "$1" >"$1.new"
	rm -f "$1.gen"
	mv "$1.new" "$1"
}

splice README.md --markdown
splice Documentation/options.rst --rst
