#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-options.sh - the option table is the one place options are
# read and documented: the README's table and Documentation/options.rst are
# what stalloc-options generates now; no source file outside lib/options.c
# reads a STALLOC_* variable with getenv(); every STALLOC_* name the
# library and the shipped libraries mention is in the table; a refused
# value names the variable and the accepted range.  Prints TAP.  O: build.
set -u
O=${O:-build}
OPTS="$O/stalloc-options"
. tests/tap.sh

# section FILE: the generated text between the options markers
section() {
	sed -n '/options:begin/,/options:end/p' "$1" | sed '1d;$d'
}

"$OPTS" --markdown >"$tmp/md"
section README.md >"$tmp/readme"
cmp -s "$tmp/md" "$tmp/readme"
ok $? "README's table is stalloc-options --markdown (make options-doc)"

"$OPTS" --rst >"$tmp/rst"
section Documentation/options.rst >"$tmp/doc"
cmp -s "$tmp/rst" "$tmp/doc"
ok $? "Documentation/options.rst is stalloc-options --rst (make options-doc)"

srcs="lib vmm planner mapper tracing tools"
grep -rn --include='*.c' --include='*.cc' --include='*.h' \
	'getenv("STALLOC_' $srcs | grep -v '^lib/options.c:' >"$tmp/getenv"
[ ! -s "$tmp/getenv" ]
ok $? "no getenv(\"STALLOC_...\") outside lib/options.c$(sed 's/^/; /' "$tmp/getenv" | tr -d '\n')"

"$OPTS" --markdown | grep -o 'STALLOC_[A-Z_]*' | sort -u >"$tmp/known"
grep -rhoE --include='*.c' --include='*.cc' --include='*.h' \
	'"STALLOC_[A-Z_]+"' $srcs | tr -d '"' | sort -u >"$tmp/used"
comm -23 "$tmp/used" "$tmp/known" >"$tmp/unknown"
[ ! -s "$tmp/unknown" ]
ok $? "every STALLOC_* the sources name is in the table$(sed 's/^/; missing /' "$tmp/unknown" | tr -d '\n')"

STALLOC_SEGMENT_SIZE=huge "$OPTS" >"$tmp/out"
rc=$?
[ "$rc" = 1 ] && grep -q 'STALLOC_SEGMENT_SIZE="huge" is not accepted (want 1 or more bytes' "$tmp/out"
ok $? "a refused value names the variable and the range (exit $rc)"

expect 2 "a bad option is a usage error" "$OPTS" --bogus

[ "$fails" = 0 ]
