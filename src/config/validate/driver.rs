//! Validation of the power drivers (SPEC §4.10): a group's `driver` gives defaults, a slot's
//! `driver` overrides them field by field, and the merged driver must be complete for its type.
//!
//! Every problem names the place its value came from (`groups[0] (rack).driver.username` for a
//! default, `slots[2] (n1).driver.endpoint` for an override), or the slot's own `driver` when a
//! field is missing, so the operator edits the right line. A group's default is checked once
//! however many slots take it (`push_once`). Pure: no I/O; whether a password file or variable
//! exists is asked at start and on reload by `power::drive::check_secrets`.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::driver::{
    CIPHER_SUITES, DEFAULT_BROADCAST, Driver, DriverKind, IPMI_PORT, IpmiDriver, Mac, OffBy,
    RedfishDriver, SecretSource, WolDriver, parse_broadcast,
};
use crate::config::model::check_env_name;
use crate::config::raw::{Checked, RawDriver};

use super::Problems;

/// A driver as one entry of the file gives it, with the entry's place (`slots[2] (n1).driver`).
#[derive(Clone, Copy)]
pub(super) struct Given<'a> {
    pub(super) raw: &'a RawDriver,
    pub(super) place: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Wol,
    Redfish,
    Ipmi,
}

const TYPES: &str = "wol (Wake-on-LAN), redfish or ipmi";

/// The fields of each type, in the order the messages list them (`type` and `off` belong to
/// every type).
const WOL: &[&str] = &["mac", "broadcast"];
const REDFISH: &[&str] = &[
    "endpoint",
    "system",
    "username",
    "password_file",
    "password_env",
    "ca_file",
    "insecure",
];
const IPMI: &[&str] = &[
    "host",
    "port",
    "username",
    "password_file",
    "password_env",
    "cipher_suite",
];

impl Kind {
    fn parse(text: &str) -> Option<Kind> {
        match text {
            "wol" => Some(Kind::Wol),
            "redfish" => Some(Kind::Redfish),
            "ipmi" => Some(Kind::Ipmi),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Wol => "wol",
            Kind::Redfish => "redfish",
            Kind::Ipmi => "ipmi",
        }
    }

    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Wol => WOL,
            Kind::Redfish => REDFISH,
            Kind::Ipmi => IPMI,
        }
    }
}

/// The names of the fields a raw driver gives (but `type`, `off` and `password`), in the file's
/// order.
fn present(raw: &RawDriver) -> Vec<&'static str> {
    let fields = [
        ("mac", raw.mac.is_some()),
        ("broadcast", raw.broadcast.is_some()),
        ("endpoint", raw.endpoint.is_some()),
        ("system", raw.system.is_some()),
        ("username", raw.username.is_some()),
        ("password_file", raw.password_file.is_some()),
        ("password_env", raw.password_env.is_some()),
        ("ca_file", raw.ca_file.is_some()),
        ("insecure", raw.insecure.is_some()),
        ("host", raw.host.is_some()),
        ("port", raw.port.is_some()),
        ("cipher_suite", raw.cipher_suite.is_some()),
    ];
    fields
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
}

impl Problems {
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

/// A group's `driver`: the values it gives are checked where they are, even when no slot takes
/// them; whether they make a whole driver is each slot's question.
pub(super) fn defaults(raw: Option<&RawDriver>, place: &str, problems: &mut Problems) {
    if let Some(raw) = raw {
        check_given(Given { raw, place }, problems);
    }
}

/// The values one entry gives, each checked at its own place.
fn check_given(given: Given<'_>, problems: &mut Problems) {
    let Given { raw, place } = given;
    if raw.password.is_some() {
        problems.push_once(
            format!("{place}.password"),
            "a password is never written in the configuration: give password_file (a file \
             holding it, readable by fleet serve) or password_env (the name of an environment \
             variable of fleet serve)",
        );
    }
    if let Some(text) = &raw.kind {
        kind(text, place, problems);
    }
    if let Some(text) = &raw.off {
        off(text, place, problems);
    }
    if raw.password_file.is_some() && raw.password_env.is_some() {
        problems.push_once(
            place,
            "both password_file and password_env: the password comes from one of them; keep one",
        );
    }
    if raw.ca_file.is_some() && raw.insecure == Some(true) {
        problems.push_once(
            place,
            "both ca_file and insecure: true: insecure accepts any certificate, so the CA is \
             never used; keep ca_file (verified TLS) or, for a self-signed BMC, insecure",
        );
    }
    let at = |field: &str| format!("{place}.{field}");
    if let Some(v) = &raw.mac {
        mac(v, &at("mac"), problems);
    }
    if let Some(v) = &raw.broadcast {
        broadcast(v, &at("broadcast"), problems);
    }
    if let Some(v) = &raw.endpoint {
        endpoint(v, &at("endpoint"), problems);
    }
    if let Some(v) = &raw.system {
        system(v, &at("system"), problems);
    }
    if let Some(v) = &raw.username {
        username(v, &at("username"), problems);
    }
    if let Some(v) = &raw.password_file {
        path(
            v,
            &at("password_file"),
            "the file holding the password",
            problems,
        );
    }
    if let Some(v) = &raw.password_env {
        password_env(v, &at("password_env"), problems);
    }
    if let Some(v) = &raw.ca_file {
        path(v, &at("ca_file"), "the CA certificate (PEM)", problems);
    }
    if let Some(v) = &raw.host {
        host(v, &at("host"), problems);
    }
    if let Some(v) = &raw.port {
        port(v, &at("port"), problems);
    }
    if let Some(v) = &raw.cipher_suite {
        cipher_suite(v, &at("cipher_suite"), problems);
    }
}

/// A slot's driver: its group's defaults with the slot's fields over them; `Some(None)` when
/// neither gives one, `None` when it has a problem (in `problems`).
///
/// A slot that names another type than its group's takes none of the group's fields: they were
/// meant for another protocol. `password_file` and `password_env` are one choice, as are
/// `ca_file` and `insecure`: a slot that gives either side replaces the group's.
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
        Some((text, at)) => self::mac(text, &format!("{at}.mac"), problems),
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
        Some((text, at)) => self::broadcast(text, &format!("{at}.broadcast"), problems),
        None => parse_broadcast(DEFAULT_BROADCAST).ok(),
    };
    Some(WolDriver {
        mac: mac?,
        broadcast: broadcast?,
    })
}

fn redfish(merged: &Merged<'_>, place: &str, problems: &mut Problems) -> Option<RedfishDriver> {
    let endpoint = match merged.pick(|r| r.endpoint.as_ref()) {
        Some((text, at)) => self::endpoint(text, &format!("{at}.endpoint"), problems),
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
        Some((text, at)) => self::system(text, &format!("{at}.system"), problems).map(Some),
        None => Some(None),
    };
    let username = required_username(merged, Kind::Redfish, place, problems);
    let password = password(merged, Kind::Redfish, place, problems);
    let tls = merged.choice(|r| r.ca_file.is_some() || r.insecure.is_some());
    let ca_file = match tls.and_then(|g| g.raw.ca_file.as_ref().map(|v| (v, g.place))) {
        Some((text, at)) => self::path(
            text,
            &format!("{at}.ca_file"),
            "the CA certificate (PEM)",
            problems,
        )
        .map(Some),
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
        insecure,
    })
}

fn ipmi(merged: &Merged<'_>, place: &str, problems: &mut Problems) -> Option<IpmiDriver> {
    let host = match merged.pick(|r| r.host.as_ref()) {
        Some((text, at)) => self::host(text, &format!("{at}.host"), problems),
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
        Some((value, at)) => self::port(value, &format!("{at}.port"), problems),
        None => Some(IPMI_PORT),
    };
    let cipher_suite = match merged.pick(|r| r.cipher_suite.as_ref()) {
        Some((value, at)) => {
            self::cipher_suite(value, &format!("{at}.cipher_suite"), problems).map(Some)
        }
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
        (Some(file), None) => self::path(
            file,
            &at("password_file"),
            "the file holding the password",
            problems,
        )
        .map(|p| SecretSource::File(p)),
        (None, Some(name)) => {
            password_env(name, &at("password_env"), problems).map(SecretSource::Env)
        }
        // Said by `check_given` at the entry's place.
        _ => None,
    }
}

fn kind(text: &str, place: &str, problems: &mut Problems) -> Option<Kind> {
    let parsed = Kind::parse(text);
    if parsed.is_none() {
        problems.push_once(
            format!("{place}.type"),
            format!("invalid driver type {text:?}: the type is {TYPES}"),
        );
    }
    parsed
}

fn off(text: &str, place: &str, problems: &mut Problems) -> Option<OffBy> {
    match text {
        "agent" => Some(OffBy::Agent),
        "driver" => Some(OffBy::Driver),
        _ => {
            problems.push_once(
                format!("{place}.off"),
                format!(
                    "invalid off {text:?}: agent (the bench's own fleet agent powers the machine \
                     off) or driver (the driver's own power-off, the default)"
                ),
            );
            None
        }
    }
}

fn mac(text: &str, place: &str, problems: &mut Problems) -> Option<Mac> {
    match text.parse::<Mac>() {
        Ok(mac) => Some(mac),
        Err(message) => {
            problems.push_once(place, message);
            None
        }
    }
}

fn broadcast(text: &str, place: &str, problems: &mut Problems) -> Option<SocketAddr> {
    match parse_broadcast(text) {
        Ok(addr) if addr.port() == 0 => {
            problems.push_once(
                place,
                format!("invalid broadcast {text:?}: port 0 reaches nothing; use 9 or 7"),
            );
            None
        }
        Ok(addr) => Some(addr),
        Err(message) => {
            problems.push_once(place, message);
            None
        }
    }
}

/// Text fleet puts on a command line or in a request line: not empty, no white space or
/// control character.
fn token(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn endpoint(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
    let trimmed = text.trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"));
    let why = match rest {
        _ if !token(text) => Some("it is empty or holds white space"),
        None => Some("it is not an https:// (or http://) URL"),
        Some(rest) if rest.contains('@') => {
            Some("it holds credentials (give them as username and password_file)")
        }
        Some(rest) if rest.is_empty() => Some("it has no host"),
        Some(rest) if rest.contains(['/', '?', '#']) => {
            Some("it has a path or a query (the system's path goes in system)")
        }
        Some(_) => None,
    };
    if let Some(why) = why {
        // Never the text itself when it holds credentials: no password in any message.
        let shown = if text.contains('@') {
            "endpoint".to_owned()
        } else {
            format!("endpoint {text:?}")
        };
        problems.push_once(
            place,
            format!(
                "invalid {shown}: {why}; the BMC's URL is https://host[:port], like \
                 https://10.0.0.21 (http:// only with insecure: true, for a test BMC)"
            ),
        );
        return None;
    }
    Some(trimmed.to_owned())
}

fn system(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
    let path = text.trim_end_matches('/');
    let valid = token(text)
        && path.len() > "/redfish/v1/".len()
        && path.starts_with("/redfish/v1/")
        && !path.contains(['?', '#'])
        && !path.split('/').any(|segment| segment == "..");
    if !valid {
        problems.push_once(
            place,
            format!(
                "invalid system {text:?}: the ComputerSystem's path under /redfish/v1/, like \
                 /redfish/v1/Systems/1; leave it out for the BMC's only system"
            ),
        );
        return None;
    }
    Some(path.to_owned())
}

fn username(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
    if text.trim().is_empty() || text.chars().any(char::is_control) {
        problems.push_once(
            place,
            "the username is empty or has a control character: give the BMC user fleet logs in \
             as, like admin",
        );
        return None;
    }
    Some(text.to_owned())
}

fn path(text: &str, place: &str, what: &str, problems: &mut Problems) -> Option<PathBuf> {
    if text.trim().is_empty() || text.contains('\0') {
        problems.push_once(
            place,
            format!("the path is empty or holds a NUL: give the path of {what}, like /etc/fleet/…"),
        );
        return None;
    }
    Some(PathBuf::from(text))
}

fn password_env(name: &str, place: &str, problems: &mut Problems) -> Option<String> {
    // The wrapper starts without fleet's own FLEET_ variables (one may hold Redis's password),
    // so a password there would never reach it: check_env_name refuses the prefix.
    match check_env_name(name) {
        Ok(()) => Some(name.to_owned()),
        Err(message) => {
            problems.push_once(place, message);
            None
        }
    }
}

fn host(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
    // A host is an argument of ipmitool: one word of a host name or address, never an option.
    let valid = text.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !valid {
        problems.push_once(
            place,
            format!(
                "invalid host {text:?}: the BMC's host name or IP address (letters, digits, \
                 '.', '-', ':', starting with a letter or digit), like 10.0.0.31"
            ),
        );
        return None;
    }
    Some(text.to_owned())
}

fn port(value: &Checked<u32>, place: &str, problems: &mut Problems) -> Option<u16> {
    match value {
        Ok(n) if (1..=u32::from(u16::MAX)).contains(n) => u16::try_from(*n).ok(),
        Ok(n) => {
            problems.push_once(
                place,
                format!("invalid port {n}: a port from 1 to 65535 (IPMI's is 623)"),
            );
            None
        }
        Err(message) => {
            problems.push_once(place, message.clone());
            None
        }
    }
}

fn cipher_suite(value: &Checked<u32>, place: &str, problems: &mut Problems) -> Option<u8> {
    match value {
        Ok(n) if CIPHER_SUITES.contains(n) => u8::try_from(*n).ok(),
        Ok(n) => {
            problems.push_once(
                place,
                format!(
                    "invalid cipher_suite {n}: leave it out for 17 (HMAC-SHA256, AES-128), or \
                     give 3 (HMAC-SHA1, AES-128) for an older BMC; suites without \
                     authentication or encryption are never sent"
                ),
            );
            None
        }
        Err(message) => {
            problems.push_once(place, message.clone());
            None
        }
    }
}
