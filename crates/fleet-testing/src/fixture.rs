//! Configuration files (fleet.yaml) for the tests and benchmarks, built rather than written by
//! hand, so a change to the file's format is made here once.
//!
//! ```
//! use fleet_testing::Fixture;
//! use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
//! let (bin, url) = ("/usr/bin/fleet", "redis://127.0.0.1:6379");
//! let text = Fixture::new()
//!     .group(
//!         Group::new("pool-a")
//!             .min(0)
//!             .ungated()
//!             .env("BIN", bin)
//!             .env("REDIS", url)
//!             .startup(Op::sh(BOOTS).timeout("10s"))
//!             .shutdown(Op::sh(POWERS_OFF).timeout("10s"))
//!             .timing("job_monitor_poll_interval", "100ms"),
//!     )
//!     .slots("pool-a", ["bench-01", "bench-02"])
//!     .yaml();
//! assert!(text.contains("pool-a"));
//! ```
//!
//! Every string is written double-quoted (`quote`), so a script's quotes, backslashes and line
//! breaks reach fleet as they were given; only durations and counts are bare (`timeout: 10s`), as
//! a hand-written file has them and as some tests look for them in the text. What has no method
//! here goes in as YAML text: `raw` on a group or a slot, `timings` and `Map::raw` in a flow
//! mapping.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The startup script of a machine that boots at once: its bench beats for an hour, through the
/// fleet binary in `$BIN` and the server in `$REDIS` (give both with `Group::env`).
pub const BOOTS: &str = r#""$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 1h"#;

/// The shutdown script that goes with `BOOTS`: the bench reads DOWN at once.
pub const POWERS_OFF: &str = r#""$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 0"#;

/// A whole configuration file: the fleet's budget, its groups and its slots, in order.
#[derive(Clone, Debug, Default)]
pub struct Fixture {
    power_on: Option<PowerOn>,
    groups: Vec<Group>,
    slots: Vec<Slot>,
}

impl Fixture {
    pub fn new() -> Self {
        Self::default()
    }

    /// The whole fleet's power-on budget (the top-level `power_on`).
    pub fn power_on(mut self, budget: PowerOn) -> Self {
        self.power_on = Some(budget);
        self
    }

    pub fn group(mut self, group: Group) -> Self {
        self.groups.push(group);
        self
    }

    pub fn slot(mut self, slot: Slot) -> Self {
        self.slots.push(slot);
        self
    }

    /// A plain slot of `group` for each name, in order.
    pub fn slots<I>(mut self, group: &str, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.slots
            .extend(names.into_iter().map(|n| Slot::new(n.as_ref(), group)));
        self
    }

    /// The file's text.
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        if let Some(budget) = &self.power_on {
            let _ = writeln!(out, "power_on: {}", budget.flow());
        }
        if !self.groups.is_empty() {
            out.push_str("groups:\n");
        }
        for group in &self.groups {
            let slots = || self.slots.iter().filter(|s| s.group == group.name).count();
            group.render(&mut out, slots);
        }
        if !self.slots.is_empty() {
            out.push_str("slots:\n");
        }
        for slot in &self.slots {
            slot.render(&mut out);
        }
        out
    }

    /// Writes the file as `dir/fleet.yaml`; its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("fleet.yaml");
        std::fs::write(&path, self.yaml())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// The configuration fleet reads from the file; a refusal is a mistake in the test, so it
    /// panics with the text.
    pub fn config(&self) -> fleet::config::Config {
        let text = self.yaml();
        fleet::config::parse(&text, Path::new("fleet.yaml"))
            .unwrap_or_else(|e| panic!("the fixture is not a valid configuration: {e}\n{text}"))
    }
}

/// A group: its sizes, operations, timings and the rest, written in the file's own order.
#[derive(Clone, Debug)]
pub struct Group {
    name: String,
    min: Option<u32>,
    max: Option<u32>,
    provision_time: Option<String>,
    power_on: Option<PowerOn>,
    readiness_taints: Option<Vec<String>>,
    node_taints: Option<Vec<String>>,
    driver: Option<Driver>,
    env: Vec<(String, String)>,
    startup: Option<Op>,
    shutdown: Option<Op>,
    timings: Vec<String>,
    template: Option<Template>,
    autoscaling: Option<String>,
    autoscaling_options: Map,
    raw: Vec<String>,
}

impl Group {
    /// A group with no operation and `max_size` unset: the file then says as many as the
    /// fixture gives it slots.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            min: None,
            max: None,
            provision_time: None,
            power_on: None,
            readiness_taints: None,
            node_taints: None,
            driver: None,
            env: Vec::new(),
            startup: None,
            shutdown: None,
            timings: Vec::new(),
            template: None,
            autoscaling: None,
            autoscaling_options: Map::new(),
            raw: Vec::new(),
        }
    }

    /// `min_size`; unset, the file leaves it out (fleet reads 0).
    pub fn min(mut self, n: u32) -> Self {
        self.min = Some(n);
        self
    }

    pub fn max(mut self, n: u32) -> Self {
        self.max = Some(n);
        self
    }

    /// `max_node_provision_time`, a duration like `40m`.
    pub fn provision_time(mut self, duration: &str) -> Self {
        self.provision_time = Some(duration.to_owned());
        self
    }

    pub fn power_on(mut self, budget: PowerOn) -> Self {
        self.power_on = Some(budget);
        self
    }

    /// `readiness_taints: []`: a slot is usable as soon as its bench beats, with no taint to
    /// wait for on its node.
    pub fn ungated(self) -> Self {
        self.readiness_taints::<&str>([])
    }

    /// `readiness_taints`; none given is `[]`, which differs from leaving it out (fleet then
    /// waits for Cilium's taint).
    pub fn readiness_taints<S: AsRef<str>>(mut self, taints: impl IntoIterator<Item = S>) -> Self {
        self.readiness_taints = Some(strings(taints));
        self
    }

    pub fn node_taints<S: AsRef<str>>(mut self, taints: impl IntoIterator<Item = S>) -> Self {
        self.node_taints = Some(strings(taints));
        self
    }

    /// The defaults of the group's slots' power drivers.
    pub fn driver(mut self, driver: Driver) -> Self {
        self.driver = Some(driver);
        self
    }

    /// A variable both operations get, before their own `Op::env`.
    pub fn env(mut self, name: &str, value: impl AsRef<str>) -> Self {
        self.env.push((name.to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn startup(mut self, op: Op) -> Self {
        self.startup = Some(op);
        self
    }

    pub fn shutdown(mut self, op: Op) -> Self {
        self.shutdown = Some(op);
        self
    }

    /// One of `timings`, a duration like `("job_monitor_poll_interval", "100ms")` or a count
    /// like `("max_attempts", 2)`, written bare as a hand-written file has it.
    pub fn timing(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        self.timings
            .push(format!("{name}: {}", bare(&value.to_string())));
        self
    }

    /// Timings as the inside of the flow mapping (`"machine_gone_grace: 1h, max_attempts: 2"`),
    /// for a test that takes its timings as text; nothing when blank.
    pub fn timings(mut self, fragment: &str) -> Self {
        let fragment = fragment.trim().trim_matches(',').trim();
        if !fragment.is_empty() {
            self.timings.push(fragment.to_owned());
        }
        self
    }

    pub fn template(mut self, template: Template) -> Self {
        self.template = Some(template);
        self
    }

    /// `autoscaling_options: true` or `false`.
    pub fn autoscaling(mut self, on: bool) -> Self {
        self.autoscaling = Some(on.to_string());
        self
    }

    /// One override of `autoscaling_options`, like `("scale_down_unneeded_time", "3m")`.
    pub fn autoscaling_option(mut self, name: &str, value: impl Scalar) -> Self {
        self.autoscaling_options = self.autoscaling_options.set(name, value);
        self
    }

    /// Lines written as they are under the group's other keys (indented here): a field with no
    /// method, or one a test means to get wrong.
    pub fn raw(mut self, text: &str) -> Self {
        self.raw.extend(text.lines().map(str::to_owned));
        self
    }

    fn render(&self, out: &mut String, slots: impl FnOnce() -> usize) {
        let _ = writeln!(out, "  - name: {}", quote(&self.name));
        if let Some(min) = self.min {
            let _ = writeln!(out, "    min_size: {min}");
        }
        let max = self.max.map_or_else(slots, |m| m as usize);
        let _ = writeln!(out, "    max_size: {max}");
        if let Some(time) = &self.provision_time {
            let _ = writeln!(out, "    max_node_provision_time: {}", bare(time));
        }
        if let Some(budget) = &self.power_on {
            let _ = writeln!(out, "    power_on: {}", budget.flow());
        }
        if let Some(taints) = &self.readiness_taints {
            let _ = writeln!(out, "    readiness_taints: {}", list(taints));
        }
        if let Some(taints) = &self.node_taints {
            let _ = writeln!(out, "    node_taints: {}", list(taints));
        }
        if let Some(driver) = &self.driver {
            let _ = writeln!(out, "    driver: {}", driver.0.flow());
        }
        for (key, op) in [("startup", &self.startup), ("shutdown", &self.shutdown)] {
            if let Some(op) = op {
                let _ = writeln!(out, "    {key}: {}", op.flow(&self.env));
            }
        }
        if !self.timings.is_empty() {
            let _ = writeln!(out, "    timings: {{ {} }}", self.timings.join(", "));
        }
        if let Some(template) = &self.template {
            let _ = writeln!(out, "    template: {}", template.flow());
        }
        if let Some(on) = &self.autoscaling {
            let _ = writeln!(out, "    autoscaling_options: {on}");
        } else if !self.autoscaling_options.is_empty() {
            let _ = writeln!(
                out,
                "    autoscaling_options: {}",
                self.autoscaling_options.flow()
            );
        }
        for line in &self.raw {
            let _ = writeln!(out, "    {line}");
        }
    }
}

/// A startup or shutdown: a command fleet runs or a Kubernetes Job, with its environment, working
/// directory and timeout.
#[derive(Clone, Debug)]
pub struct Op {
    run: String,
    env: Vec<(String, String)>,
    dir: Option<String>,
    timeout: Option<String>,
}

impl Op {
    /// A program and its arguments.
    pub fn command<S: AsRef<str>>(argv: impl IntoIterator<Item = S>) -> Self {
        Self::of(format!("command: {}", list(&strings(argv))))
    }

    /// `sh -c script`.
    pub fn sh(script: &str) -> Self {
        Self::command(["sh", "-c", script])
    }

    /// A Kubernetes Job.
    pub fn job(job: JobPod) -> Self {
        Self::of(format!("job: {}", job.flow()))
    }

    fn of(run: String) -> Self {
        Self {
            run,
            env: Vec::new(),
            dir: None,
            timeout: None,
        }
    }

    /// A duration like `10s`.
    pub fn timeout(mut self, duration: &str) -> Self {
        self.timeout = Some(duration.to_owned());
        self
    }

    pub fn dir(mut self, dir: &str) -> Self {
        self.dir = Some(dir.to_owned());
        self
    }

    pub fn env(mut self, name: &str, value: impl AsRef<str>) -> Self {
        self.env.push((name.to_owned(), value.as_ref().to_owned()));
        self
    }

    /// The flow mapping, the group's variables first.
    fn flow(&self, group_env: &[(String, String)]) -> String {
        let mut fields = vec![self.run.clone()];
        if let Some(timeout) = &self.timeout {
            fields.push(format!("timeout: {}", bare(timeout)));
        }
        if let Some(dir) = &self.dir {
            fields.push(format!("dir: {}", quote(dir)));
        }
        let env: Vec<String> = (group_env.iter().chain(&self.env))
            .map(|(k, v)| format!("{}: {}", key(k), quote(v)))
            .collect();
        if !env.is_empty() {
            fields.push(format!("env: {{ {} }}", env.join(", ")));
        }
        format!("{{ {} }}", fields.join(", "))
    }
}

/// The pod of a Job operation.
#[derive(Clone, Debug)]
pub struct JobPod(Map);

impl JobPod {
    pub fn new(image: &str) -> Self {
        Self(Map::new().set("image", image))
    }

    pub fn command<S: AsRef<str>>(self, argv: impl IntoIterator<Item = S>) -> Self {
        Self(self.0.raw(&format!("command: {}", list(&strings(argv)))))
    }

    pub fn args<S: AsRef<str>>(self, args: impl IntoIterator<Item = S>) -> Self {
        Self(self.0.raw(&format!("args: {}", list(&strings(args)))))
    }

    pub fn service_account(self, name: &str) -> Self {
        Self(self.0.set("service_account_name", name))
    }

    /// The whole `node_selector`, label to value.
    pub fn node_selector(self, labels: Map) -> Self {
        Self(self.0.raw(&format!("node_selector: {}", labels.flow())))
    }

    /// The whole `tolerations` list, each a mapping (`key`, `operator`, `value`, `effect`,
    /// `toleration_seconds`).
    pub fn tolerations(self, tolerations: impl IntoIterator<Item = Map>) -> Self {
        let items: Vec<String> = tolerations.into_iter().map(|t| t.flow()).collect();
        Self(self.0.raw(&format!("tolerations: [{}]", items.join(", "))))
    }

    fn flow(&self) -> String {
        self.0.flow()
    }
}

/// A power driver: a group's defaults (with its type) or a slot's overrides.
#[derive(Clone, Debug)]
pub struct Driver(Map);

impl Driver {
    /// A driver of `kind` (`wol`, `redfish`, `ipmi`).
    pub fn new(kind: &str) -> Self {
        Self(Map::new().set("type", kind))
    }

    pub fn wol() -> Self {
        Self::new("wol")
    }

    pub fn redfish(endpoint: &str) -> Self {
        Self::new("redfish").endpoint(endpoint)
    }

    pub fn ipmi(host: &str) -> Self {
        Self::new("ipmi").set("host", host)
    }

    /// A slot's fields over its group's driver, with no type of its own.
    pub fn overrides() -> Self {
        Self(Map::new())
    }

    /// Any field, for those with no method.
    pub fn set(self, name: &str, value: impl Scalar) -> Self {
        Self(self.0.set(name, value))
    }

    pub fn mac(self, mac: &str) -> Self {
        self.set("mac", mac)
    }

    pub fn broadcast(self, address: impl std::fmt::Display) -> Self {
        self.set("broadcast", address.to_string())
    }

    pub fn endpoint(self, url: &str) -> Self {
        self.set("endpoint", url)
    }

    pub fn username(self, name: &str) -> Self {
        self.set("username", name)
    }

    pub fn password_file(self, path: &Path) -> Self {
        self.set("password_file", path)
    }

    pub fn password_env(self, name: &str) -> Self {
        self.set("password_env", name)
    }

    pub fn insecure(self, insecure: bool) -> Self {
        self.set("insecure", insecure)
    }

    pub fn tls_fingerprint(self, fingerprint: &str) -> Self {
        self.set("tls_fingerprint", fingerprint)
    }

    /// How the machine is powered off (`agent`, or the BMC's own).
    pub fn off(self, by: &str) -> Self {
        self.set("off", by)
    }
}

/// What a group's node looks like before one exists.
#[derive(Clone, Debug, Default)]
pub struct Template {
    labels: Map,
    taints: Vec<String>,
    capacity: Map,
    gpu: Option<(String, Vec<String>)>,
    power: Option<Power>,
}

impl Template {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn label(mut self, name: &str, value: &str) -> Self {
        self.labels = self.labels.set(name, value);
        self
    }

    /// A taint like `fleet.dev/gpu=true:NoSchedule`.
    pub fn taint(mut self, taint: &str) -> Self {
        self.taints.push(taint.to_owned());
        self
    }

    /// A resource and its quantity, like `("memory", "32Gi")`.
    pub fn capacity(mut self, resource: &str, quantity: &str) -> Self {
        self.capacity = self.capacity.set(resource, quantity);
        self
    }

    /// The node label that names the GPU type, and the types.
    pub fn gpu<S: AsRef<str>>(mut self, label: &str, types: impl IntoIterator<Item = S>) -> Self {
        self.gpu = Some((label.to_owned(), strings(types)));
        self
    }

    pub fn power(mut self, power: Power) -> Self {
        self.power = Some(power);
        self
    }

    fn flow(&self) -> String {
        let mut map = Map::new();
        if !self.labels.is_empty() {
            map = map.raw(&format!("labels: {}", self.labels.flow()));
        }
        if !self.taints.is_empty() {
            map = map.raw(&format!("taints: {}", list(&self.taints)));
        }
        if !self.capacity.is_empty() {
            map = map.raw(&format!("capacity: {}", self.capacity.flow()));
        }
        if let Some((label, types)) = &self.gpu {
            let gpu = format!("gpu: {{ label: {}, types: {} }}", quote(label), list(types));
            map = map.raw(&gpu);
        }
        if let Some(power) = &self.power {
            map = map.raw(&format!("power: {}", power.flow()));
        }
        map.flow()
    }
}

/// What a machine draws and what its energy costs: a group's `template.power`, or a slot's
/// `power` over it.
#[derive(Clone, Debug, Default)]
pub struct Power {
    watts: Option<f64>,
    standby_watts: Option<f64>,
    price_per_kwh: Option<f64>,
}

impl Power {
    /// A draw on and its price, as a template needs.
    pub fn new(watts: f64, price_per_kwh: f64) -> Self {
        Self::default().watts(watts).price_per_kwh(price_per_kwh)
    }

    /// A slot's fields over its group's, none yet.
    pub fn overrides() -> Self {
        Self::default()
    }

    pub fn watts(mut self, watts: f64) -> Self {
        self.watts = Some(watts);
        self
    }

    /// The draw when off.
    pub fn standby(mut self, watts: f64) -> Self {
        self.standby_watts = Some(watts);
        self
    }

    pub fn price_per_kwh(mut self, price: f64) -> Self {
        self.price_per_kwh = Some(price);
        self
    }

    fn flow(&self) -> String {
        let mut map = Map::new();
        for (name, value) in [
            ("watts", self.watts),
            ("standby_watts", self.standby_watts),
            ("price_per_kwh", self.price_per_kwh),
        ] {
            if let Some(value) = value {
                map = map.set(name, value);
            }
        }
        map.flow()
    }
}

/// A power-on budget, the fleet's or a group's.
#[derive(Clone, Debug, Default)]
pub struct PowerOn {
    max_concurrent: Option<u32>,
    per_minute: Option<u32>,
}

impl PowerOn {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn max_concurrent(mut self, n: u32) -> Self {
        self.max_concurrent = Some(n);
        self
    }

    pub fn per_minute(mut self, n: u32) -> Self {
        self.per_minute = Some(n);
        self
    }

    fn flow(&self) -> String {
        let mut map = Map::new();
        if let Some(n) = self.max_concurrent {
            map = map.set("max_concurrent", n);
        }
        if let Some(n) = self.per_minute {
            map = map.set("per_minute", n);
        }
        map.flow()
    }
}

/// One slot: its name and group, and what it says of its own.
#[derive(Clone, Debug)]
pub struct Slot {
    name: String,
    group: String,
    fields: Map,
    raw: Vec<String>,
}

impl Slot {
    pub fn new(name: &str, group: &str) -> Self {
        Self {
            name: name.to_owned(),
            group: group.to_owned(),
            fields: Map::new(),
            raw: Vec::new(),
        }
    }

    pub fn provider_id(mut self, id: &str) -> Self {
        self.fields = self.fields.set("provider_id", id);
        self
    }

    pub fn kubernetes_node(mut self, node: &str) -> Self {
        self.fields = self.fields.set("kubernetes_node", node);
        self
    }

    /// The slot's driver fields, over its group's.
    pub fn driver(mut self, driver: Driver) -> Self {
        self.fields = self.fields.raw(&format!("driver: {}", driver.0.flow()));
        self
    }

    pub fn power(mut self, power: Power) -> Self {
        self.fields = self.fields.raw(&format!("power: {}", power.flow()));
        self
    }

    /// Lines written as they are under the slot's other keys (indented here).
    pub fn raw(mut self, text: &str) -> Self {
        self.raw.extend(text.lines().map(str::to_owned));
        self
    }

    /// A slot is one line, unless raw lines need the block form to sit under it.
    fn render(&self, out: &mut String) {
        let head = Map::new()
            .set("name", self.name.as_str())
            .set("group", self.group.as_str());
        let fields = head.0.iter().chain(&self.fields.0);
        if self.raw.is_empty() {
            let fields: Vec<&str> = fields.map(String::as_str).collect();
            let _ = writeln!(out, "  - {{ {} }}", fields.join(", "));
            return;
        }
        for (i, field) in fields.enumerate() {
            let _ = writeln!(out, "{}{field}", if i == 0 { "  - " } else { "    " });
        }
        for line in &self.raw {
            let _ = writeln!(out, "    {line}");
        }
    }
}

/// A flow mapping (`{ a: 1, b: "x" }`), in the order its fields are set: a label set, a
/// toleration, or the fields of a type with no method.
#[derive(Clone, Debug, Default)]
pub struct Map(Vec<String>);

impl Map {
    pub fn new() -> Self {
        Self::default()
    }

    /// A field; the name is quoted when it is not a plain word (a label's has dots and slashes).
    pub fn set(mut self, name: &str, value: impl Scalar) -> Self {
        self.0.push(format!("{}: {}", key(name), value.yaml()));
        self
    }

    /// A field written as it is, like `port: 623` or `ports: [1, 2]`.
    pub fn raw(mut self, field: &str) -> Self {
        self.0.push(field.to_owned());
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn flow(&self) -> String {
        if self.0.is_empty() {
            "{}".to_owned()
        } else {
            format!("{{ {} }}", self.0.join(", "))
        }
    }
}

/// A value as YAML writes it: text double-quoted, numbers and booleans bare.
pub trait Scalar {
    fn yaml(&self) -> String;
}

impl Scalar for &str {
    fn yaml(&self) -> String {
        quote(self)
    }
}

impl Scalar for String {
    fn yaml(&self) -> String {
        quote(self)
    }
}

impl Scalar for &String {
    fn yaml(&self) -> String {
        quote(self)
    }
}

impl Scalar for &Path {
    fn yaml(&self) -> String {
        quote(&self.display().to_string())
    }
}

impl Scalar for &PathBuf {
    fn yaml(&self) -> String {
        quote(&self.display().to_string())
    }
}

impl Scalar for bool {
    fn yaml(&self) -> String {
        self.to_string()
    }
}

impl Scalar for i32 {
    fn yaml(&self) -> String {
        self.to_string()
    }
}

impl Scalar for u32 {
    fn yaml(&self) -> String {
        self.to_string()
    }
}

impl Scalar for u64 {
    fn yaml(&self) -> String {
        self.to_string()
    }
}

impl Scalar for usize {
    fn yaml(&self) -> String {
        self.to_string()
    }
}

impl Scalar for i64 {
    fn yaml(&self) -> String {
        self.to_string()
    }
}

impl Scalar for f64 {
    /// Rust writes 3500.0 as `3500` and 0.25 as `0.25`, both numbers to YAML.
    fn yaml(&self) -> String {
        assert!(
            self.is_finite(),
            "a fixture's number must be finite: {self}"
        );
        self.to_string()
    }
}

/// `text` as a YAML double-quoted string: a quote, a backslash and every character YAML may not
/// hold as it is (control characters, the Unicode line breaks, the byte-order mark) escaped. For
/// the text tests write this is what Rust's `{:?}` gives, but `{:?}` escapes some printable
/// characters in its own `\u{...}` form, which YAML reads otherwise.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A duration or a count, bare (`timeout: 10s`, as a hand-written file and a test's search of
/// the text have it) when it is a plain token, else quoted.
fn bare(token: &str) -> String {
    let plain = (token.chars().next()).is_some_and(|c| c.is_ascii_digit())
        && token.chars().all(|c| c.is_ascii_alphanumeric());
    if plain {
        token.to_owned()
    } else {
        quote(token)
    }
}

/// A mapping's key: bare when every YAML reader takes it for the same text (the file's own field
/// names, the usual variable names), else quoted; YAML 1.1 reads `off` or `yes` as a boolean.
fn key(name: &str) -> String {
    let plain = (name.chars().next()).is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            name,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if plain { name.to_owned() } else { quote(name) }
}

/// A flow sequence of quoted strings.
fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quote(i)).collect();
    format!("[{}]", items.join(", "))
}

fn strings<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Vec<String> {
    items.into_iter().map(|s| s.as_ref().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fleet::config::{DriverKind, Run};
    use fleet::domain::name::{BenchName, GroupName};

    use super::*;

    /// A script with everything that must survive the quoting.
    const AWKWARD: &str = "printf '%s\\n' \"a\\\"b\" 'c:d' '# e' '{f}' 'é' \r\n\t\u{7}\u{2028}";

    fn fixture() -> Fixture {
        Fixture::new()
            .power_on(PowerOn::new().per_minute(5))
            .group(
                Group::new("pool-a")
                    .min(1)
                    .max(2)
                    .provision_time("40m")
                    .power_on(PowerOn::new().max_concurrent(2))
                    .readiness_taints::<&str>([])
                    .env("BIN", "/usr/bin/fleet")
                    .env("REDIS", "redis+unix:///tmp/a b/redis.sock")
                    .startup(Op::sh(BOOTS).timeout("10s").env("LOG", "/tmp/log"))
                    .shutdown(Op::command([AWKWARD]).dir("/tmp"))
                    .timing("job_monitor_poll_interval", "100ms")
                    .timings("max_attempts: 2, ttl_after_finished: 1s")
                    .template(
                        Template::new()
                            .label("fleet.dev/pool", "a")
                            .taint("fleet.dev/gpu=true:NoSchedule")
                            .capacity("cpu", "64")
                            .capacity("memory", "512Gi")
                            .capacity("nvidia.com/gpu", "8")
                            .gpu("fleet.dev/gpu-type", ["nvidia-a100"])
                            .power(Power::new(3500.0, 0.25).standby(5.0)),
                    )
                    .autoscaling_option("scale_down_unneeded_time", "3m")
                    .autoscaling_option("scale_down_utilization_threshold", 0.5),
            )
            .group(
                Group::new("kube")
                    .max(1)
                    .readiness_taints(["node.cilium.io/agent-not-ready:NoExecute"])
                    .startup(Op::job(
                        JobPod::new("registry.example/power:1.4").args(["on"]),
                    ))
                    .shutdown(Op::job(
                        JobPod::new("registry.example/power:1.4")
                            .command(["/power"])
                            .service_account("power")
                            .node_selector(Map::new().set("kubernetes.io/os", "linux"))
                            .tolerations([Map::new().set("operator", "Exists")]),
                    ))
                    .timing("job_monitor_poll_interval", "100ms"),
            )
            .group(
                Group::new("rack")
                    .readiness_taints::<&str>([])
                    .driver(
                        Driver::redfish("https://10.0.0.9")
                            .username("admin")
                            .password_env("BMC_PASS")
                            .insecure(true),
                    )
                    .autoscaling(true)
                    .raw("node_taints: []"),
            )
            .slots("pool-a", ["bench-01"])
            .slot(Slot::new("bench-02", "pool-a").provider_id("ipmi://10.0.0.2"))
            .slot(Slot::new("kube-01", "kube").kubernetes_node("rack1.kube-01"))
            .slot(
                Slot::new("n1", "rack")
                    .driver(Driver::overrides().set("system", "/redfish/v1/Systems/2"))
                    .power(Power::overrides().watts(100.0).price_per_kwh(0.5)),
            )
            .slot(Slot::new("n2", "rack").raw("power:\n  watts: 200\n  price_per_kwh: 0.3"))
    }

    fn group(name: &str) -> GroupName {
        GroupName::parse(name).unwrap()
    }

    fn slot(name: &str) -> BenchName {
        BenchName::parse(name).unwrap()
    }

    #[test]
    fn a_fixture_is_a_configuration_fleet_reads_as_built() {
        let config = fixture().config();
        assert_eq!(config.power_on.per_minute, Some(5));

        let a = &config.groups[&group("pool-a")];
        assert_eq!((a.min_size, a.max_size), (1, 2));
        assert_eq!(
            a.max_node_provision_time,
            Some(Duration::from_secs(40 * 60))
        );
        assert_eq!(a.power_on.max_concurrent, Some(2));
        assert!(a.readiness_taints.is_empty());
        assert_eq!(a.startup.run, Run::Command(strings(["sh", "-c", BOOTS])));
        assert_eq!(a.startup.timeout, Duration::from_secs(10));
        let env: Vec<(&str, &str)> = (a.startup.env.iter())
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("BIN", "/usr/bin/fleet"),
                ("LOG", "/tmp/log"),
                ("REDIS", "redis+unix:///tmp/a b/redis.sock")
            ]
        );
        assert_eq!(a.shutdown.run, Run::Command(vec![AWKWARD.to_owned()]));
        assert_eq!(a.shutdown.dir, Some(PathBuf::from("/tmp")));
        assert_eq!(a.shutdown.env.len(), 2, "the group's variables only");
        assert_eq!(
            a.timings.job_monitor_poll_interval,
            Duration::from_millis(100)
        );
        assert_eq!(a.timings.max_attempts, 2);
        assert_eq!(a.timings.ttl_after_finished, Duration::from_secs(1));
        let template = a.template.as_ref().expect("a template");
        assert_eq!(template.labels["fleet.dev/pool"], "a");
        assert_eq!(template.taints.len(), 1);
        assert_eq!(template.capacity.len(), 3);
        assert_eq!(template.gpu.as_ref().unwrap().types, ["nvidia-a100"]);
        let draw = template.power.as_ref().expect("a draw");
        assert_eq!((draw.watts, draw.standby_watts), (3500.0, 5.0));
        let options = a.autoscaling_options.as_ref().expect("options");
        assert_eq!(
            options.scale_down_unneeded_time,
            Some(Duration::from_secs(180))
        );
        assert_eq!(options.scale_down_utilization_threshold, Some(0.5));

        let kube = &config.groups[&group("kube")];
        assert_eq!(kube.min_size, 0);
        assert_eq!(kube.readiness_taints.len(), 1);
        let Run::Job(job) = &kube.shutdown.run else {
            panic!("a Job: {:?}", kube.shutdown.run)
        };
        assert_eq!(job.command, ["/power"]);
        assert_eq!(job.service_account_name.as_deref(), Some("power"));
        assert_eq!(job.node_selector["kubernetes.io/os"], "linux");
        assert_eq!(job.tolerations[0].operator.as_deref(), Some("Exists"));

        let rack = &config.groups[&group("rack")];
        assert_eq!(rack.max_size, 2, "its slots, max_size unset");
        assert_eq!(rack.startup.run, Run::Driver);
        assert!(rack.node_taints.is_empty());
        assert!(rack.autoscaling_options.is_some());

        assert_eq!(config.slots.len(), 5);
        assert_eq!(
            config.slots[&slot("bench-01")].provider_id,
            "fleet://bench-01"
        );
        assert_eq!(
            config.slots[&slot("bench-02")].provider_id,
            "ipmi://10.0.0.2"
        );
        assert_eq!(
            config.slots[&slot("kube-01")].kubernetes_node.as_deref(),
            Some("rack1.kube-01")
        );
        let n1 = &config.slots[&slot("n1")];
        let Some(DriverKind::Redfish(redfish)) = n1.driver.as_ref().map(|d| &d.kind) else {
            panic!("a Redfish driver: {:?}", n1.driver)
        };
        assert_eq!(redfish.system.as_deref(), Some("/redfish/v1/Systems/2"));
        assert_eq!(n1.power.as_ref().unwrap().watts, 100.0);
        assert_eq!(
            config.slots[&slot("n2")].power.as_ref().unwrap().watts,
            200.0
        );
    }

    #[test]
    fn write_puts_the_text_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = fixture().write(dir.path());
        assert_eq!(path, dir.path().join("fleet.yaml"));
        let loaded = fleet::config::load(&path).expect("the written file loads");
        assert_eq!(loaded, fixture().config());
    }

    #[test]
    fn durations_and_counts_are_bare_and_other_text_quoted() {
        let text = fixture().yaml();
        for bare in [
            "max_size: 2",
            "max_node_provision_time: 40m",
            "timeout: 10s, env: { BIN: \"/usr/bin/fleet\"",
            "timings: { job_monitor_poll_interval: 100ms, max_attempts: 2",
            "labels: { \"fleet.dev/pool\": \"a\" }",
        ] {
            assert!(text.contains(bare), "{bare}\n{text}");
        }
    }

    #[test]
    fn quote_writes_what_rust_debug_writes_for_plain_text() {
        let text = r#"echo "$FLEET_SLOT" >> "$LOG"; printf 'a\tb'"#;
        assert_eq!(quote(text), format!("{text:?}"));
        assert_eq!(quote("a\r\nb"), r#""a\r\nb""#);
    }
}
