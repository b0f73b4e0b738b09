#!/usr/bin/env bash
# Builds the real Kubernetes control plane that kaidash's kube_apiserver tests run against, from Go modules
# pinned in this directory (fetched through the Go module proxy; nothing else is downloaded):
#   etcd v3.7.3 (etcd/), kube-apiserver and kube-controller-manager v1.37.2 (kubernetes/), kwok v0.8.0 (kwok/).
# The binaries go to a cache directory keyed by the hash of these files, so they are built once per machine
# and rebuilt when a pinned version changes: ${KAIDASH_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-~/.cache}/kaidash/kube-bin/<hash>}.
# Prints that directory as the last line of stdout. A cold build takes about 1,000 CPU-seconds.
# Usage: tools/kube/build.sh [--dir]   (--dir: print the directory and exit 0 if built, 1 if not, without building)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="v1.37.2"
BINARIES=(etcd kube-apiserver kube-controller-manager kwok)

key="$(cd "$here" && cat build.sh etcd/go.mod etcd/go.sum etcd/main.go kubernetes/go.mod kubernetes/go.sum \
       kwok/go.mod kwok/go.sum | sha256sum | cut -c1-16)"
dir="${KAIDASH_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kaidash/kube-bin/$key}"

built() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || return 1; done
  [ -s "$dir/kwok-stages.yaml" ]
}

if [ "${1:-}" = "--dir" ]; then
  echo "$dir"
  built
  exit
fi
if built; then
  echo "$dir"
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "tools/kube/build.sh: the Go toolchain (go 1.26 or newer) is needed to build the Kubernetes API server" \
       "that the kube_apiserver tests run against; install it from https://go.dev/dl/ and put 'go' on PATH" >&2
  exit 1
fi

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9                       # one build at a time (setup.sh and a test run may race)
if built; then echo "$dir"; exit 0; fi

tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "tools/kube/build.sh: building etcd, kube-apiserver, kube-controller-manager, kwok into $dir" \
     "(about 1,000 CPU-seconds when nothing is cached)" >&2
# -mod=readonly: go.sum is committed and must already list every module; -trimpath: no local paths in binaries.
gobuild=(go build -mod=readonly -trimpath)
(cd "$here/etcd" && "${gobuild[@]}" -ldflags "-s -w" -o "$tmp/etcd" .)
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
stamp="k8s.io/component-base/version"
(cd "$here/kubernetes" && "${gobuild[@]}" -o "$tmp/" -ldflags "-s -w -X $stamp.gitVersion=$K8S_VERSION \
   -X $stamp.gitMajor=1 -X $stamp.gitMinor=$minor -X $stamp.gitTreeState=clean" \
   k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
(cd "$here/kwok" && "${gobuild[@]}" -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)
# kwok's stages (node Ready + lease heartbeat, pod Running / Succeeded / deleted) ship in its module as YAML:
# one config file with all of them.
kwok_src="$(cd "$here/kwok" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready \
         pod/fast/pod-complete pod/fast/pod-delete; do
  echo "---"; cat "$kwok_src/$f.yaml"
done > "$tmp/kwok-stages.yaml"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "tools/kube/build.sh: built in $((SECONDS - start)) s" >&2
echo "$dir"
