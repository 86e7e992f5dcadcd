//! A slot's power driver (SPEC §4.10): how fleet powers the slot's machine itself, without a
//! script. Wake-on-LAN, Redfish or IPMI, with the power-off optionally sent through the bench's
//! own agent. The file gives a group's defaults and a slot's overrides under `driver`;
//! `validate::driver` merges them field by field into the `Driver` of each slot.
//!
//! Pure data: no I/O. A driver travels in an operation's request to the operation wrapper, so it
//! is serialized; it holds where a password is (a file, an environment variable), never the
//! password itself, so the request, the logs and the views never carry one.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The port a Wake-on-LAN packet goes to when the broadcast address names none (the discard
/// port, which every WoL tool uses).
pub const WOL_PORT: u16 = 9;
/// Where a Wake-on-LAN packet goes when the file names no `broadcast`.
pub const DEFAULT_BROADCAST: &str = "255.255.255.255:9";
/// IPMI's RMCP+ port, when the file names none.
pub const IPMI_PORT: u16 = 623;
/// The IPMI 2.0 cipher suites fleet sends (`ipmitool -C`): 17 (HMAC-SHA256, AES-128), the
/// default and OpenBMC's only one, and 3 (HMAC-SHA1, AES-128) for older BMCs. Suites without
/// authentication or encryption are never sent.
pub const CIPHER_SUITES: [u32; 2] = [17, 3];

/// How a slot's machine is powered, and how its power-off is sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Driver {
    pub kind: DriverKind,
    /// `agent`: the power-off goes through the bench's own `fleet agent` (SPEC §4.10); required
    /// for Wake-on-LAN, which has no off.
    #[serde(default)]
    pub off: OffBy,
}

/// The protocol that powers the machine on (and off, unless `off: agent`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DriverKind {
    Wol(WolDriver),
    Redfish(RedfishDriver),
    Ipmi(IpmiDriver),
}

/// Wake-on-LAN: magic packets to an address of the machine's own network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WolDriver {
    pub mac: Mac,
    /// A subnet-directed broadcast address or the machine's own address, with a port:
    /// broadcasts do not cross VLANs, so the address is the machine's, not the fleet's.
    pub broadcast: SocketAddr,
}

/// A Redfish BMC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedfishDriver {
    /// `https://host[:port]` (or `http://` for a BMC that serves no TLS, like an emulator).
    pub endpoint: String,
    /// The system's path (`/redfish/v1/Systems/1`); the BMC's only system when unset.
    pub system: Option<String>,
    pub username: String,
    pub password: SecretSource,
    /// The CA that signed the BMC's certificate, or the BMC's own certificate (pinned); the
    /// system's roots when unset.
    pub ca_file: Option<PathBuf>,
    /// Exactly the certificate with this SHA-256, and no other. A serde default, so a
    /// request written before the field reads as it did.
    #[serde(default)]
    pub tls_fingerprint: Option<TlsFingerprint>,
    /// Accept any certificate, only when the file says so (a self-signed BMC is better pinned,
    /// in `ca_file` or by `tls_fingerprint`).
    pub insecure: bool,
}

/// An IPMI 2.0 (LAN+) BMC.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpmiDriver {
    pub host: String,
    pub port: u16,
    pub username: String,
    pub password: SecretSource,
    /// The cipher suite (0 to 17); the driver's own default (17) when unset.
    pub cipher_suite: Option<u8>,
}

/// Where a password is: read when an operation runs, never written in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// A file whose first line is the password.
    File(PathBuf),
    /// An environment variable of `fleet serve` (and so of its operation wrapper).
    Env(String),
}

impl fmt::Display for SecretSource {
    /// Where, never what: `password_file /etc/fleet/bmc-password`, `password_env IPMI_PASS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "password_file {}", path.display()),
            SecretSource::Env(name) => write!(f, "password_env {name}"),
        }
    }
}

/// Who sends a power-off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffBy {
    /// The driver's own protocol.
    #[default]
    Driver,
    /// The bench's own agent, asked through the store (`fleet agent --power-off-command`).
    Agent,
}

impl Driver {
    /// The driver's `type`, as the file spells it.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }

    /// Where the driver's password is, for the check at start and on reload.
    pub fn password(&self) -> Option<&SecretSource> {
        match &self.kind {
            DriverKind::Wol(_) => None,
            DriverKind::Redfish(r) => Some(&r.password),
            DriverKind::Ipmi(i) => Some(&i.password),
        }
    }
}

impl DriverKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            DriverKind::Wol(_) => "wol",
            DriverKind::Redfish(_) => "redfish",
            DriverKind::Ipmi(_) => "ipmi",
        }
    }
}

/// A MAC address (EUI-48).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Mac(pub [u8; 6]);

impl FromStr for Mac {
    type Err = String;

    /// Six pairs of hex digits separated by `:` or `-` (`52:54:00:12:34:56`), in either case.
    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || {
            format!(
                "invalid MAC address {text:?}: six pairs of hex digits separated by ':' or '-', \
                 like 52:54:00:12:34:56"
            )
        };
        let separator = if text.contains('-') { '-' } else { ':' };
        let parts: Vec<&str> = text.split(separator).collect();
        if parts.len() != 6 {
            return Err(invalid());
        }
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(parts) {
            if part.len() != 2 || !part.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(invalid());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| invalid())?;
        }
        Ok(Mac(mac))
    }
}

impl TryFrom<String> for Mac {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<Mac> for String {
    fn from(mac: Mac) -> String {
        mac.to_string()
    }
}

impl fmt::Display for Mac {
    /// Lowercase, `:`-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The SHA-256 of a certificate's DER bytes: how `tls_fingerprint` pins the one certificate a
/// BMC presents (SPEC §4.10). Written `sha256:` and 64 hex digits, in either case, with or
/// without `:` between pairs (as `openssl x509 -noout -fingerprint -sha256` prints it); shown
/// as `sha256:` and 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TlsFingerprint(pub [u8; 32]);

impl FromStr for TlsFingerprint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let why = match text.get(..7) {
            Some(prefix) if prefix.eq_ignore_ascii_case("sha256:") => {
                match fingerprint_digits(&text[7..]) {
                    Some(bytes) => return Ok(TlsFingerprint(bytes)),
                    None => "it is not 64 hex digits (with or without ':' between pairs)",
                }
            }
            _ => "it does not start with sha256:",
        };
        // A value pasted whole (a PEM block, say) is not repeated in the message.
        let shown = if text.chars().count() <= 100 {
            format!("{text:?}")
        } else {
            format!("of {} characters", text.chars().count())
        };
        Err(format!(
            "invalid tls_fingerprint {shown}: {why}; write sha256: and the SHA-256 of the \
             certificate the BMC presents, like sha256:6D:40:AE:…:85:15 as `openssl x509 -noout \
             -fingerprint -sha256` prints it"
        ))
    }
}

/// 64 hex digits, or 32 pairs of them separated by `:`.
fn fingerprint_digits(text: &str) -> Option<[u8; 32]> {
    // 32 pairs and 31 colons at most: a longer value is refused before it is split.
    if text.len() > 95 {
        return None;
    }
    let pairs: Vec<&str> = if text.contains(':') {
        text.split(':').collect()
    } else if text.len() == 64 && text.is_ascii() {
        (0..32).map(|i| &text[2 * i..2 * i + 2]).collect()
    } else {
        return None;
    };
    if pairs.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(pairs) {
        if pair.len() != 2 || !pair.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(bytes)
}

impl TryFrom<String> for TlsFingerprint {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<TlsFingerprint> for String {
    fn from(fingerprint: TlsFingerprint) -> String {
        fingerprint.to_string()
    }
}

impl fmt::Display for TlsFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for TlsFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsFingerprint({self})")
    }
}

/// A Wake-on-LAN target: `host:port` or a bare address (port 9). An IPv6 address with a port
/// is written `[addr]:port`.
pub fn parse_broadcast(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, WOL_PORT));
    }
    Err(format!(
        "invalid broadcast {text:?}: an IP address with an optional port, like \
         192.168.1.255:9 (the subnet's broadcast address, or the machine's own)"
    ))
}
