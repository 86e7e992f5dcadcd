#!/bin/sh
# A simulated power switch for the local stack: `on` boots a bench (after BOOT_DELAY seconds it
# starts a `fleet agent` for $FLEET_SLOT), `off` stops that agent, whose final beat reads DOWN.
# fleet serve runs it with FLEET_SLOT set; SIM_DIR and SIM_BIN come from scripts/up.sh.
# With SIM_KUBECONFIG (`make cluster`) the bench also has a kubelet, played by kwok: `on` registers
# its Node (the provider ID as fleet reports it, the template's labels and capacity) and `off`
# lets kwok drop it, so the Node goes NotReady as a powered-off machine's does.
set -eu
dir="${SIM_DIR:?SIM_DIR is the local stack's run directory}"
bin="${SIM_BIN:?SIM_BIN is the fleet binary}"
redis="${SIM_REDIS:?SIM_REDIS is the local stack's Redis URL}"
pidfile="$dir/$FLEET_SLOT.pid"
case "${1:-}" in
  on)
    sleep "${BOOT_DELAY:-3}"
    if [ -n "${SIM_KUBECONFIG:-}" ]; then
      kubectl --kubeconfig "$SIM_KUBECONFIG" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $FLEET_SLOT
  labels: {kubernetes.io/hostname: $FLEET_SLOT, fleet.dev/pool: sim, kwok.x-k8s.io/node: fake}
spec:
  providerID: fleet://$FLEET_SLOT
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "110"}
  allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
EOF
    fi
    nohup "$bin" --redis "$redis" agent "$FLEET_SLOT" --interval 1s >"$dir/$FLEET_SLOT.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    echo "powered on $FLEET_SLOT (agent pid $!)"
    ;;
  off)
    if [ -f "$pidfile" ]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
      rm -f "$pidfile"
    fi
    if [ -n "${SIM_KUBECONFIG:-}" ]; then
      kubectl --kubeconfig "$SIM_KUBECONFIG" label node "$FLEET_SLOT" kwok.x-k8s.io/node- >/dev/null 2>&1 || true
    fi
    echo "powered off $FLEET_SLOT"
    ;;
  *)
    echo "usage: sim-power.sh on|off" >&2
    exit 2
    ;;
esac
