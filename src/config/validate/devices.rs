//! Validation of a template's DRA devices (SPEC §6.3): each kind of device a machine has, as
//! `resource.k8s.io/v1` will take it in a ResourceSlice. Every problem is collected with its place
//! and what is valid. Pure.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::model::{DeviceAttribute, Devices};
use crate::config::raw::{RawAttribute, RawDevices};
use crate::domain::name::BenchName;
use crate::units::Quantity;

use super::Problems;

/// The most devices one ResourceSlice may list (`ResourceSliceSpec.devices`), so a driver's.
pub const MAX_DEVICES: u32 = 128;
/// The most attributes and capacities one device may have, together.
const MAX_FACTS: usize = 32;
/// The longest string or version value of an attribute.
const MAX_VALUE: usize = 64;
/// The name a device set's devices take when it names none: `device-0`, `device-1`, ...
const DEFAULT_NAME: &str = "device";

/// A template's `devices`, every problem pushed; those without a problem.
pub(super) fn devices(raw: &[RawDevices], place: &str, problems: &mut Problems) -> Vec<Devices> {
    let mut out = Vec::new();
    let mut per_driver: BTreeMap<&str, u32> = BTreeMap::new();
    let mut names: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (i, d) in raw.iter().enumerate() {
        let here = format!("{place}.devices[{i}]");
        let before = problems.len();
        if d.driver.len() > 63 || BenchName::parse(&d.driver).is_err() {
            problems.push(
                format!("{here}.driver"),
                format!(
                    "{:?} is not a DRA driver name: a lowercase DNS subdomain of at most 63 \
                     characters, like gpu.example.com",
                    d.driver
                ),
            );
        }
        let name = d.name.as_deref().unwrap_or(DEFAULT_NAME);
        if !is_label(name) || name.len() > 58 {
            problems.push(
                format!("{here}.name"),
                format!(
                    "{name:?} is not a device name: a DNS label of at most 58 characters \
                     (the devices are <name>-0, <name>-1, ...)"
                ),
            );
        }
        if !names.insert((d.driver.as_str(), name)) {
            problems.push(
                format!("{here}.name"),
                format!(
                    "devices of driver {} are already named {name}: give this set another `name`",
                    d.driver
                ),
            );
        }
        let count = per_driver.entry(d.driver.as_str()).or_default();
        *count = count.saturating_add(d.count);
        if d.count == 0 || *count > MAX_DEVICES {
            problems.push(
                format!("{here}.count"),
                format!(
                    "a machine has 1 to {MAX_DEVICES} devices of one driver (one ResourceSlice \
                     lists at most {MAX_DEVICES}); this makes {count}"
                ),
            );
        }
        if d.attributes.len() + d.capacity.len() > MAX_FACTS {
            problems.push(
                here.clone(),
                format!("a device has at most {MAX_FACTS} attributes and capacities together"),
            );
        }
        let attributes = attributes(&d.attributes, &here, problems);
        let mut capacity = BTreeMap::new();
        for (key, value) in &d.capacity {
            check_name(key, &format!("{here}.capacity"), problems);
            match Quantity::parse(value) {
                Ok(q) => {
                    capacity.insert(key.clone(), q);
                }
                Err(e) => problems.push(format!("{here}.capacity.{key}"), e.to_string()),
            }
        }
        if problems.len() == before {
            out.push(Devices {
                driver: d.driver.clone(),
                name: name.to_owned(),
                count: d.count,
                attributes,
                capacity,
            });
        }
    }
    out
}

fn attributes(
    raw: &BTreeMap<String, RawAttribute>,
    here: &str,
    problems: &mut Problems,
) -> BTreeMap<String, DeviceAttribute> {
    let mut out = BTreeMap::new();
    for (key, value) in raw {
        check_name(key, &format!("{here}.attributes"), problems);
        let value = match value {
            RawAttribute::Bool(b) => DeviceAttribute::Bool(*b),
            RawAttribute::Int(n) => DeviceAttribute::Int(*n),
            RawAttribute::String(s) => DeviceAttribute::String(s.clone()),
            RawAttribute::Version { version } => {
                if !is_semver(version) {
                    problems.push(
                        format!("{here}.attributes.{key}"),
                        format!("{version:?} is not a semantic version, like 1.2.3"),
                    );
                }
                DeviceAttribute::Version(version.clone())
            }
        };
        if let DeviceAttribute::String(s) | DeviceAttribute::Version(s) = &value
            && s.chars().count() > MAX_VALUE
        {
            problems.push(
                format!("{here}.attributes.{key}"),
                format!("a value has at most {MAX_VALUE} characters"),
            );
        }
        out.insert(key.clone(), value);
    }
    out
}

/// A qualified name of an attribute or capacity: an optional `domain/` (a DNS subdomain) and a C
/// identifier of at most 32 characters, as `resource.k8s.io/v1` takes it.
fn check_name(key: &str, place: &str, problems: &mut Problems) {
    let (domain, id) = key
        .rsplit_once('/')
        .map_or((None, key), |(d, i)| (Some(d), i));
    let id_ok = id.len() <= 32
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let domain_ok = domain.is_none_or(|d| d.len() <= 63 && BenchName::parse(d).is_ok());
    if !(id_ok && domain_ok) {
        problems.push(
            place,
            format!(
                "{key:?} is not a device attribute or capacity name: a C identifier of at most 32 \
                 characters, with an optional DNS domain and `/` before it, like model or \
                 gpu.example.com/family"
            ),
        );
    }
}

/// An RFC 1123 label: lowercase letters, digits and `-`, starting and ending alphanumeric.
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A semantic version: `MAJOR.MINOR.PATCH`, each a number without a leading zero, then an
/// optional `-prerelease` and `+build` of dot-separated `[0-9A-Za-z-]` parts.
fn is_semver(v: &str) -> bool {
    let (core, build) = v.split_once('+').map_or((v, None), |(c, b)| (c, Some(b)));
    let (core, pre) = core
        .split_once('-')
        .map_or((core, None), |(c, p)| (c, Some(p)));
    let number = |n: &str| {
        !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) && (n == "0" || !n.starts_with('0'))
    };
    let idents = |s: &str| {
        s.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| number(p))
        && pre.is_none_or(idents)
        && build.is_none_or(idents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_semver() {
        for good in [
            "1.2.3",
            "0.0.0",
            "10.20.30-rc.1",
            "1.0.0+build.5",
            "1.0.0-alpha-1+x",
        ] {
            assert!(is_semver(good), "{good}");
        }
        for bad in [
            "1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3+", "v1.2.3", "", "1..3",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn names_are_qualified_c_identifiers() {
        let mut problems = Problems::default();
        for good in ["model", "gpu.example.com/family", "memory_gb", "a"] {
            check_name(good, "p", &mut problems);
        }
        assert_eq!(problems.len(), 0);
        for bad in [
            "",
            "9lives",
            "gpu.example.com/",
            "/model",
            "Bad_Domain/x",
            "a-b",
            &"x".repeat(33),
        ] {
            check_name(bad, "p", &mut problems);
        }
        assert_eq!(problems.len(), 7);
    }
}
