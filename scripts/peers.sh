#!/usr/bin/env bash
# Builds the real peers of the cluster tier once per version: `k8s-local` (etcd, the Kubernetes
# control plane, kwok and kubectl, from their Go modules: peers/; `kubectl` beside it is a link to
# it), cached under
# ${FLEET_PEERS_CACHE:-$HOME/.cache/fleet/peers}/<key>/, the key a digest of peers/ (go.mod,
# go.sum, the programs) and the Go version. A second build with the cache there takes no time;
# Go's own caches (GOMODCACHE, GOCACHE) make a rebuild after a change a matter of minutes.
#
# Usage: scripts/peers.sh          builds if needed, prints the directory of the binaries
set -euo pipefail
cd "$(dirname "$0")/../peers"
if ! command -v go >/dev/null 2>&1; then
  echo "the cluster tier builds its peers with Go 1.26 or later: install it (https://go.dev/dl is not reachable here; the machine's own go)" >&2
  exit 1
fi
k8s=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)
key=$( { go version; cat go.mod go.sum; find cmd -type f -name '*.go' | sort | xargs cat; } | sha256sum | cut -c1-16)
cache=${FLEET_PEERS_CACHE:-$HOME/.cache/fleet/peers}
bin="$cache/$k8s-$key/bin"
if [ -x "$bin/k8s-local" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$bin.tmp"
minor=${k8s#v1.}; minor=${minor%%.*}
stamp="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
started=$(date +%s)
echo "building k8s-local ($k8s) into $bin: a first build takes many minutes" >&2
CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w $stamp" -o "$bin.tmp/k8s-local" ./cmd/k8s-local
ln -sf k8s-local "$bin.tmp/kubectl"
rm -rf "$bin"
mv "$bin.tmp" "$bin"
echo "built k8s-local in $(( $(date +%s) - started )) s" >&2
echo "$bin"
