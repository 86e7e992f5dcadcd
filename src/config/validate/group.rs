//! Validation of one group's own fields: its sizes, readiness taints, timings, operations,
//! template and autoscaling options (SPEC §4.1, §3.5, §6.2, §6.6). Every problem is collected
//! with its place; a group is built only when it has none. Pure: no I/O.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::model::{
    AutoscalingOptions, DEFAULT_READINESS_TAINT, Gpu, Group, MAX_DURATION, Operation, Run, Template,
};
use crate::config::raw::{
    Checked, RawGpu, RawGroup, RawOperation, RawOptions, RawTemplate, RawTimings,
};
use crate::domain::claim::Timings;
use crate::domain::name::{GroupName, check_env_name};
use crate::domain::node::Taint;
use crate::domain::operation::REPORT_SLACK;
use crate::units::Quantity;

use super::power::power_draw;
use super::{Problems, job};

/// One group; `None` when a part of it could not be built (its problems are in `problems`).
pub(super) fn group(
    raw: &RawGroup,
    name: Option<GroupName>,
    place: &str,
    problems: &mut Problems,
) -> Option<Group> {
    let (min_size, max_size) = sizes(raw, place, problems);
    let max_node_provision_time = match &raw.max_node_provision_time {
        None => Some(None),
        Some(d) => duration(d, &format!("{place}.max_node_provision_time"), problems).map(Some),
    };
    let readiness_taints = match &raw.readiness_taints {
        None => taint_or_problem(
            DEFAULT_READINESS_TAINT,
            &format!("{place}.readiness_taints"),
            problems,
        )
        .map(|t| vec![t]),
        Some(list) => taints(list, &format!("{place}.readiness_taints"), problems),
    };
    let timings = timings(raw.timings.as_ref(), &format!("{place}.timings"), problems);
    let [startup, shutdown] = operations(raw, &timings, place, problems);
    super::driver_defaults(raw.driver.as_ref(), &format!("{place}.driver"), problems);
    let options = autoscaling_options(
        raw.autoscaling_options.as_ref(),
        &format!("{place}.autoscaling_options"),
        problems,
    );
    let template = match &raw.template {
        None => Some(None),
        Some(t) => template(t, &format!("{place}.template"), problems).map(Some),
    };
    // The taints a Node of the group carries once it is ready; unset, the template's, so the
    // Node cluster-autoscaler simulated is the Node it gets.
    let node_taints = match (&raw.node_taints, &template) {
        (Some(list), _) => taints(list, &format!("{place}.node_taints"), problems),
        (None, Some(Some(t))) => Some(t.taints.clone()),
        (None, _) => Some(Vec::new()),
    };
    for t in node_taints.iter().flatten() {
        if t.key == crate::domain::node::FLEET_CORDON_TAINT
            || crate::domain::node::AUTOSCALER_TAINTS.contains(&t.key.as_str())
        {
            problems.push(
                format!("{place}.node_taints"),
                format!(
                    "{t} is a taint fleet or cluster-autoscaler manages itself and removes at \
                     the readiness gate's end; leave it out"
                ),
            );
        }
    }
    let power_on = super::power_on(
        raw.power_on.as_ref(),
        &format!("{place}.power_on"),
        problems,
    );
    Some(Group {
        name: name?,
        power_on,
        min_size: min_size?,
        max_size: max_size?,
        max_node_provision_time: max_node_provision_time?,
        readiness_taints: readiness_taints?,
        node_taints: node_taints?,
        startup: startup?,
        shutdown: shutdown?,
        timings,
        template: template?,
        autoscaling_options: options?,
    })
}

/// `min_size` (0 when unset) and `max_size`, the first at most the second.
fn sizes(raw: &RawGroup, place: &str, problems: &mut Problems) -> (Option<u32>, Option<u32>) {
    let min_size = match &raw.min_size {
        None => Some(0),
        Some(n) => checked(n, &format!("{place}.min_size"), problems),
    };
    let max_size = checked(&raw.max_size, &format!("{place}.max_size"), problems);
    if let (Some(min), Some(max)) = (min_size, max_size)
        && min > max
    {
        problems.push(
            format!("{place}.min_size"),
            format!("min_size {min} is greater than max_size {max}; min_size is at most max_size"),
        );
    }
    (min_size, max_size)
}

/// The group's startup and shutdown. One it does not name is run by its slots' drivers (SPEC
/// §4.10), which the slots' own check holds; it waits as long as a command would.
fn operations(
    raw: &RawGroup,
    timings: &Timings,
    place: &str,
    problems: &mut Problems,
) -> [Option<Operation>; 2] {
    let by_drivers = || Operation {
        run: Run::Driver,
        env: BTreeMap::new(),
        dir: None,
        timeout: timings.job_timeout,
    };
    let ops = [("startup", &raw.startup), ("shutdown", &raw.shutdown)].map(|(name, raw)| {
        let Some(raw) = raw else {
            return Some(by_drivers());
        };
        let op = operation(raw, timings, &format!("{place}.{name}"), problems)?;
        reported_before_stuck(&op, timings, &format!("{place}.{name}.timeout"), problems);
        Some(op)
    });
    if raw.startup.is_none() || raw.shutdown.is_none() {
        let place = format!("{place}.timings.job_timeout");
        reported_before_stuck(&by_drivers(), timings, &place, problems);
    }
    ops
}

/// An operation whose outcome was lost is abandoned at stuck_threshold (SPEC §5.4); one that
/// is still allowed to run, and to report, by then would be abandoned alive.
fn reported_before_stuck(op: &Operation, timings: &Timings, place: &str, problems: &mut Problems) {
    if op.timeout + REPORT_SLACK >= timings.stuck_threshold {
        problems.push(
            place,
            format!(
                "the timeout {} plus the 30s the wrapper has to report it reaches \
                 timings.stuck_threshold ({}): an operation is abandoned as stuck only once \
                 it can no longer report; shorten the timeout or raise stuck_threshold",
                humantime::format_duration(op.timeout),
                humantime::format_duration(timings.stuck_threshold)
            ),
        );
    }
}

/// The group's opt-in and overrides; `Some(None)` when it does not opt in, `None` when a value
/// is a problem.
fn autoscaling_options(
    raw: Option<&RawOptions>,
    place: &str,
    problems: &mut Problems,
) -> Option<Option<AutoscalingOptions>> {
    let values = match raw {
        None | Some(RawOptions::On(false)) => return Some(None),
        Some(RawOptions::On(true)) => return Some(Some(AutoscalingOptions::default())),
        Some(RawOptions::Set(values)) => values,
    };
    let before = problems.len();
    let ratio = |value: Option<f64>, name: &str, problems: &mut Problems| {
        if let Some(v) = value
            && !(v.is_finite() && (0.0..=1.0).contains(&v))
        {
            problems.push(
                format!("{place}.{name}"),
                format!("invalid {name} {v}: a number from 0 to 1, like 0.5"),
            );
        }
        value
    };
    let options = AutoscalingOptions {
        scale_down_utilization_threshold: ratio(
            values.scale_down_utilization_threshold,
            "scale_down_utilization_threshold",
            problems,
        ),
        scale_down_gpu_utilization_threshold: ratio(
            values.scale_down_gpu_utilization_threshold,
            "scale_down_gpu_utilization_threshold",
            problems,
        ),
        scale_down_unneeded_time: values
            .scale_down_unneeded_time
            .as_ref()
            .and_then(|v| duration(v, &format!("{place}.scale_down_unneeded_time"), problems)),
        scale_down_unready_time: values
            .scale_down_unready_time
            .as_ref()
            .and_then(|v| duration(v, &format!("{place}.scale_down_unready_time"), problems)),
        max_node_startup_time: values
            .max_node_startup_time
            .as_ref()
            .and_then(|v| duration(v, &format!("{place}.max_node_startup_time"), problems)),
        zero_or_max_node_scaling: values.zero_or_max_node_scaling,
        ignore_daemonsets_utilization: values.ignore_daemonsets_utilization,
    };
    (problems.len() == before).then_some(Some(options))
}

fn checked<T: Copy>(value: &Checked<T>, place: &str, problems: &mut Problems) -> Option<T> {
    match value {
        Ok(v) => Some(*v),
        Err(message) => {
            problems.push(place, message.clone());
            None
        }
    }
}

/// A duration the file gives: longer than zero, at most `MAX_DURATION`.
fn duration(value: &Checked<Duration>, place: &str, problems: &mut Problems) -> Option<Duration> {
    let d = checked(value, place, problems)?;
    if d.is_zero() {
        problems.push(
            place,
            "the duration is zero: it must be longer than zero, like 30s, 5m or 1h",
        );
        return None;
    }
    if d > MAX_DURATION {
        problems.push(
            place,
            format!(
                "the duration {} is too long: at most 365 days (8760h)",
                humantime::format_duration(d)
            ),
        );
        return None;
    }
    Some(d)
}

fn taint_or_problem(text: &str, place: &str, problems: &mut Problems) -> Option<Taint> {
    match text.parse::<Taint>() {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(place, e.to_string());
            None
        }
    }
}

fn taints(list: &[String], place: &str, problems: &mut Problems) -> Option<Vec<Taint>> {
    let parsed: Vec<Option<Taint>> = list
        .iter()
        .enumerate()
        .map(|(i, t)| taint_or_problem(t, &format!("{place}[{i}]"), problems))
        .collect();
    parsed.into_iter().collect()
}

/// The effective timings. Always returns values (the defaults where
/// a field is bad) so that the operations can still be checked against a job timeout; the bad
/// fields are in `problems`, so the group is not built from them.
fn timings(raw: Option<&RawTimings>, place: &str, problems: &mut Problems) -> Timings {
    let defaults = RawTimings::default();
    let raw = raw.unwrap_or(&defaults);
    let mut t = Timings::default();
    durations(raw, place, &mut t, problems);
    // One boot window of *these* timings, not of the defaults: a group with a longer job
    // timeout boots for longer, and a machine seen off within its boot window is not gone.
    // Every term is capped by MAX_DURATION, so the sum cannot overflow.
    t.machine_gone_grace = t.attempt_budget();
    set_duration(
        &raw.machine_gone_grace,
        &format!("{place}.machine_gone_grace"),
        &mut t.machine_gone_grace,
        problems,
    );
    if let Some(value) = &raw.delete_stale_node_after {
        let place = format!("{place}.delete_stale_node_after");
        t.delete_stale_node_after = duration(value, &place, problems);
    }
    if raw.lock_timeout.is_some() {
        problems.push(
            format!("{place}.lock_timeout"),
            "lock_timeout is gone: fleet takes no coordination lock (one live claim per slot is \
             made airtight by the store, SPEC §3.11 3); remove it",
        );
    }
    if let Some(value) = &raw.max_attempts {
        let place = format!("{place}.max_attempts");
        match checked(value, &place, problems) {
            Some(0) => problems.push(
                place,
                "max_attempts is 0: a slot needs at least one attempt; use a whole number from 1",
            ),
            Some(n) => t.max_attempts = n,
            None => {}
        }
    }
    t
}

/// The timings' durations whose default is their own (`machine_gone_grace`'s default is the
/// attempt budget of the others), in the order of the file's fields.
fn durations(raw: &RawTimings, place: &str, t: &mut Timings, problems: &mut Problems) {
    let fields: [(&Option<Checked<Duration>>, &str, &mut Duration); 10] = [
        (&raw.job_timeout, "job_timeout", &mut t.job_timeout),
        (
            &raw.job_monitor_poll_interval,
            "job_monitor_poll_interval",
            &mut t.job_monitor_poll_interval,
        ),
        (
            &raw.uncordon_timeout,
            "uncordon_timeout",
            &mut t.uncordon_timeout,
        ),
        (
            &raw.readiness_gate_timeout,
            "readiness_gate_timeout",
            &mut t.readiness_gate_timeout,
        ),
        (
            &raw.max_uncordon_retry_interval,
            "max_uncordon_retry_interval",
            &mut t.max_uncordon_retry_interval,
        ),
        (&raw.budget_slack, "budget_slack", &mut t.budget_slack),
        (
            &raw.shutdown_attempt_reset_grace,
            "shutdown_attempt_reset_grace",
            &mut t.shutdown_attempt_reset_grace,
        ),
        (
            &raw.ttl_after_finished,
            "ttl_after_finished",
            &mut t.ttl_after_finished,
        ),
        (
            &raw.stuck_threshold,
            "stuck_threshold",
            &mut t.stuck_threshold,
        ),
        (
            &raw.failed_slot_cooldown,
            "failed_slot_cooldown",
            &mut t.failed_slot_cooldown,
        ),
    ];
    for (field, name, slot) in fields {
        set_duration(field, &format!("{place}.{name}"), slot, problems);
    }
}

/// Sets `slot` to the field's duration when the file gives a valid one.
fn set_duration(
    field: &Option<Checked<Duration>>,
    place: &str,
    slot: &mut Duration,
    problems: &mut Problems,
) {
    if let Some(value) = field
        && let Some(d) = duration(value, place, problems)
    {
        *slot = d;
    }
}

/// One operation: exactly one of `command` and `job`, its environment, directory and timeout.
fn operation(
    raw: &RawOperation,
    timings: &Timings,
    place: &str,
    problems: &mut Problems,
) -> Option<Operation> {
    let before = problems.len();
    let run = match (&raw.command, &raw.job) {
        (Some(command), None) => {
            self::command(command, place, problems);
            Some(Run::Command(command.clone()))
        }
        (None, Some(j)) => job::job(
            j,
            timings.ttl_after_finished,
            &format!("{place}.job"),
            problems,
        )
        .map(Run::Job),
        (Some(_), Some(_)) => {
            problems.push(
                place,
                "the operation has both command and job: it runs one of them, a command fleet \
                 runs or a Kubernetes Job; keep one",
            );
            None
        }
        (None, None) => {
            problems.push(
                place,
                "the operation runs nothing: give command (the program and its arguments, like \
                 [\"/usr/local/bin/power\", \"on\"]) or job (a Kubernetes Job, like { image: \
                 registry.example/power:1.4 })",
            );
            None
        }
    };
    for (name, value) in &raw.env {
        if let Err(message) = check_env_name(name) {
            problems.push(format!("{place}.env.{name}"), message);
        } else if value.contains('\0') {
            problems.push(
                format!("{place}.env.{name}"),
                "the value contains a NUL character; values are text without NUL",
            );
        }
    }
    if let Some(dir) = &raw.dir
        && (dir.trim().is_empty() || dir.contains('\0'))
    {
        problems.push(
            format!("{place}.dir"),
            "dir is empty or contains a NUL character: give the working directory as a \
                 path, like /var/lib/fleet, or leave it out",
        );
    }
    let timeout = match &raw.timeout {
        None => Some(timings.job_timeout),
        Some(d) => duration(d, &format!("{place}.timeout"), problems),
    };
    if problems.len() != before {
        return None;
    }
    Some(Operation {
        run: run?,
        env: raw.env.clone(),
        dir: raw.dir.as_ref().map(PathBuf::from),
        timeout: timeout?,
    })
}

/// A command: a program and its arguments, none of them holding a NUL.
fn command(command: &[String], place: &str, problems: &mut Problems) {
    match command.first() {
        None => problems.push(
            format!("{place}.command"),
            "the command is empty: give the program and its arguments as a list, like \
             [\"/usr/local/bin/power\", \"on\"]",
        ),
        Some(program) if program.trim().is_empty() => problems.push(
            format!("{place}.command[0]"),
            "the program is empty: the first element of command is the program to run, like \
             /usr/local/bin/power",
        ),
        Some(_) => {}
    }
    // A NUL cannot cross exec: refuse it here rather than when the machine is needed.
    for (i, arg) in command.iter().enumerate() {
        if arg.contains('\0') {
            problems.push(
                format!("{place}.command[{i}]"),
                "an argument contains a NUL character; arguments are text without NUL",
            );
        }
    }
}

fn template(raw: &RawTemplate, place: &str, problems: &mut Problems) -> Option<Template> {
    let before = problems.len();
    for key in raw.labels.keys() {
        if key.trim().is_empty() {
            problems.push(
                format!("{place}.labels"),
                "a label key is empty: a key is a Kubernetes label key, like fleet.dev/pool",
            );
        }
    }
    let taints = taints(&raw.taints, &format!("{place}.taints"), problems);
    let capacity = capacity(&raw.capacity, place, problems);
    let gpu = raw
        .gpu
        .as_ref()
        .map(|raw_gpu| gpu(raw_gpu, place, problems));
    let power = raw
        .power
        .as_ref()
        .map(|power| power_draw(power, place, problems));
    let devices = super::devices::devices(&raw.devices, place, problems);
    if problems.len() != before {
        return None;
    }
    Some(Template {
        labels: raw.labels.clone(),
        taints: taints?,
        capacity,
        gpu,
        power,
        devices,
    })
}

/// The template's resources, each a quantity; cpu and memory are required.
fn capacity(
    raw: &BTreeMap<String, String>,
    place: &str,
    problems: &mut Problems,
) -> BTreeMap<String, Quantity> {
    let mut capacity = BTreeMap::new();
    for (resource, quantity) in raw {
        if resource.trim().is_empty() {
            problems.push(
                format!("{place}.capacity"),
                "a resource name is empty: a name is a Kubernetes resource, like cpu, memory or \
                 nvidia.com/gpu",
            );
            continue;
        }
        match Quantity::parse(quantity) {
            Ok(q) => {
                capacity.insert(resource.clone(), q);
            }
            Err(e) => problems.push(format!("{place}.capacity.{resource}"), e.to_string()),
        }
    }
    // A template node without CPU or memory fits no pod: cluster-autoscaler would simulate a
    // useless machine and never say why.
    for needed in ["cpu", "memory"] {
        if !raw.contains_key(needed) {
            problems.push(
                format!("{place}.capacity"),
                format!(
                    "the template has no {needed}: a scale-from-zero node needs cpu and memory \
                     (like capacity: {{ cpu: \"16\", memory: 64Gi }})"
                ),
            );
        }
    }
    capacity
}

/// The GPU label and types; the value is built even with problems (they are in `problems`).
fn gpu(gpu: &RawGpu, place: &str, problems: &mut Problems) -> Gpu {
    if gpu.label.trim().is_empty() {
        problems.push(
            format!("{place}.gpu.label"),
            "the gpu label is empty: it is the node label that names the GPU type, like \
             fleet.dev/gpu-type",
        );
    }
    if gpu.types.is_empty() {
        problems.push(
            format!("{place}.gpu.types"),
            "no gpu types: list at least one, like [nvidia-a100]",
        );
    }
    for (i, t) in gpu.types.iter().enumerate() {
        if t.trim().is_empty() {
            problems.push(
                format!("{place}.gpu.types[{i}]"),
                "a gpu type is empty: name it, like nvidia-a100",
            );
        }
    }
    Gpu {
        label: gpu.label.clone(),
        types: gpu.types.clone(),
    }
}
