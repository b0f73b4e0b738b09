#!/usr/bin/env bash
# Installs everything kaidash needs on a fresh Debian machine: the Debian packages used by the
# integration and browser tests (a real Prometheus, headless Chromium) and the Python package with
# its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
need_apt=""
command -v prometheus >/dev/null || need_apt="$need_apt prometheus"
command -v chromium >/dev/null || need_apt="$need_apt chromium"
if [ -n "$need_apt" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need_apt >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
