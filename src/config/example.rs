//! The example configuration: two groups and their slots, valid, its text documenting the format
//! (SPEC §4.1).

/// A valid configuration: two groups and their slots. Its text documents the format.
pub fn example() -> &'static str {
    EXAMPLE
}

const EXAMPLE: &str = r#"# The configuration of `fleet serve`: groups of slots, one machine per slot.
groups:
  - name: pool-a                      # an RFC 1123 label
    min_size: 0
    max_size: 3                       # cluster-autoscaler's bound; free slots bound it too
    max_node_provision_time: 20m
    # readiness_taints defaults to [node.cilium.io/agent-not-ready:NoExecute]
    startup:
      command: ["/usr/local/bin/power", "on"]
      env: { BMC: "10.0.0.9" }        # fleet sets FLEET_SLOT, FLEET_GROUP, ... itself
      timeout: 5m                     # defaults to timings.job_timeout
    shutdown:
      command: ["/usr/local/bin/power", "off"]
    timings:                          # every field optional; see SPEC §3.5
      readiness_gate_timeout: 4m
      max_attempts: 3
      failed_slot_cooldown: 30m
    template:
      labels: { "fleet.dev/pool": "a" }
      capacity: { cpu: "16", memory: "64Gi", pods: "110" }
  - name: pool-b
    min_size: 1
    max_size: 2
    readiness_taints: []
    startup:
      command: ["/usr/local/bin/ipmi-power", "on"]
      dir: /var/lib/fleet
    shutdown:
      command: ["/usr/local/bin/ipmi-power", "off"]
      timeout: 2m
    timings: { job_timeout: 10m, uncordon_timeout: 3m }
    template:
      labels: { "fleet.dev/pool": "b" }
      taints: ["fleet.dev/gpu=true:NoSchedule"]
      capacity: { cpu: "64", memory: "512Gi", "nvidia.com/gpu": "8" }
      gpu: { label: "fleet.dev/gpu-type", types: ["nvidia-a100"] }
      power: { watts: 3500, price_per_kwh: 0.25 }
    autoscaling_options: true
slots:                                # kubernetes_node needs fleet serve --kubernetes
  - { name: bench-01, group: pool-a, kubernetes_node: bench-01 }
  - { name: bench-02, group: pool-a, kubernetes_node: bench-02 }
  - { name: bench-03, group: pool-a }
  - { name: gpu-01, group: pool-b, provider_id: "ipmi://10.0.1.11" }
  - { name: gpu-02, group: pool-b, provider_id: "ipmi://10.0.1.12" }
"#;
