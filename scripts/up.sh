#!/usr/bin/env bash
# The local stack on one machine: a private redis-server, three simulated benches running
# `fleet agent`, and `fleet state --watch`. Ctrl-C stops all of it and leaves no process behind.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/ensure-deps.sh
cargo build --release --quiet
fleet="$PWD/target/release/fleet"

run="$(mktemp -d -t fleet-up-XXXXXX)"
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT INT TERM

redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 --dir "$run" \
  --save "" --appendonly no --daemonize no --logfile "$run/redis.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$run/redis.sock" ] && break; sleep 0.1; done
[ -S "$run/redis.sock" ] || { echo "redis-server did not start; see $run/redis.log" >&2; exit 1; }

export FLEET_REDIS_URL="redis+unix://$run/redis.sock"
export FLEET_LOG="${FLEET_LOG:-warn}"
"$fleet" agent bench-01 --interval 2s &
pids+=($!)
"$fleet" agent bench-02 --interval 5s &
pids+=($!)
"$fleet" agent bench-03 --interval 1s --final-ttl 1h --final-hold sleeping &
pids+=($!)
"$fleet" hold bench-02 --reason "demo: held by fleet hold" --for 1m >/dev/null

cat <<MSG
fleet local stack: redis at $FLEET_REDIS_URL, benches bench-01..03.
In another shell:  export FLEET_REDIS_URL=$FLEET_REDIS_URL
                   $fleet live; $fleet hold bench-01 --reason test; $fleet release bench-01
Ctrl-C stops everything.
MSG
sleep 1
"$fleet" state --watch
