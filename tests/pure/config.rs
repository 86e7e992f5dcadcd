//! The configuration file of `fleet serve`: what it accepts, where every field lands, and how it
//! refuses what it does not accept (a place, and what is valid there), without ever panicking.

use std::path::Path;
use std::time::Duration;

use fleet::config::{
    self, AutoscalingOptions, Config, ConfigError, JobTemplate, Problem, Run, Toleration,
};
use fleet::domain::claim::Timings;
use fleet::domain::name::{BenchName, GroupName};
use fleet::domain::node::{Effect, Taint};
use proptest::prelude::*;

const PATH: &str = "/etc/fleet/fleet.yaml";

/// The example of the format as operators were given it, with enough slots for its max_size.
const PINNED: &str = r#"
groups:
  - name: pool-a                    # RFC 1123 label (GroupName)
    min_size: 0
    max_size: 4
    max_node_provision_time: 20m    # optional duration
    readiness_taints: ["node.cilium.io/agent-not-ready:NoExecute"]
    startup:  { command: ["/usr/local/bin/power", "on"], timeout: 5m, env: { BMC: "10.0.0.9" } }
    shutdown: { command: ["/usr/local/bin/power", "off"], timeout: 5m }
    timings:  { readiness_gate_timeout: 4m, uncordon_timeout: 90s, machine_gone_grace: 12m10s,
                max_attempts: 3, shutdown_attempt_reset_grace: 30m, ttl_after_finished: 1h }
    template: { labels: { "fleet.dev/pool": "a" }, taints: [], capacity: { cpu: "16", memory: "64Gi", pods: "110" } }
slots:
  - name: bench-01
    group: pool-a
    provider_id: fleet://bench-01     # default fleet://<name>
    kubernetes_node: bench-01         # optional
  - name: bench-02
    group: pool-a
  - name: bench-03
    group: pool-a
    provider_id: ipmi://10.0.0.13
  - name: bench-04
    group: pool-a
    kubernetes_node: rack1.bench-04
"#;

/// A small valid file that the table of refusals edits one piece at a time.
const BASE: &str = r#"
groups:
  - name: pool-a
    min_size: 0
    max_size: 2
    startup: { command: ["/usr/local/bin/power", "on"] }
    shutdown: { command: ["/usr/local/bin/power", "off"] }
slots:
  - { name: bench-01, group: pool-a }
  - { name: bench-02, group: pool-a }
"#;

fn parse(text: &str) -> Result<Config, ConfigError> {
    config::parse(text, Path::new(PATH))
}

fn ok(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"))
}

fn group(name: &str) -> GroupName {
    GroupName::parse(name).unwrap()
}

fn bench(name: &str) -> BenchName {
    BenchName::parse(name).unwrap()
}

fn taint(text: &str) -> Taint {
    text.parse().unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn mins(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

fn command(argv: &[&str]) -> Run {
    Run::Command(argv.iter().map(|a| a.to_string()).collect())
}

/// The problems of a refused file; fails the test if the file was not refused as invalid.
fn problems(text: &str) -> Vec<Problem> {
    match parse(text) {
        Err(ConfigError::Invalid { path, problems }) => {
            assert_eq!(path, Path::new(PATH));
            problems
        }
        Err(other) => panic!("want Invalid, got {other}\n---\n{text}"),
        Ok(config) => panic!("want Invalid, got {config:?}\n---\n{text}"),
    }
}

/// The message of a file refused before validation (YAML syntax or shape).
fn parse_error(text: &str) -> String {
    match parse(text) {
        Err(ConfigError::Parse { path, message }) => {
            assert_eq!(path, Path::new(PATH));
            message
        }
        Err(other) => panic!("want Parse, got {other}\n---\n{text}"),
        Ok(config) => panic!("want Parse, got {config:?}\n---\n{text}"),
    }
}

/// BASE with `from` replaced by `to` (exactly once, so a typo in a row cannot go unnoticed).
fn edit(from: &str, to: &str) -> String {
    assert_eq!(
        BASE.matches(from).count(),
        1,
        "{from:?} is not once in BASE"
    );
    BASE.replacen(from, to, 1)
}

#[test]
fn the_pinned_example_parses_and_every_field_lands_where_it_should() {
    let config = ok(PINNED);
    assert_eq!(
        config.groups.keys().cloned().collect::<Vec<_>>(),
        [group("pool-a")]
    );
    let g = config.group(&group("pool-a")).unwrap();
    assert_eq!(g.name, group("pool-a"));
    assert_eq!((g.min_size, g.max_size), (0, 4));
    assert_eq!(g.max_node_provision_time, Some(mins(20)));
    assert_eq!(
        g.readiness_taints,
        [Taint {
            key: "node.cilium.io/agent-not-ready".into(),
            value: None,
            effect: Effect::NoExecute,
        }]
    );

    assert_eq!(g.startup.run, command(&["/usr/local/bin/power", "on"]));
    assert_eq!(g.startup.timeout, mins(5));
    assert_eq!(
        g.startup.env.iter().collect::<Vec<_>>(),
        [(&"BMC".to_owned(), &"10.0.0.9".to_owned())]
    );
    assert_eq!(g.startup.dir, None);
    assert_eq!(g.shutdown.run, command(&["/usr/local/bin/power", "off"]));
    assert_eq!(g.shutdown.timeout, mins(5));
    assert!(g.shutdown.env.is_empty());

    // The six fields the file sets, and the defaults of the six it does not.
    assert_eq!(
        g.timings,
        Timings {
            job_timeout: mins(5),
            job_monitor_poll_interval: secs(30),
            uncordon_timeout: secs(90),
            readiness_gate_timeout: mins(4),
            max_uncordon_retry_interval: secs(10),
            budget_slack: mins(1),
            max_attempts: 3,
            machine_gone_grace: secs(12 * 60 + 10),
            shutdown_attempt_reset_grace: mins(30),
            ttl_after_finished: mins(60),
            stuck_threshold: mins(15),
            failed_slot_cooldown: mins(30),
            delete_stale_node_after: None,
        }
    );
    assert_eq!(g.autoscaling_options, None);

    let t = g.template.as_ref().unwrap();
    assert_eq!(
        t.labels.iter().collect::<Vec<_>>(),
        [(&"fleet.dev/pool".to_owned(), &"a".to_owned())]
    );
    assert!(t.taints.is_empty());
    assert_eq!(
        t.capacity
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [("cpu", "16"), ("memory", "64Gi"), ("pods", "110")]
    );
    assert_eq!((t.gpu.as_ref(), t.power), (None, None));

    let slots: Vec<_> = config
        .slots
        .values()
        .map(|s| {
            (
                s.name.as_str(),
                s.group.as_str(),
                s.provider_id.as_str(),
                s.kubernetes_node.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        slots,
        [
            ("bench-01", "pool-a", "fleet://bench-01", Some("bench-01")),
            ("bench-02", "pool-a", "fleet://bench-02", None),
            ("bench-03", "pool-a", "ipmi://10.0.0.13", None),
            (
                "bench-04",
                "pool-a",
                "fleet://bench-04",
                Some("rack1.bench-04")
            ),
        ]
    );
}

#[test]
fn a_group_that_sets_only_what_it_must_takes_every_default() {
    let config = ok(BASE);
    let g = &config.groups[&group("pool-a")];
    assert_eq!(g.min_size, 0);
    assert_eq!(g.max_node_provision_time, None);
    assert_eq!(g.readiness_taints, [taint(config::DEFAULT_READINESS_TAINT)]);
    assert_eq!(
        config::DEFAULT_READINESS_TAINT,
        "node.cilium.io/agent-not-ready:NoExecute"
    );
    assert_eq!(g.timings, Timings::default());
    assert_eq!(g.timings.machine_gone_grace, secs(12 * 60 + 10));
    assert_eq!(g.timings.failed_slot_cooldown, mins(30));
    assert_eq!((g.startup.timeout, g.shutdown.timeout), (mins(5), mins(5)));
    assert_eq!((g.startup.dir.as_ref(), g.template.as_ref()), (None, None));
    assert_eq!(g.autoscaling_options, None);
    let slot = &config.slots[&bench("bench-02")];
    assert_eq!(slot.provider_id, "fleet://bench-02");
    assert_eq!(slot.kubernetes_node, None);
}

#[test]
fn min_size_may_be_left_out_and_readiness_taints_may_be_emptied() {
    let text = edit("    min_size: 0\n", "    readiness_taints: []\n");
    let config = ok(&text);
    let g = &config.groups[&group("pool-a")];
    assert_eq!(g.min_size, 0);
    assert!(g.readiness_taints.is_empty());
}

#[test]
fn machine_gone_grace_defaults_to_the_attempt_budget_of_the_groups_own_timings() {
    let text = edit(
        "    max_size: 2\n",
        "    max_size: 2\n    timings: { job_timeout: 10m, budget_slack: 2m }\n",
    );
    let g = &ok(&text).groups[&group("pool-a")];
    // 10m + 30s + 90s + 4m + 10s + 2m, not the default 12m10s.
    assert_eq!(g.timings.attempt_budget(), secs(18 * 60 + 10));
    assert_eq!(g.timings.machine_gone_grace, secs(18 * 60 + 10));
    // An operation without its own timeout takes the group's job timeout.
    assert_eq!(
        (g.startup.timeout, g.shutdown.timeout),
        (mins(10), mins(10))
    );
}

#[test]
fn an_operations_own_timeout_wins_over_the_job_timeout() {
    let text = edit(
        r#"shutdown: { command: ["/usr/local/bin/power", "off"] }"#,
        r#"shutdown: { command: ["/usr/local/bin/power", "off"], timeout: 90s, dir: /srv/power }
    timings: { job_timeout: 7m }"#,
    );
    let g = &ok(&text).groups[&group("pool-a")];
    assert_eq!(g.startup.timeout, mins(7));
    assert_eq!(g.shutdown.timeout, secs(90));
    assert_eq!(g.shutdown.dir.as_deref(), Some(Path::new("/srv/power")));
}

#[test]
fn every_timing_and_the_cooldown_can_be_set() {
    let text = edit(
        "    max_size: 2\n",
        "    max_size: 2
    timings:
      job_timeout: 1m
      job_monitor_poll_interval: 2s
      uncordon_timeout: 3m
      readiness_gate_timeout: 4m
      max_uncordon_retry_interval: 5s
      budget_slack: 6s
      max_attempts: 7
      machine_gone_grace: 8m
      shutdown_attempt_reset_grace: 9m
      ttl_after_finished: 10h
      stuck_threshold: 12m
      failed_slot_cooldown: 1500ms
      delete_stale_node_after: 20m
",
    );
    let g = &ok(&text).groups[&group("pool-a")];
    assert_eq!(
        g.timings,
        Timings {
            job_timeout: mins(1),
            job_monitor_poll_interval: secs(2),
            uncordon_timeout: mins(3),
            readiness_gate_timeout: mins(4),
            max_uncordon_retry_interval: secs(5),
            budget_slack: secs(6),
            max_attempts: 7,
            machine_gone_grace: mins(8),
            shutdown_attempt_reset_grace: mins(9),
            ttl_after_finished: mins(600),
            stuck_threshold: mins(12),
            failed_slot_cooldown: Duration::from_millis(1500),
            delete_stale_node_after: Some(mins(20)),
        }
    );
}

#[test]
fn the_built_in_example_parses_into_two_groups_with_their_slots() {
    let config = ok(config::example());
    let (a, b) = (group("pool-a"), group("pool-b"));
    assert_eq!(
        config.groups.keys().cloned().collect::<Vec<_>>(),
        [a.clone(), b.clone()]
    );
    let names =
        |g: &GroupName| -> Vec<String> { config.slots_of(g).map(|s| s.name.to_string()).collect() };
    assert_eq!(names(&a), ["bench-01", "bench-02", "bench-03"]);
    assert_eq!(names(&b), ["gpu-01", "gpu-02"]);
    assert!(config.slots_of(&group("pool-z")).next().is_none());

    let pool_b = config.group(&b).unwrap();
    assert!(pool_b.readiness_taints.is_empty());
    assert_eq!(
        pool_b.autoscaling_options,
        Some(AutoscalingOptions::default())
    );
    assert_eq!(pool_b.startup.timeout, mins(10));
    assert_eq!(pool_b.shutdown.timeout, mins(2));
    let template = pool_b.template.as_ref().unwrap();
    assert_eq!(template.taints, [taint("fleet.dev/gpu=true:NoSchedule")]);
    let gpu = template.gpu.as_ref().unwrap();
    assert_eq!(
        (gpu.label.as_str(), gpu.types.as_slice()),
        ("fleet.dev/gpu-type", &["nvidia-a100".to_owned()][..])
    );
    let power = template.power.unwrap();
    assert_eq!((power.watts, power.price_per_kwh), (3500.0, 0.25));
    assert_eq!(config.group(&group("pool-z")), None);
}

#[test]
fn a_slot_is_found_by_its_provider_id() {
    let config = ok(config::example());
    let slot = config.slot_by_provider_id("ipmi://10.0.1.12").unwrap();
    assert_eq!(
        (slot.name.as_str(), slot.group.as_str()),
        ("gpu-02", "pool-b")
    );
    let slot = config.slot_by_provider_id("fleet://bench-03").unwrap();
    assert_eq!(slot.name.as_str(), "bench-03");
    assert_eq!(config.slot_by_provider_id("fleet://gpu-01"), None);
    assert_eq!(config.slot_by_provider_id(""), None);
}

#[test]
fn every_invalid_value_is_refused_naming_its_place_and_what_is_valid() {
    const START: &str = r#"startup: { command: ["/usr/local/bin/power", "on"] }"#;
    const SLOT1: &str = "{ name: bench-01, group: pool-a }";
    const SLOT2: &str = "{ name: bench-02, group: pool-a }";
    const SIZES: &str = "    min_size: 0\n    max_size: 2\n";
    let with_timings = |t: &str| edit(SIZES, &format!("{SIZES}    timings: {{ {t} }}\n"));
    let with_template = |t: &str| edit(SIZES, &format!("{SIZES}    template: {{ {t} }}\n"));
    let with_startup = |fields: &str| {
        edit(
            START,
            &format!(r#"startup: {{ command: ["/usr/local/bin/power", "on"], {fields} }}"#),
        )
    };
    let g = "groups[0] (pool-a)";

    // (case, file, place, a piece of the message)
    let rows: Vec<(&str, String, String, &str)> = vec![
        (
            "a group name that is not a label",
            edit("name: pool-a", "name: pool.a"),
            "groups[0].name".into(),
            "a group name is an RFC 1123 label",
        ),
        (
            "a group declared twice",
            BASE.replace(
                "slots:",
                &format!("  - name: pool-a\n    max_size: 0\n    {START}\n    shutdown: {{ command: [off] }}\nslots:"),
            ),
            "groups[1] (pool-a).name".into(),
            "group pool-a is declared twice (first at groups[0]); group names are unique",
        ),
        (
            "a slot name that is not a subdomain",
            edit(SLOT2, "{ name: Bench_02, group: pool-a }"),
            "slots[1].name".into(),
            "an RFC 1123 subdomain",
        ),
        (
            "a slot declared twice",
            edit(SLOT2, SLOT1),
            "slots[1] (bench-01).name".into(),
            "slot bench-01 is declared twice (first at slots[0]); slot names are unique",
        ),
        (
            "a provider id used twice",
            edit(SLOT2, "{ name: bench-02, group: pool-a, provider_id: fleet://bench-01 }"),
            "slots[1] (bench-02).provider_id".into(),
            "provider_id fleet://bench-01 is already used by slots[0] (bench-01); every slot has its own",
        ),
        (
            "an empty provider id",
            edit(SLOT1, r#"{ name: bench-01, group: pool-a, provider_id: "" }"#),
            "slots[0] (bench-01).provider_id".into(),
            "provider_id is empty: leave it out for the default fleet://<name>",
        ),
        (
            "a provider id with a bidi control (SPEC §7 S7)",
            edit(
                SLOT1,
                r#"{ name: bench-01, group: pool-a, provider_id: "fleet://\u202Ebench" }"#,
            ),
            "slots[0] (bench-01).provider_id".into(),
            "has a character a person cannot read as text: character 9 is U+202E (RIGHT-TO-LEFT \
             OVERRIDE)",
        ),
        (
            "a slot whose group is not declared",
            edit(SLOT2, "{ name: bench-02, group: pool-z }"),
            "slots[1] (bench-02).group".into(),
            "group pool-z is not declared; declare it under groups, or use one of: pool-a",
        ),
        (
            "a slot whose group is not a valid name",
            edit(SLOT2, "{ name: bench-02, group: Pool-A }"),
            "slots[1] (bench-02).group".into(),
            "invalid group name \"Pool-A\"",
        ),
        (
            "a kubernetes node that is not a subdomain",
            edit(SLOT1, "{ name: bench-01, group: pool-a, kubernetes_node: Bench-01 }"),
            "slots[0] (bench-01).kubernetes_node".into(),
            "invalid kubernetes_node \"Bench-01\": it has an uppercase letter; a node name is an RFC 1123 subdomain",
        ),
        (
            "a kubernetes node bound to two slots",
            BASE.replace(
                "group: pool-a }",
                "group: pool-a, kubernetes_node: node-1 }",
            ),
            "slots[1] (bench-02).kubernetes_node".into(),
            "kubernetes_node node-1 is already bound to slots[0] (bench-01); a node belongs to one slot",
        ),
        (
            "min_size above max_size",
            edit(SIZES, "    min_size: 2\n    max_size: 1\n"),
            format!("{g}.min_size"),
            "min_size 2 is greater than max_size 1; min_size is at most max_size",
        ),
        (
            "a negative size",
            edit("min_size: 0", "min_size: -1"),
            format!("{g}.min_size"),
            "invalid number \"-1\": a whole number from 0 to 4294967295",
        ),
        (
            "a size too large for any fleet",
            edit("max_size: 2", "max_size: 99999999999999999999999999"),
            format!("{g}.max_size"),
            "a whole number from 0 to 4294967295",
        ),
        (
            "a fractional size",
            edit("max_size: 2", "max_size: 1.5"),
            format!("{g}.max_size"),
            "invalid number \"1.5\"",
        ),
        (
            "a duration without a unit",
            edit(SIZES, &format!("{SIZES}    max_node_provision_time: 20\n")),
            format!("{g}.max_node_provision_time"),
            "use a number with a unit, like 30s, 1500ms, 12m10s or 1h",
        ),
        (
            "a duration in words",
            with_timings("job_timeout: ten minutes"),
            format!("{g}.timings.job_timeout"),
            "invalid duration \"ten minutes\"",
        ),
        (
            "a zero duration",
            with_timings("uncordon_timeout: 0"),
            format!("{g}.timings.uncordon_timeout"),
            "it must be longer than zero",
        ),
        (
            "a zero duration with a unit",
            with_timings("failed_slot_cooldown: 0s"),
            format!("{g}.timings.failed_slot_cooldown"),
            "it must be longer than zero",
        ),
        (
            "a duration longer than a year",
            with_timings("ttl_after_finished: 400days"),
            format!("{g}.timings.ttl_after_finished"),
            "at most 365 days",
        ),
        (
            "a duration that overflows",
            with_timings("stuck_threshold: 99999999999999999999999h"),
            format!("{g}.timings.stuck_threshold"),
            "like 30s",
        ),
        (
            "zero attempts",
            with_timings("max_attempts: 0"),
            format!("{g}.timings.max_attempts"),
            "a slot needs at least one attempt; use a whole number from 1",
        ),
        (
            "a bad readiness taint",
            edit(SIZES, &format!("{SIZES}    readiness_taints: [\"agent-not-ready\"]\n")),
            format!("{g}.readiness_taints[0]"),
            "write key[=value]:Effect",
        ),
        (
            "a bad template taint",
            with_template("taints: [\"a:NoSchedule\", \"b:Sometimes\"]"),
            format!("{g}.template.taints[1]"),
            "Effect one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        (
            "a quantity with a unit Kubernetes does not know",
            with_template("capacity: { memory: 64GB }"),
            format!("{g}.template.capacity.memory"),
            "invalid quantity \"64GB\": write a decimal number optionally followed by one of the suffixes",
        ),
        (
            "a negative quantity",
            with_template("capacity: { cpu: \"-4\" }"),
            format!("{g}.template.capacity.cpu"),
            "like 16, 500m or 64Gi",
        ),
        (
            "a DRA driver that is not a DNS subdomain",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: Gpu_Example, count: 1 }]"),
            format!("{g}.template.devices[0].driver"),
            "a lowercase DNS subdomain of at most 63 characters, like gpu.example.com",
        ),
        (
            "no devices",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, count: 0 }]"),
            format!("{g}.template.devices[0].count"),
            "a machine has 1 to 128 devices of one driver",
        ),
        (
            "more devices of one driver than a ResourceSlice lists",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, count: 100 }, { driver: gpu.example.com, name: nic, count: 29 }]"),
            format!("{g}.template.devices[1].count"),
            "this makes 129",
        ),
        (
            "two sets of one driver with one name",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, count: 1 }, { driver: gpu.example.com, count: 1 }]"),
            format!("{g}.template.devices[1].name"),
            "devices of driver gpu.example.com are already named device",
        ),
        (
            "a device name that is not a DNS label",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, name: GPU, count: 1 }]"),
            format!("{g}.template.devices[0].name"),
            "a DNS label of at most 58 characters",
        ),
        (
            "an attribute name that is not a C identifier",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, count: 1, attributes: { gpu-model: a100 } }]"),
            format!("{g}.template.devices[0].attributes"),
            "a C identifier of at most 32 characters",
        ),
        (
            "a version that is not semver",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, count: 1, attributes: { fw: { version: v1.2 } } }]"),
            format!("{g}.template.devices[0].attributes.fw"),
            "is not a semantic version, like 1.2.3",
        ),
        (
            "a device capacity that is not a quantity",
            with_template("capacity: { cpu: \"4\", memory: 8Gi }, devices: [{ driver: gpu.example.com, count: 1, capacity: { memory: 80GB } }]"),
            format!("{g}.template.devices[0].capacity.memory"),
            "invalid quantity",
        ),
        (
            "a template without memory",
            with_template("capacity: { cpu: \"4\" }"),
            format!("{g}.template.capacity"),
            "the template has no memory: a scale-from-zero node needs cpu and memory",
        ),
        (
            "a gpu without types",
            with_template("gpu: { label: fleet.dev/gpu-type, types: [] }"),
            format!("{g}.template.gpu.types"),
            "no gpu types: list at least one",
        ),
        (
            "a gpu without a label",
            with_template("gpu: { label: \"\", types: [nvidia-a100] }"),
            format!("{g}.template.gpu.label"),
            "the gpu label is empty",
        ),
        (
            "a machine that draws no power",
            with_template("power: { watts: 0, price_per_kwh: 0.2 }"),
            format!("{g}.template.power.watts"),
            "a finite number above zero",
        ),
        (
            "power that is not a number",
            with_template("power: { watts: .nan, price_per_kwh: 0.2 }"),
            format!("{g}.template.power.watts"),
            "invalid watts NaN",
        ),
        (
            "a negative price",
            with_template("power: { watts: 350, price_per_kwh: -0.1 }"),
            format!("{g}.template.power.price_per_kwh"),
            "a finite number, zero or more",
        ),
        (
            "a standby draw above the draw when on",
            with_template("power: { watts: 350, standby_watts: 400, price_per_kwh: 0.2 }"),
            format!("{g}.template.power.standby_watts"),
            "standby_watts 400 is more than watts 350",
        ),
        (
            "a negative standby draw",
            with_template("power: { watts: 350, standby_watts: -1, price_per_kwh: 0.2 }"),
            format!("{g}.template.power.standby_watts"),
            "a finite number, zero or more, like 5",
        ),
        (
            "a slot's power in a group that declares none, without a price",
            edit("{ name: bench-01, group: pool-a }", "{ name: bench-01, group: pool-a, power: { watts: 90 } }"),
            "slots[0] (bench-01).power".to_owned(),
            "the slot's group declares no template.power, so the slot's power needs price_per_kwh",
        ),
        (
            "a slot's standby draw above its watts",
            edit("{ name: bench-01, group: pool-a }", "{ name: bench-01, group: pool-a, power: { watts: 90, standby_watts: 91, price_per_kwh: 0.3 } }"),
            "slots[0] (bench-01).power.standby_watts".to_owned(),
            "standby_watts 91 is more than watts 90",
        ),
        (
            "a utilization threshold above one",
            edit(SIZES, &format!("{SIZES}    autoscaling_options: {{ scale_down_utilization_threshold: 1.5 }}\n")),
            format!("{g}.autoscaling_options.scale_down_utilization_threshold"),
            "a number from 0 to 1, like 0.5",
        ),
        (
            "an option duration in words",
            edit(SIZES, &format!("{SIZES}    autoscaling_options: {{ scale_down_unneeded_time: soon }}\n")),
            format!("{g}.autoscaling_options.scale_down_unneeded_time"),
            "invalid duration \"soon\"",
        ),
        (
            "an empty command",
            edit(START, "startup: { command: [] }"),
            format!("{g}.startup.command"),
            "the command is empty: give the program and its arguments as a list",
        ),
        (
            "an empty program",
            edit(r#"["/usr/local/bin/power", "off"]"#, r#"["", "off"]"#),
            format!("{g}.shutdown.command[0]"),
            "the program is empty",
        ),
        (
            "an env name that is not a name",
            with_startup("env: { \"1BMC\": x }"),
            format!("{g}.startup.env.1BMC"),
            "a name is a letter or '_' followed by letters, digits and '_'",
        ),
        (
            "an env name fleet sets itself",
            with_startup("env: { FLEET_SLOT: x }"),
            format!("{g}.startup.env.FLEET_SLOT"),
            "is reserved: fleet sets FLEET_SLOT, FLEET_GROUP, FLEET_CLAIM, FLEET_ATTEMPT, FLEET_PROVIDER_ID, FLEET_OPERATION, FLEET_CONTROLLER itself",
        ),
        (
            "both a command and a job",
            with_startup("job: { image: power:1 }"),
            format!("{g}.startup"),
            "the operation has both command and job: it runs one of them",
        ),
        (
            "neither a command nor a job",
            edit(START, "startup: { timeout: 5m }"),
            format!("{g}.startup"),
            "the operation runs nothing: give command",
        ),
        (
            "a job image with a space",
            edit(START, "startup: { job: { image: \"power on\" } }"),
            format!("{g}.startup.job.image"),
            "invalid image \"power on\": it contains ' '",
        ),
        (
            "an empty job image",
            edit(START, "startup: { job: { image: \"\" } }"),
            format!("{g}.startup.job.image"),
            "the image is empty; an image is a reference like",
        ),
        (
            "a job image with an uppercase repository",
            edit(START, "startup: { job: { image: registry.example/Power:1 } }"),
            format!("{g}.startup.job.image"),
            "\"Power\" is not a repository path component",
        ),
        (
            "a job image with a bad tag",
            edit(START, "startup: { job: { image: \"power:.1\" } }"),
            format!("{g}.startup.job.image"),
            "the tag \".1\" is not letters",
        ),
        (
            "a job image with a bad digest",
            edit(START, "startup: { job: { image: power@sha256:abc } }"),
            format!("{g}.startup.job.image"),
            "the digest \"sha256:abc\" is not an algorithm and its hex digest",
        ),
        (
            "a job env name fleet sets itself",
            edit(START, "startup: { job: { image: power:1 }, env: { FLEET_CLAIM: x } }"),
            format!("{g}.startup.env.FLEET_CLAIM"),
            "is reserved: fleet sets FLEET_SLOT",
        ),
        (
            "a job service account that is no name",
            edit(START, "startup: { job: { image: power:1, service_account_name: Power_Account } }"),
            format!("{g}.startup.job.service_account_name"),
            "invalid service_account_name \"Power_Account\"",
        ),
        (
            "a job node selector key that is no label key",
            edit(START, "startup: { job: { image: power:1, node_selector: { \"bad key\": x } } }"),
            format!("{g}.startup.job.node_selector.bad key"),
            "invalid label key \"bad key\"",
        ),
        (
            "a job node selector value that is no label value",
            edit(START, "startup: { job: { image: power:1, node_selector: { zone: \"-a\" } } }"),
            format!("{g}.startup.job.node_selector.zone"),
            "invalid label value \"-a\"",
        ),
        (
            "a job toleration with an unknown operator",
            edit(START, "startup: { job: { image: power:1, tolerations: [{ key: a, operator: Is }] } }"),
            format!("{g}.startup.job.tolerations[0].operator"),
            "invalid operator \"Is\": Equal (the default) or Exists",
        ),
        (
            "a job toleration without a key that is not Exists",
            edit(START, "startup: { job: { image: power:1, tolerations: [{ effect: NoSchedule }] } }"),
            format!("{g}.startup.job.tolerations[0].key"),
            "needs operator: Exists",
        ),
        (
            "a job toleration Exists with a value",
            edit(START, "startup: { job: { image: power:1, tolerations: [{ key: a, operator: Exists, value: b }] } }"),
            format!("{g}.startup.job.tolerations[0].value"),
            "operator Exists matches any value",
        ),
        (
            "a job toleration with an unknown effect",
            edit(START, "startup: { job: { image: power:1, tolerations: [{ key: a, effect: NoRun }] } }"),
            format!("{g}.startup.job.tolerations[0].effect"),
            "invalid effect \"NoRun\"",
        ),
        (
            "a job toleration with seconds but not NoExecute",
            edit(START, "startup: { job: { image: power:1, tolerations: [{ key: a, effect: NoSchedule, toleration_seconds: 5 }] } }"),
            format!("{g}.startup.job.tolerations[0].toleration_seconds"),
            "applies to effect NoExecute only",
        ),
        (
            "a job argument with a NUL",
            edit(START, "startup: { job: { image: power:1, args: [\"a\\0b\"] } }"),
            format!("{g}.startup.job.args[0]"),
            "an argument contains a NUL character",
        ),
        (
            "an empty working directory",
            with_startup("dir: \"\""),
            format!("{g}.startup.dir"),
            "give the working directory as a path",
        ),
        (
            "a zero operation timeout",
            with_startup("timeout: 0ms"),
            format!("{g}.startup.timeout"),
            "it must be longer than zero",
        ),
        (
            "a file with no groups",
            "groups: []\nslots: []\n".into(),
            "groups".into(),
            "no groups: declare at least one group",
        ),
        (
            "a file with slots but no groups key",
            "slots:\n  - { name: bench-01, group: pool-a }\n".into(),
            "groups".into(),
            "no groups",
        ),
        (
            "an empty file",
            "".into(),
            "groups".into(),
            "no groups",
        ),
    ];
    for (case, text, place, want) in &rows {
        let problems = problems(text);
        assert!(
            problems
                .iter()
                .any(|p| &p.place == place && p.message.contains(want)),
            "{case}: want {place}: ...{want}...; got {problems:#?}\n---\n{text}"
        );
        let shown = parse(text).unwrap_err().to_string();
        assert!(
            shown.contains(&format!("{PATH}: {place}: ")),
            "{case}: the message names the file and the place: {shown}"
        );
    }
}

#[test]
fn unknown_keys_are_refused_at_every_level_naming_the_key() {
    let rows = [
        ("top level", "slots:", "bogus: 1\nslots:"),
        (
            "group",
            "    min_size: 0\n",
            "    min_size: 0\n    bogus: 1\n",
        ),
        (
            "operation",
            r#"shutdown: { command: ["/usr/local/bin/power", "off"] }"#,
            r#"shutdown: { command: ["/usr/local/bin/power", "off"], bogus: 1 }"#,
        ),
        (
            "timings",
            "    min_size: 0\n",
            "    min_size: 0\n    timings: { bogus: 1m }\n",
        ),
        (
            "template",
            "    min_size: 0\n",
            "    min_size: 0\n    template: { bogus: 1 }\n",
        ),
        (
            "gpu",
            "    min_size: 0\n",
            "    min_size: 0\n    template: { gpu: { label: l, types: [t], bogus: 1 } }\n",
        ),
        (
            "power",
            "    min_size: 0\n",
            "    min_size: 0\n    template: { power: { watts: 1, price_per_kwh: 0, bogus: 1 } }\n",
        ),
        (
            "slot",
            "{ name: bench-01, group: pool-a }",
            "{ name: bench-01, group: pool-a, bogus: 1 }",
        ),
    ];
    for (level, from, to) in rows {
        let message = parse_error(&edit(from, to));
        assert!(
            message.contains("unknown field `bogus`, expected"),
            "{level}: {message}"
        );
        assert!(message.contains("line "), "{level}: {message}");
    }
    // A misspelt known field names the field and the ones that are valid.
    let message = parse_error(&edit("min_size: 0", "minsize: 0"));
    assert!(
        message.contains("unknown field `minsize`, expected one of name, min_size, max_size"),
        "{message}"
    );
}

#[test]
fn missing_required_fields_are_refused_naming_the_field() {
    let message = parse_error(&edit("    max_size: 2\n", ""));
    assert!(message.contains("missing field `max_size`"), "{message}");
    // Since the drivers (SPEC §4.10) a group's operations are optional: a shutdown missing is a
    // problem of each slot it would power off, naming the slot and what to give.
    let missing = problems(&edit(
        "    shutdown: { command: [\"/usr/local/bin/power\", \"off\"] }\n",
        "",
    ));
    assert_eq!(
        missing
            .iter()
            .map(|p| (p.place.as_str(), p.message.as_str()))
            .collect::<Vec<_>>(),
        [1, 2].map(|n| (
            if n == 1 {
                "slots[0] (bench-01).driver"
            } else {
                "slots[1] (bench-02).driver"
            },
            "the slot has no driver and its group pool-a has no shutdown: give the slot a driver \
             (type: wol, redfish or ipmi), or the group shutdown (a command or a job)"
        ))
    );
    let message = parse_error(&edit(
        "{ name: bench-01, group: pool-a }",
        "{ name: bench-01 }",
    ));
    assert!(message.contains("missing field `group`"), "{message}");
}

#[test]
fn several_problems_are_reported_together() {
    let text = r#"
groups:
  - name: pool-a
    min_size: 3
    max_size: 2
    startup: { command: [], env: { FLEET_CLAIM: x } }
    shutdown: { command: [off], timeout: soon }
    timings: { max_attempts: 0 }
  - name: Pool_B
    max_size: 0
    startup: { command: [on] }
    shutdown: { command: [off] }
slots:
  - { name: bench-01, group: pool-a }
  - { name: bench-01, group: pool-z }
  - { name: bench-02, group: pool-a, provider_id: fleet://bench-01 }
"#;
    let problems = problems(text);
    let places: Vec<&str> = problems.iter().map(|p| p.place.as_str()).collect();
    assert_eq!(
        places,
        [
            "groups[0] (pool-a).min_size",
            "groups[0] (pool-a).timings.max_attempts",
            "groups[0] (pool-a).startup.command",
            "groups[0] (pool-a).startup.env.FLEET_CLAIM",
            "groups[0] (pool-a).shutdown.timeout",
            "groups[1].name",
            "slots[1] (bench-01).name",
            "slots[1] (bench-01).group",
            "slots[2] (bench-02).provider_id",
        ]
    );
    let shown = parse(text).unwrap_err().to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 1 + problems.len(), "{shown}");
    assert_eq!(
        lines[0],
        format!("{PATH}: invalid configuration, 9 problems:")
    );
    for (line, problem) in lines[1..].iter().zip(&problems) {
        assert_eq!(
            *line,
            format!("{PATH}: {}: {}", problem.place, problem.message)
        );
    }
}

#[test]
fn a_group_with_problems_does_not_also_make_its_slots_undeclared() {
    let problems = problems(&edit("min_size: 0", "min_size: 3"));
    assert_eq!(
        problems,
        [Problem {
            place: "groups[0] (pool-a).min_size".into(),
            message: "min_size 3 is greater than max_size 2; min_size is at most max_size".into(),
        }]
    );
}

#[test]
fn malformed_yaml_and_wrong_shapes_are_parse_errors_with_a_line() {
    let rows = [
        "groups: [",
        "groups:\n  - name: pool-a\n   max_size: 2\n  bad: [\n",
        "groups: 3\n",
        "- just\n- a list\n",
        "groups: {}\n",
        "groups:\n  - name: pool-a\n    max_size: [2]\n",
        "groups:\n  - name: pool-a\n    max_size: 2\n    startup: { command: \"/bin/on\" }\n",
        "\"unterminated",
        "groups:\n  - name: a\n    name: b\n",
        "---\ngroups: []\n---\ngroups: []\n",
    ];
    for text in rows {
        let message = parse_error(text);
        assert!(message.contains("line "), "{text:?}: {message}");
    }
    let shown = parse("groups: [").unwrap_err().to_string();
    assert!(
        shown.starts_with(&format!(
            "{PATH}: the configuration is not YAML of the expected shape: "
        )),
        "{shown}"
    );
}

#[test]
fn hostile_input_is_an_error_not_a_panic() {
    let deep = "[".repeat(100_000);
    let laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n\
                  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
                  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n\
                  groups: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
    let huge_key = format!("{}: 1\n", "k".repeat(1_000_000));
    for text in [
        deep.as_str(),
        laughs,
        huge_key.as_str(),
        "\0\u{1}\u{2}",
        "\u{feff}\u{feff}",
        ":",
        "? [a]\n: b\n",
        "groups: !!binary aGVsbG8=\n",
    ] {
        assert!(parse(text).is_err(), "{:?}", &text[..text.len().min(60)]);
    }
}

#[test]
fn non_utf8_content_is_a_parse_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, b"groups:\n  - name: pool-\xff\xfe\n").unwrap();
    match config::load(&path) {
        Err(ConfigError::Parse { path: p, message }) => {
            assert_eq!(p, path);
            assert!(
                message.contains("not UTF-8 text (invalid byte at offset 23)"),
                "{message}"
            );
        }
        other => panic!("want Parse, got {other:?}"),
    }
}

#[test]
fn loading_a_missing_file_is_a_read_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    let err = config::load(&path).unwrap_err();
    let shown = err.to_string();
    match err {
        ConfigError::Read { path: p, error } => {
            assert_eq!(p, path);
            assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("want Read, got {other:?}"),
    }
    assert!(
        shown.starts_with(&format!(
            "cannot read the configuration file {}: ",
            path.display()
        )),
        "{shown}"
    );
}

#[test]
fn loading_a_file_gives_what_parsing_its_text_gives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, config::example()).unwrap();
    let loaded = config::load(&path).unwrap();
    assert_eq!(loaded, config::parse(config::example(), &path).unwrap());
    assert_eq!(loaded.slots.len(), 5);
}

/// What holds of every configuration `parse` accepts, and of every refusal.
fn holds(outcome: &Result<Config, ConfigError>) -> Result<(), String> {
    match outcome {
        Ok(config) => {
            if config.groups.is_empty() {
                return Err("accepted a file with no groups".into());
            }
            for (name, g) in &config.groups {
                let slots = config.slots_of(name).count();
                if g.min_size > g.max_size {
                    return Err(format!(
                        "{name}: sizes {}..{} with {slots} slots",
                        g.min_size, g.max_size
                    ));
                }
                for op in [&g.startup, &g.shutdown] {
                    match &op.run {
                        Run::Command(argv) if argv.is_empty() => {
                            return Err(format!("{name}: an empty command"));
                        }
                        Run::Job(job) if job.image.is_empty() => {
                            return Err(format!("{name}: a Job without an image"));
                        }
                        Run::Command(_) | Run::Job(_) | Run::Driver => {}
                    }
                }
            }
            for slot in config.slots.values() {
                if !config.groups.contains_key(&slot.group) {
                    return Err(format!(
                        "{}: group {} is not declared",
                        slot.name, slot.group
                    ));
                }
                if config.slot_by_provider_id(&slot.provider_id) != Some(slot) {
                    return Err(format!(
                        "{}: provider id {} is shared",
                        slot.name, slot.provider_id
                    ));
                }
            }
            Ok(())
        }
        Err(ConfigError::Invalid { problems, .. }) if problems.is_empty() => {
            Err("refused with no problem".into())
        }
        Err(ConfigError::Parse { message, .. }) if message.is_empty() => {
            Err("refused with an empty message".into())
        }
        Err(ConfigError::Read { .. }) => Err("parse never reads".into()),
        Err(_) => Ok(()),
    }
}

#[test]
fn what_holds_of_every_outcome_holds_of_the_examples() {
    assert_eq!(holds(&parse(config::example())), Ok(()));
    assert_eq!(holds(&parse(PINNED)), Ok(()));
    assert_eq!(holds(&parse("groups: [")), Ok(()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    // SPEC §1.6: no input makes fleet panic. Damaging the example a few characters at a time
    // reaches far more of the validator than random text does.
    #[test]
    fn no_damage_to_a_valid_file_makes_parsing_panic_or_accept_nonsense(
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, "[ -~\n]{0,6}"), 1..6)
    ) {
        let mut text = config::example().to_owned();
        for (at, cut, insert) in edits {
            // The example is not all ASCII (its comments cite SPEC sections): cut on characters.
            let mut start = at.index(text.len() + 1);
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + cut).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            text.replace_range(start..end, &insert);
        }
        prop_assert_eq!(holds(&parse(&text)), Ok(()));
    }

    #[test]
    fn arbitrary_text_never_makes_parsing_panic(text in "\\PC{0,200}") {
        prop_assert_eq!(holds(&parse(&text)), Ok(()));
    }
}

// The example exactly as operators were given it (one slot under a max_size of 4) is valid: the
// free slots bound a scale-up as well as max_size does.
#[test]
fn the_pinned_example_as_issued_parses() {
    let text = r#"
groups:
  - name: pool-a                    # RFC 1123 label
    min_size: 0
    max_size: 4
    max_node_provision_time: 20m
    readiness_taints: ["node.cilium.io/agent-not-ready:NoExecute"]
    startup:  { command: ["/usr/local/bin/power", "on"], timeout: 5m, env: { BMC: "10.0.0.9" } }
    shutdown: { command: ["/usr/local/bin/power", "off"], timeout: 5m }
    timings:  { readiness_gate_timeout: 4m, uncordon_timeout: 90s, machine_gone_grace: 12m10s,
                max_attempts: 3, shutdown_attempt_reset_grace: 30m, ttl_after_finished: 1h }
    template: { labels: { "fleet.dev/pool": "a" }, taints: [], capacity: { cpu: "16", memory: "64Gi", pods: "110" } }
slots:
  - name: bench-01
    group: pool-a
    provider_id: fleet://bench-01     # default fleet://<name>
    kubernetes_node: bench-01         # optional
"#;
    let config = config::parse(text, std::path::Path::new(PATH)).unwrap_or_else(|e| panic!("{e}"));
    let g = config
        .group(&fleet::domain::name::GroupName::parse("pool-a").unwrap())
        .unwrap();
    assert_eq!((g.min_size, g.max_size, config.slots.len()), (0, 4, 1));
    assert_eq!(g.timings.machine_gone_grace, Duration::from_secs(730));
}

#[test]
fn a_group_opts_in_to_autoscaling_options_with_true_or_with_its_overrides() {
    let g = &ok(&BASE.replace(
        "    max_size: 2\n",
        "    max_size: 2\n    autoscaling_options: { scale_down_unneeded_time: 5m, scale_down_gpu_utilization_threshold: 0.25, zero_or_max_node_scaling: true }\n",
    ))
    .groups[&GroupName::parse("pool-a").unwrap()];
    assert_eq!(
        g.autoscaling_options,
        Some(AutoscalingOptions {
            scale_down_unneeded_time: Some(Duration::from_secs(300)),
            scale_down_gpu_utilization_threshold: Some(0.25),
            zero_or_max_node_scaling: Some(true),
            ..AutoscalingOptions::default()
        })
    );
    let off = &ok(&BASE.replace(
        "    max_size: 2\n",
        "    max_size: 2\n    autoscaling_options: false\n",
    ))
    .groups[&GroupName::parse("pool-a").unwrap()];
    assert_eq!(off.autoscaling_options, None);
    // A key it does not know is refused with the list of those it does.
    let e = parse(&BASE.replace(
        "    max_size: 2\n",
        "    max_size: 2\n    autoscaling_options: { scale_down_unneded_time: 5m }\n",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("autoscaling_options is true, false, or a mapping of overrides among"),
        "{e}"
    );
}

// `lock_timeout` was parsed and changed nothing. fleet takes no coordination lock, so
// the setting is gone, and a file that still sets it is told so (exit 2, its place and why).
// SPEC §4.2, Jobs as operations: a group's operation may be a Kubernetes Job; every field of
// the template lands where it should, the environment is the operation's, and the Job is kept
// the group's ttl_after_finished.
#[test]
fn a_job_operation_lands_with_every_field_of_its_template() {
    let text = edit(
        r#"startup: { command: ["/usr/local/bin/power", "on"] }"#,
        r#"startup:
      job:
        image: registry.example/power@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
        command: ["/power"]
        args: ["on"]
        service_account_name: fleet-power
        node_selector: { "kubernetes.io/hostname": bmc-gateway, zone: "" }
        tolerations:
          - { key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule }
          - { key: fleet.dev/draining, value: "yes", effect: NoExecute, toleration_seconds: 30 }
          - { operator: Exists }
      env: { BMC: "10.0.0.9" }
      dir: /work
      timeout: 3m
    timings: { ttl_after_finished: 2h }"#,
    );
    let config = ok(&text);
    let g = &config.groups[&group("pool-a")];
    let Run::Job(job) = &g.startup.run else {
        panic!("want a job, got {:?}", g.startup.run);
    };
    assert_eq!(
        *job,
        JobTemplate {
            image: "registry.example/power@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
            command: vec!["/power".into()],
            args: vec!["on".into()],
            service_account_name: Some("fleet-power".into()),
            node_selector: [
                ("kubernetes.io/hostname".to_owned(), "bmc-gateway".to_owned()),
                ("zone".to_owned(), String::new()),
            ]
            .into(),
            tolerations: vec![
                Toleration {
                    key: Some("node-role.kubernetes.io/control-plane".into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    ..Toleration::default()
                },
                Toleration {
                    key: Some("fleet.dev/draining".into()),
                    value: Some("yes".into()),
                    effect: Some("NoExecute".into()),
                    toleration_seconds: Some(30),
                    ..Toleration::default()
                },
                Toleration {
                    operator: Some("Exists".into()),
                    ..Toleration::default()
                },
            ],
            ttl_after_finished: Duration::from_secs(2 * 60 * 60),
        }
    );
    assert_eq!(
        g.startup.env.iter().collect::<Vec<_>>(),
        [(&"BMC".to_owned(), &"10.0.0.9".to_owned())]
    );
    assert_eq!(g.startup.dir.as_deref(), Some(Path::new("/work")));
    assert_eq!(g.startup.timeout, mins(3));
    assert_eq!(g.shutdown.run, command(&["/usr/local/bin/power", "off"]));
}

#[test]
fn a_job_needs_only_its_image_and_images_take_every_usual_form() {
    for image in [
        "power",
        "power:1.4",
        "library/power:v1_4-rc.1",
        "registry.example/team/power:1.4",
        "localhost:5000/power",
        "registry.example:443/a.b/c__d/e-f:latest",
        "power@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "registry.example/power:1.4@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        let text = edit(
            r#"startup: { command: ["/usr/local/bin/power", "on"] }"#,
            &format!("startup: {{ job: {{ image: \"{image}\" }} }}"),
        );
        let config = ok(&text);
        let g = &config.groups[&group("pool-a")];
        let want = JobTemplate {
            image: image.to_owned(),
            command: vec![],
            args: vec![],
            service_account_name: None,
            node_selector: Default::default(),
            tolerations: vec![],
            ttl_after_finished: Timings::default().ttl_after_finished,
        };
        assert_eq!(g.startup.run, Run::Job(want), "{image}");
    }
    for image in [
        "Power",
        "power:",
        ":1",
        "/power",
        "power/",
        "power//x",
        "-power",
        "power:-1",
        "registry.example:port/power",
        "power@",
        "power@sha256:XYZ0123456789abcdef0123456789abcdef",
        "pow er",
        "pöwer",
    ] {
        let text = edit(
            r#"startup: { command: ["/usr/local/bin/power", "on"] }"#,
            &format!("startup: {{ job: {{ image: \"{image}\" }} }}"),
        );
        let problems = problems(&text);
        assert_eq!(problems.len(), 1, "{image}: {problems:#?}");
        assert_eq!(
            problems[0].place, "groups[0] (pool-a).startup.job.image",
            "{image}"
        );
        assert!(
            problems[0]
                .message
                .starts_with(&format!("invalid image {image:?}: ")),
            "{image}: {}",
            problems[0].message
        );
    }
}

#[test]
fn a_job_refuses_unknown_keys_and_needs_an_image() {
    let message = parse_error(&edit(
        r#"startup: { command: ["/usr/local/bin/power", "on"] }"#,
        "startup: { job: { image: power:1, serviceAccountName: fleet } }",
    ));
    assert!(
        message.contains("unknown field `serviceAccountName`, expected one of image, command"),
        "{message}"
    );
    let message = parse_error(&edit(
        r#"startup: { command: ["/usr/local/bin/power", "on"] }"#,
        "startup: { job: { command: [on] } }",
    ));
    assert!(message.contains("missing field `image`"), "{message}");
}

#[test]
fn lock_timeout_is_refused_saying_why() {
    let text = edit(
        "    max_size: 2\n",
        "    max_size: 2\n    timings: { lock_timeout: 5m }\n",
    );
    let found = problems(&text);
    assert!(
        found
            .iter()
            .any(|p| p.place.ends_with("timings.lock_timeout")
                && p.message.contains("no coordination lock")),
        "{found:?}"
    );
}

// An operation abandoned as stuck must be one that can no longer report: its timeout
// and the wrapper's 30 s to report stay short of stuck_threshold.
#[test]
fn an_operation_timeout_reaching_the_stuck_threshold_is_refused() {
    let text = edit(
        "    max_size: 2\n",
        "    max_size: 2\n    timings: { stuck_threshold: 5m }\n",
    );
    let found = problems(&text);
    assert!(
        found
            .iter()
            .any(|p| p.place.ends_with("startup.timeout") && p.message.contains("stuck_threshold")),
        "{found:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Power drivers (SPEC §4.10): a group's `driver` gives defaults, a slot's overrides them field by
// field; a slot with a driver needs no operation of its group.

/// Three groups: one whose slots are Redfish machines (defaults in the group), one of
/// Wake-on-LAN minis powered off by their agents, and one with commands, where one slot has an
/// IPMI driver of its own and the other runs the group's commands.
const DRIVERS: &str = r#"
groups:
  - name: rack
    max_size: 2
    driver: { type: redfish, username: admin, password_file: /etc/fleet/bmc-password, ca_file: /etc/fleet/bmc-ca.pem }
  - name: minis
    max_size: 1
    driver: { type: wol, broadcast: "192.168.1.255:9", off: agent }
  - name: old
    max_size: 2
    startup: { command: [on] }
    shutdown: { command: [off] }
slots:
  - { name: n1, group: rack, driver: { endpoint: "https://10.0.0.21", system: /redfish/v1/Systems/1 } }
  - { name: n2, group: rack, driver: { endpoint: "https://10.0.0.22", username: root, password_env: BMC_N2 } }
  - { name: mini-1, group: minis, driver: { mac: "52:54:00:12:34:56" } }
  - { name: ipmi-1, group: old, driver: { type: ipmi, host: 10.0.0.31, username: admin, password_env: IPMI_PASS } }
  - { name: old-2, group: old }
"#;

/// DRIVERS with `from` replaced by `to`, exactly once.
fn dedit(from: &str, to: &str) -> String {
    assert_eq!(
        DRIVERS.matches(from).count(),
        1,
        "{from:?} is not once in DRIVERS"
    );
    DRIVERS.replacen(from, to, 1)
}

#[test]
fn a_slots_driver_is_its_groups_defaults_with_its_own_fields_over_them() {
    use fleet::power::ipmi::config::IpmiDriver;
    use fleet::power::redfish::config::RedfishDriver;
    use fleet::power::wol::config::WolDriver;
    use fleet::power::{Driver, DriverKind, OffBy, SecretSource};
    let config = ok(DRIVERS);
    let driver = |slot: &str| config.slots[&bench(slot)].driver.as_deref().cloned();
    assert_eq!(
        driver("n1"),
        Some(Driver {
            kind: DriverKind::Redfish(RedfishDriver {
                endpoint: "https://10.0.0.21".into(),
                system: Some("/redfish/v1/Systems/1".into()),
                username: "admin".into(),
                password: SecretSource::File("/etc/fleet/bmc-password".into()),
                ca_file: Some("/etc/fleet/bmc-ca.pem".into()),
                tls_fingerprint: None,
                insecure: false,
            }),
            off: OffBy::Driver,
        })
    );
    // The slot's password_env replaces the group's password_file: one choice, not two fields.
    assert_eq!(
        driver("n2"),
        Some(Driver {
            kind: DriverKind::Redfish(RedfishDriver {
                endpoint: "https://10.0.0.22".into(),
                system: None,
                username: "root".into(),
                password: SecretSource::Env("BMC_N2".into()),
                ca_file: Some("/etc/fleet/bmc-ca.pem".into()),
                tls_fingerprint: None,
                insecure: false,
            }),
            off: OffBy::Driver,
        })
    );
    assert_eq!(
        driver("mini-1"),
        Some(Driver {
            kind: DriverKind::Wol(WolDriver {
                mac: "52:54:00:12:34:56".parse().unwrap(),
                broadcast: "192.168.1.255:9".parse().unwrap(),
            }),
            off: OffBy::Agent,
        })
    );
    assert_eq!(
        driver("ipmi-1"),
        Some(Driver {
            kind: DriverKind::Ipmi(IpmiDriver {
                host: "10.0.0.31".into(),
                port: 623,
                username: "admin".into(),
                password: SecretSource::Env("IPMI_PASS".into()),
                cipher_suite: None,
            }),
            off: OffBy::Driver,
        })
    );
    assert_eq!(driver("old-2"), None);
    // A group that names no operation: its slots' drivers run both, within its job_timeout.
    let rack = &config.groups[&group("rack")];
    for op in [&rack.startup, &rack.shutdown] {
        assert_eq!(op.run, Run::Driver);
        assert_eq!(op.timeout, Timings::default().job_timeout);
        assert!(op.env.is_empty() && op.dir.is_none());
    }
    assert_eq!(config.groups[&group("old")].startup.run, command(&["on"]));
    assert!(config.kubernetes_settings().is_empty());
}

#[test]
fn a_driver_takes_its_defaults_and_a_slot_naming_another_type_takes_none_of_its_groups() {
    use fleet::power::{DriverKind, OffBy};
    // No broadcast: 255.255.255.255:9. A bare address: port 9. No port: 623.
    let text = dedit(
        r#"{ name: mini-1, group: minis, driver: { mac: "52:54:00:12:34:56" } }"#,
        r#"{ name: mini-1, group: minis, driver: { mac: "52-54-00-AB-CD-EF", broadcast: 10.1.2.255 } }"#,
    );
    let config = ok(&text);
    let Some(DriverKind::Wol(wol)) = config.slots[&bench("mini-1")]
        .driver
        .as_ref()
        .map(|d| d.kind.clone())
    else {
        panic!("a wol driver")
    };
    assert_eq!(wol.mac.to_string(), "52:54:00:ab:cd:ef");
    assert_eq!(wol.broadcast, "10.1.2.255:9".parse().unwrap());
    let bare = ok(&DRIVERS.replace(r#"broadcast: "192.168.1.255:9", "#, ""));
    let Some(DriverKind::Wol(wol)) = bare.slots[&bench("mini-1")]
        .driver
        .as_ref()
        .map(|d| d.kind.clone())
    else {
        panic!("a wol driver")
    };
    assert_eq!(wol.broadcast, "255.255.255.255:9".parse().unwrap());
    // n1 names wol in a redfish group: the group's username and password are not its.
    let other = ok(&dedit(
        r#"driver: { endpoint: "https://10.0.0.21", system: /redfish/v1/Systems/1 }"#,
        r#"driver: { type: wol, mac: "52:54:00:00:00:01", off: agent }"#,
    ));
    let n1 = other.slots[&bench("n1")].driver.clone().unwrap();
    assert_eq!((n1.type_name(), n1.off), ("wol", OffBy::Agent));
    // A slot's off overrides its group's: agent off on one Redfish machine, and back.
    let agent = ok(&dedit(
        r#"system: /redfish/v1/Systems/1 }"#,
        r#"system: /redfish/v1/Systems/1, off: agent }"#,
    ));
    assert_eq!(
        agent.slots[&bench("n1")].driver.as_ref().unwrap().off,
        OffBy::Agent
    );
    assert_eq!(
        agent.slots[&bench("n2")].driver.as_ref().unwrap().off,
        OffBy::Driver
    );
}

#[test]
fn every_invalid_driver_is_refused_naming_its_place_and_what_is_valid() {
    const N1: &str = r#"{ endpoint: "https://10.0.0.21", system: /redfish/v1/Systems/1 }"#;
    const MINI: &str = r#"{ mac: "52:54:00:12:34:56" }"#;
    const IPMI: &str = "{ type: ipmi, host: 10.0.0.31, username: admin, password_env: IPMI_PASS }";
    const RACK: &str = "{ type: redfish, username: admin, password_file: /etc/fleet/bmc-password, ca_file: /etc/fleet/bmc-ca.pem }";
    let n1 = |fields: &str| dedit(N1, &format!("{{ {fields} }}"));
    let mini = |fields: &str| dedit(MINI, &format!("{{ {fields} }}"));
    let ipmi = |fields: &str| {
        dedit(
            IPMI,
            &format!(
                "{{ type: ipmi, host: 10.0.0.31, username: admin, password_env: IPMI_PASS, {fields} }}"
            ),
        )
    };
    let rack = |fields: &str| dedit(RACK, &format!("{{ {fields} }}"));
    let s0 = "slots[0] (n1).driver";
    let s2 = "slots[2] (mini-1).driver";
    let s3 = "slots[3] (ipmi-1).driver";
    let g0 = "groups[0] (rack).driver";

    // (case, file, place, a piece of the message)
    let rows: Vec<(&str, String, String, &str)> = vec![
        (
            "a password written in the file",
            n1(r#"endpoint: "https://10.0.0.21", password: hunter2"#),
            format!("{s0}.password"),
            "a password is never written in the configuration: give password_file (a file holding it, readable by fleet serve) or password_env (the name of an environment variable of fleet serve)",
        ),
        (
            "an unknown type",
            rack("type: amt, username: admin, password_file: /p"),
            format!("{g0}.type"),
            "invalid driver type \"amt\": the type is wol (Wake-on-LAN), redfish or ipmi",
        ),
        (
            "no type here or in the group",
            DRIVERS.replace(
                "{ name: old-2, group: old }",
                "{ name: old-2, group: old, driver: { host: 10.0.0.32 } }",
            ),
            "slots[4] (old-2).driver.type".into(),
            "the driver has no type: give type: wol (Wake-on-LAN), redfish or ipmi (here or in the group's driver)",
        ),
        (
            "a field of another type",
            n1(r#"endpoint: "https://10.0.0.21", mac: "52:54:00:12:34:56""#),
            format!("{s0}.mac"),
            "mac does not apply to a redfish driver: it takes endpoint, system, username, password_file, password_env, ca_file, tls_fingerprint, insecure, off",
        ),
        (
            "an off that is neither agent nor driver",
            n1(r#"endpoint: "https://10.0.0.21", off: bmc"#),
            format!("{s0}.off"),
            "invalid off \"bmc\": agent (the bench's own fleet agent powers the machine off) or driver (the driver's own power-off, the default)",
        ),
        (
            "Wake-on-LAN without the agent's off",
            mini(r#"mac: "52:54:00:12:34:56", off: driver"#),
            format!("{s2}.off"),
            "Wake-on-LAN has no power-off: add off: agent (the bench's own fleet agent powers the machine off, started with --power-off-command)",
        ),
        (
            "Wake-on-LAN without a MAC",
            mini(""),
            s2.into(),
            "a wol driver needs mac: the machine's MAC address, like 52:54:00:12:34:56 (here or in the group's driver)",
        ),
        (
            "a MAC that is not one",
            mini(r#"mac: "52:54:00:12:34""#),
            format!("{s2}.mac"),
            "invalid MAC address \"52:54:00:12:34\": six pairs of hex digits separated by ':' or '-', like 52:54:00:12:34:56",
        ),
        (
            "a broadcast that is no address",
            mini(r#"mac: "52:54:00:12:34:56", broadcast: lan.example"#),
            format!("{s2}.broadcast"),
            "invalid broadcast \"lan.example\": an IP address with an optional port, like 192.168.1.255:9 (the subnet's broadcast address, or the machine's own)",
        ),
        (
            "a broadcast to port 0",
            mini(r#"mac: "52:54:00:12:34:56", broadcast: "10.0.0.255:0""#),
            format!("{s2}.broadcast"),
            "invalid broadcast \"10.0.0.255:0\": port 0 reaches nothing; use 9 or 7",
        ),
        (
            "Redfish without an endpoint",
            n1("system: /redfish/v1/Systems/1"),
            s0.into(),
            "a redfish driver needs endpoint: the BMC's URL, like https://10.0.0.21 (here or in the group's driver)",
        ),
        (
            "an endpoint that is no URL",
            n1("endpoint: 10.0.0.21"),
            format!("{s0}.endpoint"),
            "invalid endpoint \"10.0.0.21\": it is not an https:// (or http://) URL; the BMC's URL is https://host[:port], like https://10.0.0.21 (http:// only with insecure: true, for a test BMC)",
        ),
        (
            "an endpoint with a path",
            n1(r#"endpoint: "https://10.0.0.21/redfish/v1""#),
            format!("{s0}.endpoint"),
            "it has a path or a query (the system's path goes in system)",
        ),
        (
            "an endpoint with credentials, never shown",
            n1(r#"endpoint: "https://admin:hunter2@10.0.0.21""#),
            format!("{s0}.endpoint"),
            "invalid endpoint: it holds credentials (give them as username and password_file)",
        ),
        (
            "plain http without insecure",
            n1(r#"endpoint: "http://10.0.0.21""#),
            format!("{s0}.endpoint"),
            "endpoint http://10.0.0.21 is plain http, which shows the BMC's password to the network: use https://, or set insecure: true for a test BMC on a trusted link",
        ),
        (
            "a system outside /redfish/v1/",
            n1(r#"endpoint: "https://10.0.0.21", system: /Systems/1"#),
            format!("{s0}.system"),
            "invalid system \"/Systems/1\": the ComputerSystem's path under /redfish/v1/, like /redfish/v1/Systems/1; leave it out for the BMC's only system",
        ),
        (
            "a CA file and insecure both",
            n1(r#"endpoint: "https://10.0.0.21", insecure: true, ca_file: /ca.pem"#),
            s0.into(),
            "both ca_file and insecure: true: insecure accepts any certificate, so the CA file is never used; keep ca_file (verified TLS; a self-signed BMC's own certificate may go there) or insecure",
        ),
        (
            "an empty CA file path",
            n1(r#"endpoint: "https://10.0.0.21", ca_file: " ""#),
            format!("{s0}.ca_file"),
            "the path is empty or holds a NUL: give the path of the CA certificate (PEM), like /etc/fleet/…",
        ),
        (
            "no username here or in the group",
            rack("type: redfish, password_file: /p"),
            s0.into(),
            "a redfish driver needs username: the BMC user fleet logs in as (here or in the group's driver)",
        ),
        (
            "an empty username",
            n1(r#"endpoint: "https://10.0.0.21", username: " ""#),
            format!("{s0}.username"),
            "the username is empty or has a control character: give the BMC user fleet logs in as, like admin",
        ),
        (
            "a Redfish username basic auth cannot carry",
            n1(r#"endpoint: "https://10.0.0.21", username: "ad:min""#),
            format!("{s0}.username"),
            "invalid username \"ad:min\": a Redfish username holds no ':' (basic auth could not carry it)",
        ),
        (
            "an IPMI username past 16 bytes",
            dedit(
                IPMI,
                "{ type: ipmi, host: 10.0.0.31, username: administrator-0001, password_env: IPMI_PASS }",
            ),
            format!("{s3}.username"),
            "invalid username \"administrator-0001\": an IPMI username is at most 16 bytes",
        ),
        (
            "no password source here or in the group",
            rack("type: redfish, username: admin"),
            s0.into(),
            "a redfish driver needs password_file or password_env: where the BMC's password is (a file, or an environment variable of fleet serve); never the password itself (here or in the group's driver)",
        ),
        (
            "a password file and a variable both",
            n1(r#"endpoint: "https://10.0.0.21", password_file: /p, password_env: P"#),
            s0.into(),
            "both password_file and password_env: the password comes from one of them; keep one",
        ),
        (
            "a password variable fleet keeps for itself",
            n1(r#"endpoint: "https://10.0.0.21", password_env: FLEET_BMC"#),
            format!("{s0}.password_env"),
            "environment variable name \"FLEET_BMC\" is reserved",
        ),
        (
            "a password variable that is no name",
            n1(r#"endpoint: "https://10.0.0.21", password_env: "BMC-PASS""#),
            format!("{s0}.password_env"),
            "invalid environment variable name \"BMC-PASS\"",
        ),
        (
            "an empty password file path",
            n1(r#"endpoint: "https://10.0.0.21", password_file: """#),
            format!("{s0}.password_file"),
            "the path is empty or holds a NUL: give the path of the file holding the password, like /etc/fleet/…",
        ),
        (
            "IPMI without a host",
            dedit(IPMI, "{ type: ipmi, username: admin, password_env: IPMI_PASS }"),
            s3.into(),
            "an ipmi driver needs host: the BMC's address, like 10.0.0.31 (here or in the group's driver)",
        ),
        (
            "a host ipmitool would read as an option",
            dedit(IPMI, "{ type: ipmi, host: -f/etc/shadow, username: admin, password_env: IPMI_PASS }"),
            format!("{s3}.host"),
            "invalid host \"-f/etc/shadow\": the BMC's host name or IP address (letters, digits, '.', '-', ':', starting with a letter or digit), like 10.0.0.31",
        ),
        (
            "port 0",
            ipmi("port: 0"),
            format!("{s3}.port"),
            "invalid port 0: a port from 1 to 65535 (IPMI's is 623)",
        ),
        (
            "a port past 65535",
            ipmi("port: 70000"),
            format!("{s3}.port"),
            "invalid port 70000: a port from 1 to 65535 (IPMI's is 623)",
        ),
        (
            "a port that is no number",
            ipmi("port: ipmi"),
            format!("{s3}.port"),
            "invalid number \"ipmi\": a whole number from 0 to 4294967295",
        ),
        (
            "a cipher suite fleet does not send",
            ipmi("cipher_suite: 0"),
            format!("{s3}.cipher_suite"),
            "invalid cipher_suite 0: leave it out for 17 (HMAC-SHA256, AES-128), or give 3 (HMAC-SHA1, AES-128) for an older BMC; suites without authentication or encryption are never sent",
        ),
        (
            "a slot with neither a driver nor its group's operations",
            dedit(
                "    max_size: 1\n    driver: { type: wol",
                "    max_size: 1\n    startup: { command: [on] }\n    driver: { type: wol",
            )
            .replace("{ name: mini-1, group: minis, driver: { mac: \"52:54:00:12:34:56\" } }", "{ name: mini-1, group: rack }\n  - { name: mini-2, group: old }")
            .replace("    driver: { type: redfish, username: admin, password_file: /etc/fleet/bmc-password, ca_file: /etc/fleet/bmc-ca.pem }\n", "")
            .replace(r#", driver: { endpoint: "https://10.0.0.21", system: /redfish/v1/Systems/1 }"#, "")
            .replace(r#", driver: { endpoint: "https://10.0.0.22", username: root, password_env: BMC_N2 }"#, ""),
            "slots[0] (n1).driver".into(),
            "the slot has no driver and its group rack has no startup and shutdown: give the slot a driver (type: wol, redfish or ipmi), or the group startup and shutdown (a command or a job)",
        ),
        (
            "a driver group's job_timeout reaching the stuck threshold",
            dedit(
                "    max_size: 2\n    driver: { type: redfish",
                "    max_size: 2\n    timings: { stuck_threshold: 5m }\n    driver: { type: redfish",
            ),
            "groups[0] (rack).timings.job_timeout".into(),
            "plus the 30s the wrapper has to report it reaches timings.stuck_threshold (5m)",
        ),
    ];
    for (case, text, place, want) in &rows {
        let problems = problems(text);
        assert!(
            problems
                .iter()
                .any(|p| &p.place == place && p.message.contains(want)),
            "{case}: want {place}: ...{want}...; got {problems:#?}\n---\n{text}"
        );
        let shown = parse(text).unwrap_err().to_string();
        assert!(
            shown.contains(&format!("{PATH}: {place}: ")),
            "{case}: the message names the file and the place: {shown}"
        );
        assert!(
            !shown.contains("hunter2"),
            "{case}: a password shown: {shown}"
        );
    }
}

#[test]
fn a_groups_bad_default_is_said_once_however_many_slots_take_it() {
    let text = dedit(
        "username: admin, password_file",
        r#"username: "ad:min", password_file"#,
    );
    let found = problems(&text);
    assert_eq!(
        found
            .iter()
            .map(|p| (p.place.as_str(), p.message.as_str()))
            .collect::<Vec<_>>(),
        [(
            "groups[0] (rack).driver.username",
            "invalid username \"ad:min\": a Redfish username holds no ':' (basic auth could not carry it)"
        )]
    );
    // A group's own value is checked even when no slot takes it.
    let lonely = ok(DRIVERS).slots.len();
    assert_eq!(lonely, 5);
    let unused = problems(&DRIVERS.replace(
        "    driver: { type: wol, broadcast: \"192.168.1.255:9\", off: agent }",
        "    driver: { type: wol, broadcast: \"192.168.1.255:9\", off: agent }\n  - name: spare\n    max_size: 0\n    driver: { type: wol, mac: nope }",
    ));
    assert_eq!(
        unused.iter().map(|p| p.place.as_str()).collect::<Vec<_>>(),
        ["groups[2] (spare).driver.mac"]
    );
}

#[test]
fn a_driver_refuses_unknown_keys_naming_the_key() {
    let message = parse_error(&dedit("username: root,", "usernme: root,"));
    assert!(message.contains("unknown field `usernme`"), "{message}");
}

/// The energy ledger's draw (SPEC §4.12): a slot takes its group's `template.power`, standby 0
/// unless set, and each of its own `power` fields overrides the group's.
#[test]
fn a_slots_power_is_its_groups_with_its_own_fields_over_it() {
    let text = BASE
        .replacen(
            "{ name: bench-01, group: pool-a }",
            "{ name: bench-01, group: pool-a, power: { standby_watts: 4.5 } }",
            1,
        )
        .replacen(
            "{ name: bench-02, group: pool-a }",
            "{ name: bench-02, group: pool-a, power: { watts: 120, price_per_kwh: 0.5 } }",
            1,
        );
    let text = text.replacen(
        "    startup:",
        "    template: { capacity: { cpu: \"4\", memory: 8Gi }, power: { watts: 300, price_per_kwh: 0.2 } }\n    startup:",
        1,
    );
    let config = ok(&text);
    let draw = |name: &str| config.slots.get(&bench(name)).unwrap().power.unwrap();
    let b1 = draw("bench-01");
    assert_eq!(
        (b1.watts, b1.standby_watts, b1.price_per_kwh),
        (300.0, 4.5, 0.2)
    );
    let b2 = draw("bench-02");
    assert_eq!(
        (b2.watts, b2.standby_watts, b2.price_per_kwh),
        (120.0, 0.0, 0.5)
    );
    let group_draw = config
        .group(&group("pool-a"))
        .unwrap()
        .template
        .as_ref()
        .unwrap()
        .power;
    assert_eq!(group_draw.map(|p| p.standby_watts), Some(0.0));
    // Without a group draw, a slot declares its own in full, or has none.
    let alone = ok(&BASE.replacen(
        "{ name: bench-01, group: pool-a }",
        "{ name: bench-01, group: pool-a, power: { watts: 60, standby_watts: 2, price_per_kwh: 0.4 } }",
        1,
    ));
    let b1 = alone.slots.get(&bench("bench-01")).unwrap().power.unwrap();
    assert_eq!(
        (b1.watts, b1.standby_watts, b1.price_per_kwh),
        (60.0, 2.0, 0.4)
    );
    assert_eq!(alone.slots.get(&bench("bench-02")).unwrap().power, None);
}

/// A fleet of 100 000 slots parses: the YAML budget admits it, and every slot lands.
#[test]
fn a_configuration_of_a_hundred_thousand_slots_parses() {
    let mut text = String::from(
        "groups:\n  - name: pool-a\n    max_size: 100000\n    startup: { command: [\"true\"] }\n    shutdown: { command: [\"true\"] }\nslots:\n",
    );
    for i in 0..100_000 {
        text.push_str(&format!("  - {{ name: b{i:06}, group: pool-a }}\n"));
    }
    let config = ok(&text);
    assert_eq!(config.slots.len(), 100_000);
    assert!(config.slots.contains_key(&bench("b099999")));
}

// SPEC §6.3: a template's DRA devices read into their model, each attribute with its type.
#[test]
fn a_templates_devices_read_with_their_types() {
    const SIZES: &str = "    min_size: 0\n    max_size: 2\n";
    let text = edit(
        SIZES,
        &format!(
            "{SIZES}    template: {{ capacity: {{ cpu: \"16\", memory: 64Gi }}, devices: [{{ driver: gpu.example.com, name: gpu, count: 2, attributes: {{ model: a100, cores: 6912, mig: false, \"gpu.example.com/fw\": {{ version: 1.2.3 }} }}, capacity: {{ memory: 80Gi }} }}] }}\n"
        ),
    );
    let config = parse(&text).unwrap();
    let template = config
        .groups
        .values()
        .next()
        .unwrap()
        .template
        .clone()
        .unwrap();
    let [d] = template.devices.as_slice() else {
        panic!("{:?}", template.devices)
    };
    assert_eq!(
        (d.driver.as_str(), d.name.as_str(), d.count),
        ("gpu.example.com", "gpu", 2)
    );
    use fleet::config::DeviceAttribute as A;
    assert_eq!(
        d.attributes.clone().into_iter().collect::<Vec<_>>(),
        [
            ("cores".to_owned(), A::Int(6912)),
            ("gpu.example.com/fw".to_owned(), A::Version("1.2.3".into())),
            ("mig".to_owned(), A::Bool(false)),
            ("model".to_owned(), A::String("a100".into())),
        ]
    );
    assert_eq!(d.capacity["memory"].as_str(), "80Gi");
}
