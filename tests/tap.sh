# SPDX-License-Identifier: MIT
#
# tests/tap.sh - sourced by the shell tests: a scratch directory removed at
# exit, and ok STATUS DESCRIPTION printing one TAP line (fails counts the
# failures; end a test with [ "$fails" = 0 ]).
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
