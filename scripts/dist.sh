#!/usr/bin/env bash
# Builds fleet's installable artifacts (`make dist`): two archives laid out from `/`, so installing
# is `tar -xzf ARCHIVE -C /` (or into any root), and a SHA256SUMS beside them.
#
#   dist/fleet-<version>-<arch>-linux.tar.gz        usr/local/bin/fleet, the serve unit, the schemas
#   dist/fleet-agent-<version>-<arch>-linux.tar.gz  usr/local/bin/fleet-agent, its unit, agent.env
#
# fleet is built with the release profile, as the container image builds it (deploy/image); the
# agent with the agent profile (size-optimised: the ~5 MB a bench gives it). --fleet and --agent
# take binaries already built instead (the tests package the binaries they built), --out the
# directory (default dist/).
set -euo pipefail
cd "$(dirname "$0")/.."

fleet_bin="" agent_bin="" out="dist"
while [ $# -gt 0 ]; do
  case "$1" in
    --fleet) fleet_bin="$2"; shift 2 ;;
    --agent) agent_bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --agent-only) fleet_bin="none"; shift ;;
    --fleet-only) agent_bin="none"; shift ;;
    *) echo "usage: scripts/dist.sh [--fleet BIN] [--agent BIN] [--agent-only|--fleet-only] [--out DIR]" >&2; exit 2 ;;
  esac
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(uname -m)
if [ -z "$fleet_bin" ]; then
  cargo build --release --locked -p fleet --bin fleet
  fleet_bin=target/release/fleet
fi
if [ -z "$agent_bin" ]; then
  cargo build --profile agent --locked -p fleet-agent
  agent_bin=target/agent/fleet-agent
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# One archive: its files staged under a root, owned by root, in a stable order.
pack() {
  local name="$1" root="$2"
  tar --sort=name --owner=0 --group=0 --numeric-owner -C "$root" -czf "$out/$name.tar.gz" .
  echo "$out/$name.tar.gz"
}

if [ "$fleet_bin" != "none" ]; then
  root="$stage/fleet"
  install -D -m 0755 "$fleet_bin" "$root/usr/local/bin/fleet"
  install -D -m 0644 deploy/systemd/fleet-serve.service "$root/etc/systemd/system/fleet-serve.service"
  install -D -m 0644 deploy/examples/fleet.yaml "$root/usr/local/share/fleet/fleet.yaml.example"
  install -D -m 0644 schemas/v1.json "$root/usr/local/share/fleet/schemas/v1.json"
  install -D -m 0644 README.md "$root/usr/local/share/doc/fleet/README.md"
  pack "fleet-$version-$arch-linux" "$root"
fi
if [ "$agent_bin" != "none" ]; then
  root="$stage/agent"
  install -D -m 0755 "$agent_bin" "$root/usr/local/bin/fleet-agent"
  install -D -m 0644 deploy/systemd/fleet-agent@.service "$root/etc/systemd/system/fleet-agent@.service"
  install -D -m 0644 deploy/systemd/agent.env.example "$root/usr/local/share/fleet/agent.env.example"
  install -D -m 0644 docs/protocol.md "$root/usr/local/share/doc/fleet-agent/protocol.md"
  pack "fleet-agent-$version-$arch-linux" "$root"
fi

(cd "$out" && sha256sum -- *.tar.gz > SHA256SUMS)
