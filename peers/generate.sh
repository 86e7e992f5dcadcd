#!/usr/bin/env bash
# Writes peers/go.mod for a Kubernetes release: k8s.io/kubernetes at that release, the etcd server
# it pins, kwok, and a replace of every staging module k8s.io/kubernetes's own go.mod points at
# `./staging/src/...` (which its module zip does not hold) with the published v0.X.Y of the same
# release. The list is read from that go.mod, never written by hand; then `go mod tidy`.
#
# Usage: peers/generate.sh [v1.36.3]   (commit peers/go.mod and peers/go.sum after)
set -euo pipefail
cd "$(dirname "$0")"
k8s=${1:-v1.36.3}
kwok=v0.8.0
gomod=$(go mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -n "$gomod" ] || { echo "the Go module proxy did not serve k8s.io/kubernetes@$k8s" >&2; exit 1; }
staging="v0.${k8s#v1.}"
etcd=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$gomod")
{
  echo "// The real peers fleet's tests run against, built from their Go modules (generate.sh)."
  echo "module fleet.local/peers"
  echo
  echo "go 1.26.0"
  echo
  echo "require ("
  echo "	go.etcd.io/etcd/server/v3 $etcd"
  echo "	k8s.io/kubernetes $k8s"
  echo "	sigs.k8s.io/kwok $kwok"
  echo ")"
  echo
  echo "replace ("
  awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\/src\// { printf "\t%s => %s %s\n", $1, $1, v }' "$gomod"
  echo ")"
} > go.mod
rm -f go.sum
GOFLAGS=-mod=mod go mod tidy
echo "peers/go.mod: k8s.io/kubernetes $k8s, etcd $etcd, kwok $kwok, staging $staging" >&2
