//! Validation: the raw file to the typed configuration, every problem collected with its place,
//! so an operator fixes the file in one go rather than one error per restart (SPEC §4.1).
//!
//! This part checks the file as a whole: that it declares groups, that group, slot, provider and
//! Kubernetes node names are unique, and that every slot names a declared group. One group's own
//! fields are checked in `group`, a Job operation's pod template in `job`. Pure: no I/O, never a
//! panic on any input.
//!
//! - `group`: one group's own fields; `job`: a Job operation's pod template.
//!
//! A slot's power driver is its group's `driver` with the slot's fields over it, read by
//! `power` (each driver's fields and checks are beside its code, `src/power/<name>/config.rs`):
//! this part hands it the entries with their places and collects what it says.
//! - `power`: what a machine draws and costs (a template's `power`, a slot's override).
//! - `devices`: a template's DRA devices, as a ResourceSlice will take them.

mod devices;
mod group;
mod job;
mod power;

use std::collections::BTreeMap;
use std::fmt;

use crate::domain::name::{BenchName, GroupName, InvalidName};

use super::model::{Config, Group, Slot, default_provider_id};
use super::raw::{Checked, RawConfig, RawGroup, RawPowerOn, RawSlot};
use crate::domain::budget::PowerOnBudget;
use crate::power::Driver;
use crate::power::fields::{Given, Said, Written};

/// One thing wrong with the file: where, and what is valid there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Like `groups[0] (pool-a).min_size` or `slots[2] (bench-07).group`.
    pub place: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, place: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            place: place.into(),
            message: message.into(),
        });
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// A problem a group's default may cause for each of its slots, said once.
    fn push_once(&mut self, place: impl Into<String>, message: impl Into<String>) {
        let (place, message) = (place.into(), message.into());
        if !self
            .0
            .iter()
            .any(|p| p.place == place && p.message == message)
        {
            self.push(place, message);
        }
    }
}

/// What a driver's fields say is wrong (SPEC §4.10): a group's default is said once, however
/// many slots take it.
impl Said for Problems {
    fn once(&mut self, place: String, message: String) {
        self.push_once(place, message);
    }
}

/// `groups[0] (pool-a)`: the index finds the entry, the name tells the reader which it is. The
/// name is shown only when valid, so a place never carries arbitrary text.
fn entry_place(list: &str, index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{list}[{index}] ({name})"),
        None => format!("{list}[{index}]"),
    }
}

/// A power-on budget (SPEC §4.11): each bound a whole number from 1; 0 would never start a
/// machine.
fn power_on(raw: Option<&RawPowerOn>, place: &str, problems: &mut Problems) -> PowerOnBudget {
    let Some(raw) = raw else {
        return PowerOnBudget::default();
    };
    let mut bound = |value: &Option<Checked<u32>>, name: &str| {
        let place = format!("{place}.{name}");
        match value.as_ref().map(|v| match v {
            Ok(n) => Ok(*n),
            Err(e) => Err(e.clone()),
        }) {
            None => None,
            Some(Ok(0)) => {
                problems.push(
                    place,
                    format!("{name} is 0: no machine could ever power on; use 1 or more, or leave it out"),
                );
                None
            }
            Some(Ok(n)) => Some(n),
            Some(Err(e)) => {
                problems.push(place, e);
                None
            }
        }
    };
    PowerOnBudget {
        max_concurrent: bound(&raw.max_concurrent, "max_concurrent"),
        per_minute: bound(&raw.per_minute, "per_minute"),
    }
}

/// The typed configuration, or every problem the file has.
pub(super) fn validate(raw: RawConfig) -> Result<Config, Vec<Problem>> {
    let mut problems = Problems::default();
    let raw_groups = raw.groups.unwrap_or_default();
    let raw_slots = raw.slots.unwrap_or_default();
    if raw_groups.is_empty() {
        problems.push(
            "groups",
            "no groups: declare at least one group (name, min_size, max_size, startup, shutdown)",
        );
    }
    let (declared, groups) = groups(&raw_groups, &mut problems);
    let slots = slots(&raw_slots, &raw_groups, &declared, &mut problems);
    let power_on = power_on(raw.power_on.as_ref(), "power_on", &mut problems);
    if problems.0.is_empty() {
        Ok(Config {
            groups,
            slots,
            power_on,
        })
    } else {
        Err(problems.0)
    }
}

/// The groups by name, and the index at which each validly named group was first declared.
///
/// Every validly named group counts as declared, even one with other problems, so that its
/// slots are not also reported as naming an undeclared group.
fn groups(
    raw_groups: &[RawGroup],
    problems: &mut Problems,
) -> (BTreeMap<GroupName, usize>, BTreeMap<GroupName, Group>) {
    let mut declared: BTreeMap<GroupName, usize> = BTreeMap::new();
    let mut groups = BTreeMap::new();
    for (index, raw) in raw_groups.iter().enumerate() {
        let before = problems.len();
        let name = match GroupName::parse(&raw.name) {
            Ok(name) => Some(name),
            Err(e) => {
                problems.push(
                    format!("{}.name", entry_place("groups", index, None)),
                    e.to_string(),
                );
                None
            }
        };
        let place = entry_place("groups", index, name.as_ref().map(GroupName::as_str));
        if let Some(name) = &name {
            if let Some(first) = declared.get(name) {
                problems.push(
                    format!("{place}.name"),
                    format!(
                        "group {name} is declared twice (first at groups[{first}]); group names \
                         are unique"
                    ),
                );
            } else {
                declared.insert(name.clone(), index);
            }
        }
        let group = group::group(raw, name, &place, problems);
        if problems.len() == before
            && let Some(group) = group
        {
            groups.insert(group.name.clone(), group);
        }
    }
    (declared, groups)
}

/// What the slots read so far have taken: a slot name, a provider id and a Kubernetes node
/// belong to one slot each, and a repeat names the first.
#[derive(Default)]
struct Taken {
    /// The index of the slot that has the name.
    names: BTreeMap<BenchName, usize>,
    /// The place of the slot that has the provider id.
    provider_ids: BTreeMap<String, String>,
    /// The place of the slot bound to the node.
    nodes: BTreeMap<String, String>,
}

fn slots(
    raw_slots: &[RawSlot],
    raw_groups: &[RawGroup],
    declared: &BTreeMap<GroupName, usize>,
    problems: &mut Problems,
) -> BTreeMap<BenchName, Slot> {
    let mut slots = BTreeMap::new();
    let mut taken = Taken::default();
    for (index, raw) in raw_slots.iter().enumerate() {
        let group = GroupName::parse(&raw.group)
            .ok()
            .and_then(|name| Some((declared.get(&name)?, name)))
            .and_then(|(at, name)| Some((raw_groups.get(*at)?, name, *at)));
        if let Some(slot) = slot(index, raw, declared, group, &mut taken, problems) {
            slots.insert(slot.name.clone(), slot);
        }
    }
    slots
}

/// One slot; `None` when it has a problem (in `problems`). `group` is the slot's declared group
/// as the file gives it, with its name and index, for the driver's defaults.
fn slot(
    index: usize,
    raw: &RawSlot,
    declared: &BTreeMap<GroupName, usize>,
    group: Option<(&RawGroup, GroupName, usize)>,
    taken: &mut Taken,
    problems: &mut Problems,
) -> Option<Slot> {
    let before = problems.len();
    let name = match BenchName::parse(&raw.name) {
        Ok(name) => Some(name),
        Err(e) => {
            problems.push(
                format!("{}.name", entry_place("slots", index, None)),
                e.to_string(),
            );
            None
        }
    };
    let place = entry_place("slots", index, name.as_ref().map(BenchName::as_str));
    let mut duplicate = false;
    if let Some(name) = &name {
        if let Some(first) = taken.names.get(name) {
            duplicate = true;
            problems.push(
                format!("{place}.name"),
                format!(
                    "slot {name} is declared twice (first at slots[{first}]); slot names are \
                     unique"
                ),
            );
        } else {
            taken.names.insert(name.clone(), index);
        }
    }
    let group_name = slot_group(&raw.group, declared, &place, problems);
    let provider_id = provider_id(raw, name.as_ref(), duplicate, &place, taken, problems);
    if let Some(node) = &raw.kubernetes_node {
        kubernetes_node(node, &place, taken, problems);
    }
    let driver = slot_driver(raw, group.clone(), &place, problems);
    let power = slot_power(raw, group.as_ref().map(|(g, _, _)| *g), &place, problems);
    if problems.len() != before {
        return None;
    }
    Some(Slot {
        name: name?,
        group: group_name?,
        provider_id: provider_id?,
        kubernetes_node: raw.kubernetes_node.clone(),
        driver: driver?.map(Box::new),
        power,
    })
}

/// The slot's draw (SPEC §4.12): its group's `template.power` with the slot's `power` over it.
/// A group draw with problems is its group's to report: the slot then has none of its own.
fn slot_power(
    raw: &RawSlot,
    group: Option<&RawGroup>,
    place: &str,
    problems: &mut Problems,
) -> Option<crate::config::model::PowerDraw> {
    let group_power = group
        .and_then(|g| g.template.as_ref())
        .and_then(|t| t.power.as_ref());
    let group_draw = match group_power {
        None => None,
        Some(raw_power) => {
            let mut theirs = Problems::default();
            let draw = power::power_draw(raw_power, "", &mut theirs);
            if !theirs.0.is_empty() {
                return None;
            }
            Some(draw)
        }
    };
    power::slot_power(group_draw, raw.power.as_ref(), place, problems)
}

/// A group's `driver` (SPEC §4.10): the values it gives are checked where they are, even when no
/// slot takes them; whether they make a whole driver is each slot's question.
fn driver_defaults(written: Option<&Written>, place: &str, problems: &mut Problems) {
    if let Some(written) = written {
        crate::power::defaults(Given { written, place }, problems);
    }
}

/// The slot's driver, its group's defaults merged under its own fields (SPEC §4.10); a slot with
/// none is powered by its group's operations, which the group must then have.
fn slot_driver(
    raw: &RawSlot,
    group: Option<(&RawGroup, GroupName, usize)>,
    place: &str,
    problems: &mut Problems,
) -> Option<Option<Driver>> {
    let group_place = group
        .as_ref()
        .map(|(_, name, at)| format!("{}.driver", entry_place("groups", *at, Some(name.as_str()))));
    let defaults = group.as_ref().and_then(|(g, _, _)| g.driver.as_ref());
    let slot_place = format!("{place}.driver");
    fn given<'a>(written: Option<&'a Written>, place: &'a str) -> Option<Given<'a>> {
        written.map(|written| Given { written, place })
    }
    let driver = crate::power::driver(
        given(defaults, group_place.as_deref().unwrap_or_default()),
        given(raw.driver.as_ref(), &slot_place),
        &slot_place,
        problems,
    )?;
    if let (None, Some((g, name, _))) = (&driver, &group) {
        let lacking: Vec<&str> = [
            ("startup", g.startup.is_none()),
            ("shutdown", g.shutdown.is_none()),
        ]
        .into_iter()
        .filter_map(|(op, absent)| absent.then_some(op))
        .collect();
        if !lacking.is_empty() {
            problems.push(
                slot_place,
                format!(
                    "the slot has no driver and its group {name} has no {}: give the slot a \
                     driver (type: {}), or the group {} (a command or a job)",
                    lacking.join(" and "),
                    crate::power::type_names(),
                    lacking.join(" and ")
                ),
            );
            return None;
        }
    }
    Some(driver)
}

/// The slot's group, which the file must declare.
fn slot_group(
    text: &str,
    declared: &BTreeMap<GroupName, usize>,
    place: &str,
    problems: &mut Problems,
) -> Option<GroupName> {
    match GroupName::parse(text) {
        Ok(group) if declared.contains_key(&group) => Some(group),
        Ok(group) => {
            let known: Vec<&str> = declared.keys().map(GroupName::as_str).collect();
            let hint = if known.is_empty() {
                "declare it under groups".to_owned()
            } else {
                format!(
                    "declare it under groups, or use one of: {}",
                    known.join(", ")
                )
            };
            problems.push(
                format!("{place}.group"),
                format!("group {group} is not declared; {hint}"),
            );
            None
        }
        Err(e) => {
            problems.push(format!("{place}.group"), e.to_string());
            None
        }
    }
}

/// The slot's provider id: its own, or the default of its name; unique across the file.
fn provider_id(
    raw: &RawSlot,
    name: Option<&BenchName>,
    duplicate: bool,
    place: &str,
    taken: &mut Taken,
    problems: &mut Problems,
) -> Option<String> {
    let provider_id = match (&raw.provider_id, name) {
        (Some(id), _) if id.trim().is_empty() => {
            problems.push(
                format!("{place}.provider_id"),
                "provider_id is empty: leave it out for the default fleet://<name>, or give \
                 a non-empty id",
            );
            None
        }
        (Some(id), _) => match crate::domain::text::first_unsafe(id) {
            // Shown by the views and the page, and sent to cluster-autoscaler, which logs it.
            Some(found) => {
                problems.push(
                    format!("{place}.provider_id"),
                    format!(
                        "provider_id {:?} has a character a person cannot read as text: \
                         {found}; a provider id is printable text, like fleet://<name>",
                        crate::domain::text::escaped(id)
                    ),
                );
                None
            }
            None => Some(id.clone()),
        },
        (None, Some(name)) => Some(default_provider_id(name)),
        (None, None) => None,
    };
    // A repeated slot name already says what is wrong; its default provider id would only
    // repeat it.
    if let Some(id) = &provider_id
        && !(duplicate && raw.provider_id.is_none())
    {
        if let Some(first) = taken.provider_ids.get(id) {
            problems.push(
                format!("{place}.provider_id"),
                format!(
                    "provider_id {id} is already used by {first}; every slot has its own \
                     provider_id"
                ),
            );
        } else {
            taken.provider_ids.insert(id.clone(), place.to_owned());
        }
    }
    provider_id
}

/// The Kubernetes node a slot is bound to: an RFC 1123 subdomain, bound to one slot only.
fn kubernetes_node(node: &str, place: &str, taken: &mut Taken, problems: &mut Problems) {
    match BenchName::parse(node) {
        Ok(_) => {
            if let Some(first) = taken.nodes.get(node) {
                problems.push(
                    format!("{place}.kubernetes_node"),
                    format!(
                        "kubernetes_node {node} is already bound to {first}; a node belongs to \
                         one slot"
                    ),
                );
            } else {
                taken.nodes.insert(node.to_owned(), place.to_owned());
            }
        }
        Err(e) => problems.push(
            format!("{place}.kubernetes_node"),
            format!(
                "invalid kubernetes_node {node:?}: {}; a node name is an RFC 1123 subdomain \
                 (lowercase letters, digits, '-' and '.', each label starting and ending with a \
                 letter or digit, at most 253 characters)",
                why_name(&e)
            ),
        ),
    }
}

/// The reason alone of a refused name, for a message that names the field itself.
fn why_name(e: &InvalidName) -> String {
    e.why()
}
