//! Redfish's configuration (SPEC §4.10, `docs/drivers.md`): the BMC's `endpoint`, the `system`
//! driven, the credentials (`username`, and where the password is), and how the BMC's
//! certificate is trusted (`ca_file`, `tls_fingerprint` or `insecure`, one choice). Pure: no I/O;
//! the CA file is read when the driver is built.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::power::fields::{self, Fields, Kind, PASSWORD, SecretSource};

/// How the BMC's certificate is trusted: one choice of three fields.
const TRUST: &[&str] = &["ca_file", "tls_fingerprint", "insecure"];

pub const KIND: Kind = Kind {
    name: "redfish",
    shown: "redfish",
    fields: &[
        "endpoint",
        "system",
        "username",
        "password_file",
        "password_env",
        "ca_file",
        "tls_fingerprint",
        "insecure",
    ],
    choices: &[PASSWORD, TRUST],
};

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

/// A redfish driver from its fields.
pub fn read(fields: &mut Fields<'_, '_>) -> Option<RedfishDriver> {
    let endpoint = fields.required(
        "endpoint",
        "the BMC's URL, like https://10.0.0.21",
        endpoint,
    );
    let system = fields.optional("system", system);
    let username = fields::username(fields);
    if let Some(name) = &username
        && name.contains(':')
    {
        fields.reject(
            "username",
            format!(
                "invalid username {name:?}: a Redfish username holds no ':' (basic auth could not \
                 carry it)"
            ),
        );
    }
    let password = fields::password(fields);
    let ca_file = fields.optional("ca_file", |text| {
        fields::path(text, "the CA certificate (PEM)")
    });
    let fingerprint = fields.optional("tls_fingerprint", str::parse);
    let insecure = fields.optional("insecure", |text| fields::boolean("insecure", text));
    trust_choice(fields, insecure == Some(Some(true)));
    if let (Some(endpoint), Some(None | Some(false))) = (&endpoint, insecure)
        && endpoint.starts_with("http://")
    {
        fields.refuse(
            "endpoint",
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
        insecure: insecure?.unwrap_or(false),
    })
}

/// SPEC §4.10: `ca_file`, `tls_fingerprint` and `insecure` are one choice of how the BMC's
/// certificate is trusted: an entry that gives two of them is refused, since one would be
/// ignored (a fingerprint accepts its one certificate and nothing else).
fn trust_choice(fields: &mut Fields<'_, '_>, insecure: bool) {
    let (ca_file, fingerprint) = (fields.given("ca_file"), fields.given("tls_fingerprint"));
    if ca_file && insecure {
        fields.clash(
            "ca_file",
            "both ca_file and insecure: true: insecure accepts any certificate, so the CA file is \
             never used; keep ca_file (verified TLS; a self-signed BMC's own certificate may go \
             there) or insecure",
        );
    }
    if fingerprint && ca_file {
        fields.clash(
            "ca_file",
            "both ca_file and tls_fingerprint: the fingerprint accepts exactly one certificate, \
             so the CA file is never used; keep one (the BMC's own certificate may go in ca_file \
             too)",
        );
    }
    if fingerprint && insecure {
        fields.clash(
            "tls_fingerprint",
            "both tls_fingerprint and insecure: true: insecure accepts any certificate, so the \
             fingerprint is never checked; keep tls_fingerprint",
        );
    }
}

/// Text fleet puts in a request line: not empty, no white space or control character.
fn token(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `https://host[:port]`, without a path, a query or credentials; a trailing `/` is dropped.
fn endpoint(text: &str) -> Result<String, String> {
    let trimmed = text.trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"));
    let why = match rest {
        _ if !token(text) => "it is empty or holds white space",
        None => "it is not an https:// (or http://) URL",
        Some(rest) if rest.contains('@') => {
            "it holds credentials (give them as username and password_file)"
        }
        Some("") => "it has no host",
        Some(rest) if rest.contains(['/', '?', '#']) => {
            "it has a path or a query (the system's path goes in system)"
        }
        Some(_) => return Ok(trimmed.to_owned()),
    };
    // Never the text itself when it holds credentials: no password in any message.
    let shown = if text.contains('@') {
        "endpoint".to_owned()
    } else {
        format!("endpoint {text:?}")
    };
    Err(format!(
        "invalid {shown}: {why}; the BMC's URL is https://host[:port], like https://10.0.0.21 \
         (http:// only with insecure: true, for a test BMC)"
    ))
}

/// A ComputerSystem's path under `/redfish/v1/`, without `..`, a query or a fragment.
fn system(text: &str) -> Result<String, String> {
    let path = text.trim_end_matches('/');
    let valid = token(text)
        && path.len() > "/redfish/v1/".len()
        && path.starts_with("/redfish/v1/")
        && !path.contains(['?', '#'])
        && !path.split('/').any(|segment| segment == "..");
    if !valid {
        return Err(format!(
            "invalid system {text:?}: the ComputerSystem's path under /redfish/v1/, like \
             /redfish/v1/Systems/1; leave it out for the BMC's only system"
        ));
    }
    Ok(path.to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What `openssl x509 -noout -fingerprint -sha256` prints (after `sha256:`), and its bytes.
    const OPENSSL_FORM: &str = "6D:40:AE:D7:B3:D4:CC:42:97:26:97:90:0D:0A:7C:77:CF:2E:D7:30:BD:BD:D1:AD:4C:19:42:F6:09:25:85:15";
    const LOWER_FORM: &str = "6d40aed7b3d4cc42972697900d0a7c77cf2ed730bdbdd1ad4c1942f609258515";

    #[test]
    fn tls_fingerprints_are_sha256_and_64_hex_digits_with_or_without_colons() {
        let want = format!("sha256:{LOWER_FORM}");
        for good in [
            format!("sha256:{OPENSSL_FORM}"),
            format!("SHA256:{OPENSSL_FORM}"),
            format!("sha256:{LOWER_FORM}"),
            format!("sha256:{}", LOWER_FORM.to_uppercase()),
        ] {
            let parsed: TlsFingerprint = good.parse().unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(parsed.to_string(), want, "{good}");
        }
        let long = "a".repeat(100_000);
        for (bad, why) in [
            (OPENSSL_FORM.to_string(), "it does not start with sha256:"),
            (
                format!("sha1:{OPENSSL_FORM}"),
                "it does not start with sha256:",
            ),
            (String::new(), "it does not start with sha256:"),
            ("sha256:".to_string(), "it is not 64 hex digits"),
            (
                format!("sha256:{}", &LOWER_FORM[1..]),
                "it is not 64 hex digits",
            ),
            (format!("sha256:{LOWER_FORM}0"), "it is not 64 hex digits"),
            (
                format!("sha256:{}", &OPENSSL_FORM[3..]),
                "it is not 64 hex digits",
            ),
            (format!("sha256:{OPENSSL_FORM}:"), "it is not 64 hex digits"),
            (
                format!("sha256:{}", OPENSSL_FORM.replacen(':', "", 1)),
                "it is not 64 hex digits",
            ),
            (
                format!("sha256:{}", LOWER_FORM.replace('d', "g")),
                "it is not 64 hex digits",
            ),
            (
                format!("sha256:{}é", &LOWER_FORM[2..]),
                "it is not 64 hex digits",
            ),
            (format!("sha256:{long}"), "it is not 64 hex digits"),
            (
                format!("sha256:{}", ":".repeat(100_000)),
                "it is not 64 hex digits",
            ),
        ] {
            let err = bad.parse::<TlsFingerprint>().expect_err(&bad);
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(
                err.ends_with("as `openssl x509 -noout -fingerprint -sha256` prints it"),
                "{err}"
            );
            // A value pasted whole is not repeated back.
            assert!(err.len() < 400, "{} bytes: {err}", err.len());
        }
        // It travels in a request as its canonical text.
        let parsed: TlsFingerprint = want.parse().expect("canonical");
        let json = serde_json::to_string(&parsed).expect("serializes");
        assert_eq!(json, format!("\"{want}\""));
        assert_eq!(
            serde_json::from_str::<TlsFingerprint>(&json).ok(),
            Some(parsed)
        );
    }
}
