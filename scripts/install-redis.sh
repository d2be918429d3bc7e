#!/usr/bin/env bash
# Makes sure redis-server and redis-cli are on PATH: the tests run against
# real servers that internal/redistest starts on free loopback ports. Used by
# make test (and so by .ci/run); humans may run it too.
#
# As root it installs the Debian/Ubuntu packages. Otherwise it prints the
# command to run and fails, rather than sudo behind your back.
#
# The Debian redis-server package starts a system Redis on 6379 where an init
# system runs (and not in most containers). Either way is fine: the tests
# never use it, as redistest only talks to servers it started itself.
set -euo pipefail

missing=()
for bin in redis-server redis-cli; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if [ "${#missing[@]}" -eq 0 ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-redis: ${missing[*]} not on PATH; the tests need a real Redis. Install it with:" >&2
	echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-redis: ${missing[*]} not on PATH and no apt-get here; install redis-server and redis-cli yourself." >&2
	exit 1
fi

echo "install-redis: installing redis-server and redis-tools (for ${missing[*]})" >&2
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools

for bin in redis-server redis-cli; do
	if ! command -v "$bin" >/dev/null 2>&1; then
		echo "install-redis: $bin is still not on PATH after apt-get install" >&2
		exit 1
	fi
done
redis-server --version
