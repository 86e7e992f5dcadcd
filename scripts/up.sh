#!/usr/bin/env bash
# The local stack on one machine: a private redis-server, `fleet serve` with
# deploy/examples/fleet.yaml (three simulated benches that power on by starting a `fleet agent`),
# and a live view. Ctrl-C stops all of it and leaves no process behind.
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
  for pidfile in "$run"/*.pid; do [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT INT TERM

redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 --dir "$run" \
  --save "" --appendonly yes --appendfsync everysec --daemonize no --logfile "$run/redis.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$run/redis.sock" ] && break; sleep 0.1; done
[ -S "$run/redis.sock" ] || { echo "redis-server did not start; see $run/redis.log" >&2; exit 1; }

export FLEET_REDIS_URL="redis+unix://$run/redis.sock"
# Operations never see fleet's own FLEET_* variables (the URL may hold a password): the simulated
# power switch gets the stack's Redis in a variable of its own.
export SIM_DIR="$run" SIM_BIN="$fleet" SIM_REDIS="$FLEET_REDIS_URL"
FLEET_LOG="${FLEET_LOG:-info}" "$fleet" serve --config deploy/examples/fleet.yaml \
  --metrics-addr 127.0.0.1:0 --blind-grace 3s >"$run/serve.log" 2>&1 &
pids+=($!)

cat <<MSG
fleet local stack: redis at $FLEET_REDIS_URL, controller log in $run/serve.log,
cluster-autoscaler provider on 127.0.0.1:8086
In another shell:  export FLEET_REDIS_URL=$FLEET_REDIS_URL
                   $fleet claim sim-01          # ask for a machine; watch it boot below
                   $fleet cancel <claim>        # give it back
                   $fleet autoscaler increase sim 2            # scale up, as cluster-autoscaler would
                   $fleet autoscaler delete sim fleet://sim-01 # scale down
Ctrl-C stops everything.
MSG
sleep 2
while true; do
  out="$("$fleet" slots 2>&1; echo; "$fleet" claims 2>&1; echo; "$fleet" state 2>&1)"
  printf '\033[H\033[2J%s\n' "$out"
  sleep 1
done
