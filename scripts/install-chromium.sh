#!/usr/bin/env bash
# Makes sure a headless Chromium is on PATH: the dashboard's browser tests
# (cmd/admitq/internal/dashboard) drive one with chromedp. Used by make test
# (and so by .ci/run); humans may run it too.
#
# As root it installs the Debian/Ubuntu package. Otherwise it prints the
# command to run and fails, rather than sudo behind your back.
set -euo pipefail

for bin in chromium chromium-browser google-chrome google-chrome-stable; do
	if command -v "$bin" >/dev/null 2>&1; then
		exit 0
	fi
done

if [ "$(id -u)" -ne 0 ]; then
	echo "install-chromium: no chromium on PATH; the dashboard's browser tests need one. Install it with:" >&2
	echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y chromium" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-chromium: no chromium on PATH and no apt-get here; install Chromium yourself." >&2
	exit 1
fi

echo "install-chromium: installing chromium" >&2
apt-get update
# Debian names the package chromium; Ubuntu's chromium-browser is a snap
# shim, so try chromium first.
DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || DEBIAN_FRONTEND=noninteractive apt-get install -y chromium-browser

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
	echo "install-chromium: chromium is still not on PATH after apt-get install" >&2
	exit 1
fi
