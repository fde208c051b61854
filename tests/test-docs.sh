#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-docs.sh - make htmldocs builds Documentation/ with no warning,
# its API reference names every function libstalloc.so exports, and a
# public function left undocumented, or a kernel-doc comment naming a
# parameter the function lacks, fails the build.  Prints TAP.  O: build dir
# (for libstalloc.so); the pages are built in a scratch directory.
set -u
O=${O:-build}
. tests/tap.sh
unset MAKEFLAGS MFLAGS MAKELEVEL

make --no-print-directory -s htmldocs O="$tmp/o" >"$tmp/out" 2>"$tmp/err"
rc=$?
ok $rc "make htmldocs (exit $rc)"
[ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"
[ ! -s "$tmp/err" ]
ok $? "make htmldocs prints no warning"

# Every exported function has its entry (Sphinx's C domain: id="c.NAME").
missing=""
nr=0
for f in $(nm -D --defined-only "$O/libstalloc.so" |
		awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }'); do
	nr=$((nr + 1))
	cat "$tmp"/o/htmldocs/core-api/*.html 2>/dev/null |
		grep -q "id=\"c\\.$f\"" || missing="$missing $f"
done
[ -n "$missing" ] && echo "# not in the API reference:$missing"
[ "$nr" -gt 20 ] && [ -z "$missing" ]
ok $? "the API reference has each of the $nr exported functions"

# A copy of the headers with one fault each: Doxygen must refuse it.
fault() {
	rm -rf "$tmp/tree" "$tmp/dx"
	mkdir -p "$tmp/tree" "$tmp/dx"
	cp -R include Documentation "$tmp/tree/"
	printf '%s\n' "$1" >>"$tmp/tree/include/stalloc/trace.h"
	(cd "$tmp/tree" && DOXYGEN_OUT="$tmp/dx" doxygen Documentation/Doxyfile) \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ "$rc" != 0 ] && grep -q "$2" "$tmp/err"
	ok $? "$3 fails the build (exit $rc)"
}
fault 'STALLOC_API int stalloc_undocumented(void);' stalloc_undocumented \
	"an undocumented public function"
fault '/**
 * stalloc_misdocumented() - a function
 * @nosuch: not one of its parameters
 */
STALLOC_API void stalloc_misdocumented(int x);' nosuch \
	"a kernel-doc parameter the function lacks"

[ "$fails" = 0 ]
