#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/test-make-deps.sh - the README's first command on a fresh machine
#
# A pkg-config that finds nothing stands for a machine where "make deps" has
# not run yet; a stand-in for tools/deps.sh (DEPS_SH) "installs" the
# packages by making that pkg-config answer as the real one.  Checked: make
# -n deps and make help get through the Makefile; a build target alone stops
# with the clear message; "make deps TARGET" installs, then builds TARGET in
# a fresh make that sees what was installed.  Prints TAP.  O: build dir
# (unused: the builds here go to a scratch directory).
set -u
. tests/tap.sh

real=$(command -v pkg-config)
cat >"$tmp/pkg-config" <<EOS
#!/bin/sh
[ -e "$tmp/installed" ] && exec "$real" "\$@"
exit 1
EOS
cat >"$tmp/deps.sh" <<EOS
#!/bin/sh
echo "deps: installing (stand-in)"
touch "$tmp/installed"
EOS
chmod +x "$tmp/pkg-config"
b="$tmp/b"
obj="$b/obj/lib/util.o"
mk() {
	make --no-print-directory PKG_CONFIG="$tmp/pkg-config" \
		DEPS_SH="$tmp/deps.sh" O="$b" "$@"
}

expect 0 "the stand-in pkg-config finds nothing" \
	sh -c "! '$tmp/pkg-config' --exists liburcu-bp"
expect 0 "make -n deps: the Makefile parses without liburcu" mk -n deps
grep -q "deps.sh" "$tmp/out"
ok $? "make -n deps: would run the deps script"
expect 0 "make help without liburcu" mk help
expect 2 "make $obj without liburcu: refused" mk "$obj"
grep -q 'liburcu-bp not found by pkg-config: run "make deps" first' \
	"$tmp/err"
ok $? "make without liburcu: the message says to run make deps"
[ ! -e "$obj" ] && [ ! -e "$tmp/installed" ]
ok $? "make without liburcu: nothing built, nothing installed"

expect 0 "make deps $obj: installs, then builds" mk deps "$obj"
[ -e "$tmp/installed" ] && [ -s "$obj" ]
ok $? "make deps TARGET: the deps script ran and the target was built"
grep -q "deps: installing" "$tmp/out" && grep -q "CC.*lib/util.c" "$tmp/out"
ok $? "make deps TARGET: install first, build after"
rm -f "$tmp/installed"
expect 0 "make -n deps $obj: parses without liburcu" mk -n deps "$obj"
grep -q "fresh make, after deps" "$tmp/out" && [ ! -e "$tmp/installed" ]
ok $? "make -n deps TARGET: says what it would do, installs nothing"

echo "1..$n"
[ "$fails" = 0 ]
