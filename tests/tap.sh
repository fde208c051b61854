# SPDX-License-Identifier: MIT
#
# tests/tap.sh - sourced by the shell tests: a scratch directory removed at
# exit, and ok STATUS DESCRIPTION printing one TAP line (fails counts the
# failures; end a test with [ "$fails" = 0 ]), and expect CODE DESCRIPTION
# CMD... running CMD (output in $tmp/out and $tmp/err) expecting exit CODE.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

ok() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		fails=$((fails + 1))
	fi
}

# expect CODE DESCRIPTION CMD... : the command exits with CODE
expect() {
	code=$1
	what=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ "$rc" = "$code" ]
	ok $? "$what (exit $rc)"
}
