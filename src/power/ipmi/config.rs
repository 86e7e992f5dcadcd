//! IPMI's configuration (SPEC §4.10, `docs/drivers.md`): the BMC's `host` and `port`, the
//! credentials (`username`, and where the password is), and the `cipher_suite`. Pure: no I/O.

use serde::{Deserialize, Serialize};

use super::target::{IpmiTarget, MAX_USERNAME, SUITES};
use crate::power::fields::{self, Fields, Kind, PASSWORD, SecretSource};

pub const KIND: Kind = Kind {
    name: "ipmi",
    shown: "ipmi",
    fields: &[
        "host",
        "port",
        "username",
        "password_file",
        "password_env",
        "cipher_suite",
    ],
    choices: &[PASSWORD],
};

/// An IPMI 2.0 (LAN+) BMC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpmiDriver {
    pub host: String,
    pub port: u16,
    pub username: String,
    pub password: SecretSource,
    /// The cipher suite (17 or 3); the driver's own default (17, falling back to 3) when unset.
    pub cipher_suite: Option<u8>,
}

/// An ipmi driver from its fields.
pub fn read(fields: &mut Fields<'_, '_>) -> Option<IpmiDriver> {
    let host = fields.required("host", "the BMC's address, like 10.0.0.31", host);
    let port = fields.optional("port", port);
    let cipher_suite = fields.optional("cipher_suite", cipher_suite);
    let username = fields::username(fields);
    if let Some(name) = &username
        && name.len() > MAX_USERNAME
    {
        fields.reject(
            "username",
            format!("invalid username {name:?}: an IPMI username is at most 16 bytes"),
        );
    }
    let password = fields::password(fields);
    Some(IpmiDriver {
        host: host?,
        port: port?.unwrap_or(IpmiTarget::DEFAULT_PORT),
        username: username?,
        password: password?,
        cipher_suite: cipher_suite?,
    })
}

/// A host is an argument of ipmitool: one word of a host name or address, never an option.
fn host(text: &str) -> Result<String, String> {
    let valid = text.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if !valid {
        return Err(format!(
            "invalid host {text:?}: the BMC's host name or IP address (letters, digits, '.', '-', \
             ':', starting with a letter or digit), like 10.0.0.31"
        ));
    }
    Ok(text.to_owned())
}

fn port(text: &str) -> Result<u16, String> {
    let n = crate::units::count(text)?;
    u16::try_from(n)
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| format!("invalid port {n}: a port from 1 to 65535 (IPMI's is 623)"))
}

fn cipher_suite(text: &str) -> Result<u8, String> {
    let n = crate::units::count(text)?;
    match u8::try_from(n) {
        Ok(suite) if SUITES.contains(&suite) => Ok(suite),
        _ => Err(format!(
            "invalid cipher_suite {n}: leave it out for 17 (HMAC-SHA256, AES-128), or give 3 \
             (HMAC-SHA1, AES-128) for an older BMC; suites without authentication or encryption \
             are never sent"
        )),
    }
}
