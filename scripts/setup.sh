#!/usr/bin/env bash
# Installs kaidash on a fresh Debian machine into a virtual environment at ./.venv.
#
#   bash scripts/setup.sh            the app: python3-venv from Debian when the interpreter cannot make a venv
#                                    (Debian's own Python), then kaidash into .venv (PEP 668 safe). ~1 minute.
#   bash scripts/setup.sh --tests    also what the tests need: the Debian packages `prometheus` and `chromium`
#                                    (a real Prometheus and headless Chromium), the test extras, and the real
#                                    Kubernetes control plane the kube_apiserver tests run against (etcd,
#                                    kube-apiserver, kube-controller-manager, kwok at pinned versions), built from
#                                    Go modules by tools/kube/build.sh into ~/.cache/kaidash/kube-bin/ (once per
#                                    machine: about 750-1,000 CPU-seconds; needs Go 1.26+ on PATH).
#
# Safe to run again. Afterwards: .venv/bin/kaidash serve, .venv/bin/python -m pytest -q.
# KAIDASH_PYTHON picks the interpreter that makes the venv (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${KAIDASH_PYTHON:-python3}"
VENV=".venv"
TESTS=""
for arg in "$@"; do
  case "$arg" in
    --tests) TESTS=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "setup: unknown option '$arg' (use --tests or nothing)" >&2; exit 2 ;;
  esac
done
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
if [ -n "$TESTS" ] && ! command -v go >/dev/null; then
  echo "setup: the Go toolchain (go 1.26 or newer) is needed to build the Kubernetes API server that the" \
       "kube_apiserver tests run against; install it from https://go.dev/dl/ and put 'go' on PATH" >&2
  exit 1
fi

need_apt=""
# Debian's Python has venv but not ensurepip until python3-venv (python3.X-venv) is installed.
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  pyver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  need_apt="$need_apt python3-venv python${pyver}-venv"
fi
if [ -n "$TESTS" ]; then
  command -v prometheus >/dev/null || need_apt="$need_apt prometheus"
  command -v chromium >/dev/null || need_apt="$need_apt chromium"
fi
if [ -n "$need_apt" ]; then
  # shellcheck disable=SC2086
  apt_install $need_apt
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
target="."
[ -n "$TESTS" ] && target=".[test]"
log="$VENV/setup-pip.log"
if ! { "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip &&
       "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$target"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: pip install failed (log above, kept in $log)" >&2
  exit 1
fi

if [ -n "$TESTS" ]; then
  kube_bin="$(bash tools/kube/build.sh | tail -n 1)"
  echo "setup: Kubernetes control plane for the tests in $kube_bin"
fi
echo "setup: kaidash installed in $(pwd)/$VENV (run .venv/bin/kaidash${TESTS:+, .venv/bin/python -m pytest -q})"
