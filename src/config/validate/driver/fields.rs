//! The values of one driver entry, each checked at the place it is written (SPEC §4.10): the
//! type, the off, and every protocol's fields. Pure: no I/O.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::driver::{CIPHER_SUITES, Mac, OffBy, TlsFingerprint, parse_broadcast};
use crate::config::raw::{Checked, RawDriver};
use crate::domain::name::check_env_name;

use super::super::Problems;

/// A driver as one entry of the file gives it, with the entry's place (`slots[2] (n1).driver`).
#[derive(Clone, Copy)]
pub(in crate::config::validate) struct Given<'a> {
    pub(in crate::config::validate) raw: &'a RawDriver,
    pub(in crate::config::validate) place: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Wol,
    Redfish,
    Ipmi,
}

pub(super) const TYPES: &str = "wol (Wake-on-LAN), redfish or ipmi";

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
    "tls_fingerprint",
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

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Wol => "wol",
            Kind::Redfish => "redfish",
            Kind::Ipmi => "ipmi",
        }
    }

    pub(super) fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Wol => WOL,
            Kind::Redfish => REDFISH,
            Kind::Ipmi => IPMI,
        }
    }
}

/// The names of the fields a raw driver gives (but `type`, `off` and `password`), in the file's
/// order.
pub(super) fn present(raw: &RawDriver) -> Vec<&'static str> {
    let fields = [
        ("mac", raw.mac.is_some()),
        ("broadcast", raw.broadcast.is_some()),
        ("endpoint", raw.endpoint.is_some()),
        ("system", raw.system.is_some()),
        ("username", raw.username.is_some()),
        ("password_file", raw.password_file.is_some()),
        ("password_env", raw.password_env.is_some()),
        ("ca_file", raw.ca_file.is_some()),
        ("tls_fingerprint", raw.tls_fingerprint.is_some()),
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
    pub(super) fn push_once(&mut self, place: impl Into<String>, message: impl Into<String>) {
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

/// The values one entry gives, each checked at its own place.
pub(super) fn check_given(given: Given<'_>, problems: &mut Problems) {
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
    trust_choice(raw, place, problems);
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
    if let Some(v) = &raw.tls_fingerprint {
        tls_fingerprint(v, &at("tls_fingerprint"), problems);
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

/// SPEC §4.10: `ca_file`, `tls_fingerprint` and `insecure` are one choice of how the BMC's
/// certificate is trusted: an entry that gives two of them is refused, since one would be
/// ignored (a fingerprint accepts its one certificate and nothing else).
fn trust_choice(raw: &RawDriver, place: &str, problems: &mut Problems) {
    let insecure = raw.insecure == Some(true);
    if raw.ca_file.is_some() && insecure {
        problems.push_once(
            place,
            "both ca_file and insecure: true: insecure accepts any certificate, so the CA file is \
             never used; keep ca_file (verified TLS; a self-signed BMC's own certificate may go \
             there) or insecure",
        );
    }
    if raw.tls_fingerprint.is_some() && raw.ca_file.is_some() {
        problems.push_once(
            place,
            "both ca_file and tls_fingerprint: the fingerprint accepts exactly one certificate, \
             so the CA file is never used; keep one (the BMC's own certificate may go in ca_file \
             too)",
        );
    }
    if raw.tls_fingerprint.is_some() && insecure {
        problems.push_once(
            place,
            "both tls_fingerprint and insecure: true: insecure accepts any certificate, so the \
             fingerprint is never checked; keep tls_fingerprint",
        );
    }
}

pub(super) fn kind(text: &str, place: &str, problems: &mut Problems) -> Option<Kind> {
    let parsed = Kind::parse(text);
    if parsed.is_none() {
        problems.push_once(
            format!("{place}.type"),
            format!("invalid driver type {text:?}: the type is {TYPES}"),
        );
    }
    parsed
}

pub(super) fn off(text: &str, place: &str, problems: &mut Problems) -> Option<OffBy> {
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

pub(super) fn mac(text: &str, place: &str, problems: &mut Problems) -> Option<Mac> {
    match text.parse::<Mac>() {
        Ok(mac) => Some(mac),
        Err(message) => {
            problems.push_once(place, message);
            None
        }
    }
}

pub(super) fn broadcast(text: &str, place: &str, problems: &mut Problems) -> Option<SocketAddr> {
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
pub(super) fn token(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

pub(super) fn endpoint(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
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
        Some("") => Some("it has no host"),
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

pub(super) fn system(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
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

pub(super) fn username(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
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

pub(super) fn path(
    text: &str,
    place: &str,
    what: &str,
    problems: &mut Problems,
) -> Option<PathBuf> {
    if text.trim().is_empty() || text.contains('\0') {
        problems.push_once(
            place,
            format!("the path is empty or holds a NUL: give the path of {what}, like /etc/fleet/…"),
        );
        return None;
    }
    Some(PathBuf::from(text))
}

pub(super) fn tls_fingerprint(
    text: &str,
    place: &str,
    problems: &mut Problems,
) -> Option<TlsFingerprint> {
    match text.parse::<TlsFingerprint>() {
        Ok(fingerprint) => Some(fingerprint),
        Err(message) => {
            problems.push_once(place, message);
            None
        }
    }
}

pub(super) fn password_env(name: &str, place: &str, problems: &mut Problems) -> Option<String> {
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

pub(super) fn host(text: &str, place: &str, problems: &mut Problems) -> Option<String> {
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

pub(super) fn port(value: &Checked<u32>, place: &str, problems: &mut Problems) -> Option<u16> {
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

pub(super) fn cipher_suite(
    value: &Checked<u32>,
    place: &str,
    problems: &mut Problems,
) -> Option<u8> {
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
