//! Validation of the power drivers (SPEC §4.10): a group's `driver` gives defaults, a slot's
//! `driver` overrides them field by field, and the merged driver must be complete for its type.
//!
//! Every problem names the place its value came from (`groups[0] (rack).driver.username` for a
//! default, `slots[2] (n1).driver.endpoint` for an override), or the slot's own `driver` when a
//! field is missing, so the operator edits the right line. A group's default is checked once
//! however many slots take it (`push_once`). Pure: no I/O; whether a password file or variable
//! exists is asked at start and on reload by `power::drive::check_drivers`.
//!
//! This file merges and builds; `fields` checks each value where it is written.

mod fields;

use crate::config::driver::{
    DEFAULT_BROADCAST, Driver, DriverKind, IPMI_PORT, IpmiDriver, OffBy, RedfishDriver,
    SecretSource, WolDriver, parse_broadcast,
};
use crate::config::raw::RawDriver;

use super::Problems;
pub(super) use fields::Given;
use fields::{
    Kind, TYPES, broadcast, check_given, cipher_suite, endpoint, host, kind, mac, off,
    password_env, path, port, present, system, tls_fingerprint, username,
};

/// A group's `driver`: the values it gives are checked where they are, even when no slot takes
/// them; whether they make a whole driver is each slot's question.
pub(super) fn defaults(raw: Option<&RawDriver>, place: &str, problems: &mut Problems) {
    if let Some(raw) = raw {
        check_given(Given { raw, place }, problems);
    }
}

/// A slot's driver: its group's defaults with the slot's fields over them; `Some(None)` when
/// neither gives one, `None` when it has a problem (in `problems`).
///
/// A slot that names another type than its group's takes none of the group's fields: they were
/// meant for another protocol. `password_file` and `password_env` are one choice, as are
/// `ca_file`, `tls_fingerprint` and `insecure`: a slot that gives any side replaces the group's.
pub(super) fn slot_driver(
    group: Option<Given<'_>>,
    slot: Option<Given<'_>>,
    slot_place: &str,
    problems: &mut Problems,
) -> Option<Option<Driver>> {
    let before = problems.len();
    if let Some(given) = slot {
        check_given(given, problems);
    }
    let group = match (group, slot) {
        (Some(g), Some(s))
            if s.raw.kind.is_some() && g.raw.kind.is_some() && s.raw.kind != g.raw.kind =>
        {
            None
        }
        (g, _) => g,
    };
    if group.is_none() && slot.is_none() {
        return Some(None);
    }
    let merged = Merged { group, slot };
    let place = format!("{slot_place}.driver");
    let Some((kind_text, kind_place)) = merged.pick(|r| r.kind.as_ref()) else {
        problems.push(
            format!("{place}.type"),
            format!("the driver has no type: give type: {TYPES} (here or in the group's driver)"),
        );
        return None;
    };
    let kind = kind(kind_text, kind_place, problems)?;
    foreign_fields(&merged, kind, problems);
    let off = match merged.pick(|r| r.off.as_ref()) {
        None => OffBy::Driver,
        Some((text, at)) => off(text, at, problems)?,
    };
    let driver = match kind {
        Kind::Wol => wol(&merged, off, &place, problems).map(DriverKind::Wol),
        Kind::Redfish => redfish(&merged, &place, problems).map(DriverKind::Redfish),
        Kind::Ipmi => ipmi(&merged, &place, problems).map(DriverKind::Ipmi),
    };
    if problems.len() != before {
        return None;
    }
    Some(Some(Driver { kind: driver?, off }))
}

/// The slot's fields over its group's.
struct Merged<'a> {
    group: Option<Given<'a>>,
    slot: Option<Given<'a>>,
}

impl<'a> Merged<'a> {
    /// The value of a field and the place of the entry that gives it: the slot's, else the
    /// group's.
    fn pick<T>(&self, get: impl Fn(&'a RawDriver) -> Option<&'a T>) -> Option<(&'a T, &'a str)> {
        [self.slot, self.group]
            .into_iter()
            .flatten()
            .find_map(|g| get(g.raw).map(|v| (v, g.place)))
    }

    /// The entry that decides a choice of two fields: the slot when it gives either, else the
    /// group.
    fn choice(&self, given: impl Fn(&RawDriver) -> bool) -> Option<Given<'a>> {
        [self.slot, self.group]
            .into_iter()
            .flatten()
            .find(|g| given(g.raw))
    }
}

/// A field the merged driver's type does not take, at the place that gives it.
fn foreign_fields(merged: &Merged<'_>, kind: Kind, problems: &mut Problems) {
    for given in [merged.slot, merged.group].into_iter().flatten() {
        for field in present(given.raw) {
            if !kind.fields().contains(&field) {
                problems.push_once(
                    format!("{}.{field}", given.place),
                    format!(
                        "{field} does not apply to a {} driver: it takes {}, off",
                        kind.name(),
                        kind.fields().join(", ")
                    ),
                );
            }
        }
    }
}

fn missing(place: &str, kind: Kind, field: &str, what: &str, problems: &mut Problems) {
    let article = if kind == Kind::Ipmi { "an" } else { "a" };
    problems.push(
        place,
        format!(
            "{article} {} driver needs {field}: {what} (here or in the group's driver)",
            kind.name()
        ),
    );
}

fn wol(merged: &Merged<'_>, off: OffBy, place: &str, problems: &mut Problems) -> Option<WolDriver> {
    if off != OffBy::Agent {
        problems.push(
            format!("{place}.off"),
            "Wake-on-LAN has no power-off: add off: agent (the bench's own fleet agent powers \
             the machine off, started with --power-off-command)",
        );
    }
    let mac = match merged.pick(|r| r.mac.as_ref()) {
        Some((text, at)) => mac(text, &format!("{at}.mac"), problems),
        None => {
            missing(
                place,
                Kind::Wol,
                "mac",
                "the machine's MAC address, like 52:54:00:12:34:56",
                problems,
            );
            None
        }
    };
    let broadcast = match merged.pick(|r| r.broadcast.as_ref()) {
        Some((text, at)) => broadcast(text, &format!("{at}.broadcast"), problems),
        None => parse_broadcast(DEFAULT_BROADCAST).ok(),
    };
    Some(WolDriver {
        mac: mac?,
        broadcast: broadcast?,
    })
}

fn redfish(merged: &Merged<'_>, place: &str, problems: &mut Problems) -> Option<RedfishDriver> {
    let endpoint = match merged.pick(|r| r.endpoint.as_ref()) {
        Some((text, at)) => endpoint(text, &format!("{at}.endpoint"), problems),
        None => {
            missing(
                place,
                Kind::Redfish,
                "endpoint",
                "the BMC's URL, like https://10.0.0.21",
                problems,
            );
            None
        }
    };
    let system = match merged.pick(|r| r.system.as_ref()) {
        Some((text, at)) => system(text, &format!("{at}.system"), problems).map(Some),
        None => Some(None),
    };
    let username = required_username(merged, Kind::Redfish, place, problems);
    let password = password(merged, Kind::Redfish, place, problems);
    let tls = merged
        .choice(|r| r.ca_file.is_some() || r.tls_fingerprint.is_some() || r.insecure.is_some());
    let ca_file = match tls.and_then(|g| g.raw.ca_file.as_ref().map(|v| (v, g.place))) {
        Some((text, at)) => path(
            text,
            &format!("{at}.ca_file"),
            "the CA certificate (PEM)",
            problems,
        )
        .map(Some),
        None => Some(None),
    };
    let fingerprint = match tls.and_then(|g| g.raw.tls_fingerprint.as_ref().map(|v| (v, g.place))) {
        Some((text, at)) => {
            tls_fingerprint(text, &format!("{at}.tls_fingerprint"), problems).map(Some)
        }
        None => Some(None),
    };
    let insecure = tls.and_then(|g| g.raw.insecure).unwrap_or(false);
    if let (Some(endpoint), false) = (&endpoint, insecure)
        && endpoint.starts_with("http://")
    {
        problems.push(
            format!("{place}.endpoint"),
            format!(
                "endpoint {endpoint} is plain http, which shows the BMC's password to the \
                 network: use https://, or set insecure: true for a test BMC on a trusted link"
            ),
        );
    }
    Some(RedfishDriver {
        endpoint: endpoint?,
        system: system?,
        username: username?,
        password: password?,
        ca_file: ca_file?,
        tls_fingerprint: fingerprint?,
        insecure,
    })
}

fn ipmi(merged: &Merged<'_>, place: &str, problems: &mut Problems) -> Option<IpmiDriver> {
    let host = match merged.pick(|r| r.host.as_ref()) {
        Some((text, at)) => host(text, &format!("{at}.host"), problems),
        None => {
            missing(
                place,
                Kind::Ipmi,
                "host",
                "the BMC's address, like 10.0.0.31",
                problems,
            );
            None
        }
    };
    let port = match merged.pick(|r| r.port.as_ref()) {
        Some((value, at)) => port(value, &format!("{at}.port"), problems),
        None => Some(IPMI_PORT),
    };
    let cipher_suite = match merged.pick(|r| r.cipher_suite.as_ref()) {
        Some((value, at)) => cipher_suite(value, &format!("{at}.cipher_suite"), problems).map(Some),
        None => Some(None),
    };
    let username = required_username(merged, Kind::Ipmi, place, problems);
    let password = password(merged, Kind::Ipmi, place, problems);
    Some(IpmiDriver {
        host: host?,
        port: port?,
        username: username?,
        password: password?,
        cipher_suite: cipher_suite?,
    })
}

fn required_username(
    merged: &Merged<'_>,
    kind: Kind,
    place: &str,
    problems: &mut Problems,
) -> Option<String> {
    match merged.pick(|r| r.username.as_ref()) {
        Some((text, at)) => {
            let at = format!("{at}.username");
            let name = username(text, &at, problems)?;
            // What each protocol can carry: basic auth splits on the first ':', and IPMI 2.0
            // takes at most 16 bytes.
            let why = match kind {
                Kind::Redfish if name.contains(':') => {
                    Some("a Redfish username holds no ':' (basic auth could not carry it)")
                }
                Kind::Ipmi if name.len() > 16 => Some("an IPMI username is at most 16 bytes"),
                _ => None,
            };
            if let Some(why) = why {
                problems.push_once(at, format!("invalid username {name:?}: {why}"));
                return None;
            }
            Some(name)
        }
        None => {
            missing(
                place,
                kind,
                "username",
                "the BMC user fleet logs in as",
                problems,
            );
            None
        }
    }
}

/// The password's source: `password_file` or `password_env`, from the entry that decides it.
fn password(
    merged: &Merged<'_>,
    kind: Kind,
    place: &str,
    problems: &mut Problems,
) -> Option<SecretSource> {
    let Some(given) = merged.choice(|r| r.password_file.is_some() || r.password_env.is_some())
    else {
        missing(
            place,
            kind,
            "password_file or password_env",
            "where the BMC's password is (a file, or an environment variable of fleet serve); \
             never the password itself",
            problems,
        );
        return None;
    };
    let at = |field: &str| format!("{}.{field}", given.place);
    match (&given.raw.password_file, &given.raw.password_env) {
        (Some(file), None) => path(
            file,
            &at("password_file"),
            "the file holding the password",
            problems,
        )
        .map(SecretSource::File),
        (None, Some(name)) => {
            password_env(name, &at("password_env"), problems).map(SecretSource::Env)
        }
        // Said by `check_given` at the entry's place.
        _ => None,
    }
}
