#!/usr/bin/env bash
# Installs everything kaidash needs on a fresh Debian machine, into a virtual environment at ./.venv:
#   - Debian packages: python3-venv when the interpreter cannot make a venv (Debian's own Python),
#     and the packages used by the integration and browser tests (a real Prometheus, headless Chromium);
#   - the Python package with its test extras, into .venv (so PEP 668 "externally managed" interpreters work);
#   - the real Kubernetes control plane the kube_apiserver tests run against (etcd, kube-apiserver,
#     kube-controller-manager, kwok at pinned versions), built from Go modules by tools/kube/build.sh into
#     ~/.cache/kaidash/kube-bin/ (once per machine: about 1,000 CPU-seconds; needs Go 1.26+ on PATH).
# Safe to run again. Afterwards: .venv/bin/kaidash serve, .venv/bin/python -m pytest -q.
# KAIDASH_PYTHON picks the interpreter that makes the venv (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${KAIDASH_PYTHON:-python3}"
VENV=".venv"
SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v "$PY" >/dev/null; then
  echo "setup: $PY not found; install Python 3.10 or newer (apt-get install python3)" >&2
  exit 1
fi

need_apt=""
command -v prometheus >/dev/null || need_apt="$need_apt prometheus"
command -v chromium >/dev/null || need_apt="$need_apt chromium"
# Debian's Python has venv but not ensurepip until python3-venv (python3.X-venv) is installed.
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  pyver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  need_apt="$need_apt python3-venv python${pyver}-venv"
fi
if [ -n "$need_apt" ]; then
  # shellcheck disable=SC2086
  apt_install $need_apt
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
log="$VENV/setup-pip.log"
if ! { "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip &&
       "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: pip install failed (log above, kept in $log)" >&2
  exit 1
fi

if ! command -v go >/dev/null; then
  echo "setup: the Go toolchain (go 1.26 or newer) is needed to build the Kubernetes API server that the" \
       "kube_apiserver tests run against; install it from https://go.dev/dl/ and put 'go' on PATH" >&2
  exit 1
fi
kube_bin="$(bash tools/kube/build.sh | tail -n 1)"
echo "setup: Kubernetes control plane for the tests in $kube_bin"
echo "setup: kaidash installed in $(pwd)/$VENV (run .venv/bin/kaidash, .venv/bin/python -m pytest)"
