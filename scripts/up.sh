#!/usr/bin/env bash
# The local stack on one machine: a private redis-server, `fleet serve` with
# deploy/examples/fleet.yaml (three simulated benches that power on by starting a `fleet agent`),
# and a live view under a banner that stays. Ctrl-C stops all of it, operations in flight and the
# simulated benches included, leaves no process behind, and exits 0.
#
# `scripts/up.sh cluster` (`make cluster`) adds a real Kubernetes control plane on loopback (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, and kwok playing each bench's kubelet:
# scripts/peers.sh builds them from their Go modules, once), deploy/base's RBAC applied, and fleet
# serve under its own ServiceAccount with deploy/examples/cluster.yaml: a bench's power-on
# registers its Node.
#
# FLEET_BIN runs a fleet binary already built (the tests do); FLEET_GRPC_ADDR moves the provider
# off 127.0.0.1:8086; BOOT_DELAY is how long a simulated bench takes to boot (3 s).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-local}"
case "$mode" in
  local) config=deploy/examples/fleet.yaml ;;
  cluster) config=deploy/examples/cluster.yaml ;;
  *) echo "usage: scripts/up.sh [cluster]" >&2; exit 2 ;;
esac
scripts/ensure-deps.sh up
if [ "$mode" = cluster ]; then
  peers=$(scripts/peers.sh)
  # kubectl of the control plane's own release, built beside it.
  export PATH="$peers:$PATH"
fi
if [ -n "${FLEET_BIN:-}" ]; then
  fleet="$FLEET_BIN"
else
  cargo build --release --quiet
  fleet="$PWD/target/release/fleet"
fi
grpc="${FLEET_GRPC_ADDR:-127.0.0.1:8086}"

run="$(mktemp -d -t fleet-up-XXXXXX)"
# Every process of the stack carries SIM_DIR=$run in its environment, whoever started it (the
# operations run in processes of their own that outlive fleet serve by design, and start the
# simulated benches' agents): cleanup finds them all by it.
export SIM_DIR="$run"
# redis-server rewrites its process title over its environment, so it is also known by pid.
pids=()
cleanup() {
  local code="$1"
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  # Scanned again until a scan finds none: the list of processes is read once per scan, and a
  # process of the stack may start a child after it was read and before it is killed (an
  # operation's script starting its `sleep`: found by tests/process/up.rs in CI).
  for _ in $(seq 20); do
    found=0
    for proc in /proc/[0-9]*; do
      pid="${proc#/proc/}"
      [ "$pid" = "$$" ] && continue
      # NUL-separated, read whole by grep -z (no pipe: pipefail would see tr's SIGPIPE).
      if grep -qxzF "SIM_DIR=$run" "$proc/environ" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        found=1
      fi
    done
    [ "$found" = 0 ] && break
  done
  # Gone before their directory is: SIGKILL is delivered at once, the exit a moment later. A
  # zombie has exited (its files are closed), and this shell may reap it only once the trap
  # returns: `kill -0`, which a zombie answers, would wait out its whole bound.
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do
      state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null || true)
      if [ -z "$state" ] || [ "$state" = Z ]; then break; fi
      sleep 0.05
    done
  done
  rm -rf "$run"
  printf '\nfleet local stack stopped; nothing is left running.\n'
  exit "$code"
}
# Ctrl-C is how the stack is meant to stop: exit 0. Any other end keeps its status.
trap 'cleanup 0' INT TERM
trap 'cleanup $?' EXIT

redis-server --port 0 --unixsocket "$run/redis.sock" --unixsocketperm 700 --dir "$run" \
  --save "" --appendonly yes --appendfsync everysec --daemonize no --logfile "$run/redis.log" &
pids+=($!)
disown
for _ in $(seq 100); do [ -S "$run/redis.sock" ] && break; sleep 0.1; done
[ -S "$run/redis.sock" ] || { echo "redis-server did not start; see $run/redis.log" >&2; exit 1; }

export FLEET_REDIS_URL="redis+unix://$run/redis.sock"
kube_args=()
if [ "$mode" = cluster ]; then
  "$peers/k8s-local" stack --dir "$run/kube" >"$run/kube.out" 2>"$run/kube.log" &
  pids+=($!)
  disown
  for _ in $(seq 1800); do grep -q '"ready"' "$run/kube.out" 2>/dev/null && break; sleep 0.1; done
  grep -q '"ready"' "$run/kube.out" || { echo "the control plane did not start; see $run/kube.log and $run/kube/" >&2; exit 1; }
  admin="$run/kube/admin.kubeconfig"
  # deploy/base as an operator applies it; its workloads are this script's processes here.
  kubectl --kubeconfig "$admin" apply -k deploy/base >/dev/null
  kubectl --kubeconfig "$admin" -n fleet scale deployment/fleet --replicas=0 >/dev/null
  kubectl --kubeconfig "$admin" -n fleet scale statefulset --all --replicas=0 >/dev/null
  server=$(kubectl --kubeconfig "$admin" config view -o jsonpath='{.clusters[0].cluster.server}')
  token=$(kubectl --kubeconfig "$admin" -n fleet create token fleet --duration 24h)
  kubectl config --kubeconfig "$run/fleet.kubeconfig" set-cluster local --server "$server" \
    --certificate-authority "$run/kube/pki/ca.crt" >/dev/null
  kubectl config --kubeconfig "$run/fleet.kubeconfig" set-credentials fleet --token "$token" >/dev/null
  kubectl config --kubeconfig "$run/fleet.kubeconfig" set-context fleet --cluster local --user fleet \
    --namespace fleet >/dev/null
  kubectl config --kubeconfig "$run/fleet.kubeconfig" use-context fleet >/dev/null
  # The benches' kubelets register their Nodes with the administrator's credentials.
  export SIM_KUBECONFIG="$admin"
  kube_args=(--kubernetes --kubeconfig "$run/fleet.kubeconfig" --kube-namespace fleet)
fi
# Operations never see fleet's own FLEET_* variables (the URL may hold a password): the simulated
# power switch gets the stack's Redis in a variable of its own.
export SIM_BIN="$fleet" SIM_REDIS="$FLEET_REDIS_URL"
FLEET_LOG="${FLEET_LOG:-info}" "$fleet" serve --config "$config" "${kube_args[@]}" \
  --metrics-addr 127.0.0.1:0 --grpc-addr "$grpc" --blind-grace 3s >"$run/serve.log" 2>&1 &
serve=$!
pids+=("$serve")
disown

banner() {
  cat <<MSG
fleet local stack: redis at $FLEET_REDIS_URL
controller log: $run/serve.log; cluster-autoscaler provider on $grpc
live page: http://$page/   (the fleet at a glance, in a browser)
In another shell:  export FLEET_REDIS_URL=$FLEET_REDIS_URL
                   $fleet claim sim-01 --wait     # ask for a machine; watch it boot below
                   $fleet cancel <claim>          # give it back
                   $fleet autoscaler --grpc-addr $grpc increase sim 2   # as cluster-autoscaler
MSG
  if [ "$mode" = cluster ]; then
    cat <<MSG
Kubernetes (every bench off, no Node yet):  export KUBECONFIG=$admin PATH=$peers:\$PATH
  kubectl run wants-sim --image=registry.invalid/any --overrides='{"spec":{"nodeSelector":{"fleet.dev/pool":"sim"}}}'
  pends: no Node fits. cluster-autoscaler cannot be built here (the Go module proxy refuses
  k8s.io/autoscaler/cluster-autoscaler), so make its scale-up yourself:
  $fleet autoscaler --grpc-addr $grpc increase sim 1   # a bench boots, its Node turns Ready, the Pod runs
MSG
  fi
  # Last, whatever the mode: a reader of the screen knows the banner is whole when it sees it.
  cat <<MSG
The first seconds are blind: the store is new (fleet serve --blind-grace shortens it).
Ctrl-C stops everything.
MSG
}
# The banner says "in another shell: fleet claim": it comes once fleet serve has published what
# the verbs read, so the first command a person types works.
for _ in $(seq 300); do
  "$fleet" groups >/dev/null 2>&1 && break
  if ! kill -0 "$serve" 2>/dev/null; then
    printf 'fleet serve stopped; the last of its log:\n' >&2
    tail -n 20 "$run/serve.log" >&2
    exit 1
  fi
  sleep 0.1
done
# The live page is on the metrics listener, whose port fleet serve picked: its start line says.
page=$(grep -o 'metrics=[^ ]*' "$run/serve.log" | head -n 1 | cut -d= -f2)
lines=$(banner | wc -l)
if [ -t 1 ]; then printf '\033[H\033[2J'; fi
banner
while true; do
  if ! kill -0 "$serve" 2>/dev/null; then
    printf '\nfleet serve stopped; the last of its log:\n' >&2
    tail -n 20 "$run/serve.log" >&2
    exit 1
  fi
  view="$(
    printf '\n%s\n== slots ==\n' "$(date +%T)"
    "$fleet" slots 2>&1
    printf '\n== claims (live, and ended in the last minute) ==\n'
    "$fleet" claims --since 1m 2>&1
    printf '\n== benches ==\n'
    "$fleet" state 2>&1
  )"
  if [ -t 1 ]; then
    # Under the banner, which stays: move below it and clear the rest of the screen.
    printf '\033[%d;1H\033[J%s\n' "$((lines + 1))" "$view"
  else
    printf '%s\n' "$view"
  fi
  sleep 1
done
