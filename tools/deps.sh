#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages stalloc needs to build and test, if missing.
# Run as root (CI is).  Safe to run again: installed packages are skipped.
set -eu

PKGS="make gcc g++ clang pkg-config liburcu-dev libcmocka-dev liblttng-ust-dev
zlib1g-dev python3 python3-torch python3-setuptools python3-wheel python3-pip
python3-venv lttng-tools babeltrace2
clang-format clang-tidy cppcheck doxygen python3-sphinx python3-breathe"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing:$missing; run as root (or: sudo make deps)" >&2
	exit 1
fi
echo "deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
