//! The Redfish BMC a slot's driver talks to, as configured, and its validation. `check` is pure
//! (it reads no file), so the configuration can call it at start and on reload; the CA file is
//! read when the driver is built (`Redfish::new`).
//!
//! The rules, each with its own error:
//! - `endpoint` is `https://host[:port]` (a trailing `/` is fine); no path, query or credentials
//!   in it (the system path goes in `system`, credentials in `username` and the password).
//! - `http://` only with `insecure: true`: basic auth over plain HTTP shows the password to the
//!   network, so it is for a test BMC on loopback and is said so at WARN.
//! - `ca_file`, `tls_fingerprint` and `insecure: true` are one choice: two of them are refused,
//!   since one would be ignored.
//! - `system`, when given, is a path under `/redfish/v1/` with no query, no `..`, no whitespace.
//! - `username` is not empty and has no `:` (basic auth could not carry it) nor control
//!   characters.

use std::path::PathBuf;

use rustls::pki_types::ServerName;

use crate::power::action::Secret;
use crate::power::redfish::config::TlsFingerprint;
use crate::power::redfish::wire::SERVICE_ROOT;

/// A Redfish BMC as the configuration names it. Its `Debug` shows no password, nor
/// credentials written into the endpoint.
#[derive(Clone)]
pub struct RedfishTarget {
    /// `https://host[:port]`, or `http://` with `insecure` for a test BMC.
    pub endpoint: String,
    /// The ComputerSystem driven, like `/redfish/v1/Systems/1`; `None` drives the single member
    /// of `/redfish/v1/Systems` (a BMC with several refuses, naming them).
    pub system: Option<String>,
    pub username: String,
    pub password: Secret,
    /// The CA that signed the BMC's certificate (PEM), or the certificate the BMC presents
    /// (pinned: trusted as itself, SPEC §4.10); `None` trusts the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Exactly the certificate with this SHA-256, whatever its name, dates or issuer.
    pub tls_fingerprint: Option<TlsFingerprint>,
    /// Accept any certificate, or plain `http://`; logged once at WARN. A self-signed BMC is
    /// better pinned (`ca_file`, `tls_fingerprint`).
    pub insecure: bool,
}

impl std::fmt::Debug for RedfishTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedfishTarget")
            .field("endpoint", &without_credentials(&self.endpoint))
            .field("system", &self.system)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("ca_file", &self.ca_file)
            .field("tls_fingerprint", &self.tls_fingerprint)
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// Why a Redfish target cannot be used. Every message names the field and says what to write.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("redfish endpoint {endpoint:?}: {why}; write it as https://host[:port]")]
    Endpoint { endpoint: String, why: &'static str },
    #[error(
        "redfish endpoint {endpoint}: plain http shows the BMC password to the network; use \
         https://, or set insecure: true for a test BMC"
    )]
    PlainHttp { endpoint: String },
    #[error(
        "redfish endpoint {endpoint}: insecure: true accepts any certificate, so ca_file {} \
         would be ignored; keep one of the two", ca_file.display()
    )]
    InsecureWithCa { endpoint: String, ca_file: PathBuf },
    #[error(
        "redfish endpoint {endpoint}: tls_fingerprint accepts exactly one certificate, so \
         {other} would be ignored; keep one of the two"
    )]
    FingerprintWith {
        endpoint: String,
        other: &'static str,
    },
    #[error(
        "redfish system {system:?}: {why}; write the ComputerSystem's path, like \
         /redfish/v1/Systems/1, or leave it out to drive the BMC's only system"
    )]
    System { system: String, why: &'static str },
    #[error("redfish username {username:?}: {why}; set the BMC user's name")]
    Username { username: String, why: &'static str },
    #[error("redfish ca_file {}: cannot be read; check the path and its permissions", path.display())]
    CaFileUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "redfish ca_file {}: {why}; give the PEM certificate of the CA that signed the BMC's \
         certificate, or the BMC's own certificate", path.display()
    )]
    CaFileBad { path: PathBuf, why: String },
    #[error(
        "redfish endpoint {endpoint}: this system has no CA certificates to verify it with; \
         give ca_file, or install the system's CA certificates"
    )]
    NoSystemRoots { endpoint: String },
}

/// The endpoint taken apart, for the transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The endpoint as configured without a trailing `/`: how errors and the audit name the BMC.
    pub name: String,
    pub tls: bool,
    /// The host to connect to (an IPv6 address without its brackets).
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written, for the `Host` header.
    pub authority: String,
    /// The name the certificate must carry (a DNS name or an IP address).
    pub server_name: ServerName<'static>,
}

impl RedfishTarget {
    /// Validates the target without reading any file; `Redfish::new` calls it too.
    pub fn check(&self) -> Result<(), TargetError> {
        self.parse().map(|_| ())
    }

    pub(crate) fn parse(&self) -> Result<(Endpoint, Option<String>), TargetError> {
        let endpoint = endpoint(&self.endpoint).map_err(|why| TargetError::Endpoint {
            endpoint: without_credentials(&self.endpoint),
            why,
        })?;
        if !endpoint.tls && !self.insecure {
            return Err(TargetError::PlainHttp {
                endpoint: endpoint.name,
            });
        }
        if let (true, Some(ca_file)) = (self.insecure, &self.ca_file) {
            return Err(TargetError::InsecureWithCa {
                endpoint: endpoint.name,
                ca_file: ca_file.clone(),
            });
        }
        let beside = match (self.insecure, &self.ca_file) {
            (true, _) => Some("insecure: true"),
            (false, Some(_)) => Some("ca_file"),
            (false, None) => None,
        };
        if let (Some(_), Some(other)) = (&self.tls_fingerprint, beside) {
            return Err(TargetError::FingerprintWith {
                endpoint: endpoint.name,
                other,
            });
        }
        let system = self
            .system
            .as_deref()
            .map(|system| {
                system_path(system).map_err(|why| TargetError::System {
                    system: system.to_string(),
                    why,
                })
            })
            .transpose()?;
        username(&self.username).map_err(|why| TargetError::Username {
            username: self.username.clone(),
            why,
        })?;
        Ok((endpoint, system))
    }
}

fn endpoint(text: &str) -> Result<Endpoint, &'static str> {
    let trimmed = text.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err("it is empty");
    }
    if text.ends_with("://") {
        return Err("it has no host");
    }
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it holds whitespace");
    }
    let uri: hyper::Uri = trimmed.parse().map_err(|_| "it is not a URL")?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        Some(_) => return Err("its scheme is neither https nor http"),
        None => return Err("it has no scheme"),
    };
    let authority = uri.authority().ok_or("it has no host")?;
    if authority.as_str().contains('@') {
        return Err("it holds credentials (give them as username and password_file)");
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("it has a path or a query (the system path goes in system)");
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    if host.is_empty() {
        return Err("it has no host");
    }
    // The URL parser takes any digits as a port, and drops one past 65535 from `port()`: read
    // what follows the host here, so such a port is refused rather than taken as the default.
    let port = match (&authority.as_str()[authority.host().len()..], tls) {
        ("", true) => 443,
        ("", false) => 80,
        (given, _) => match given.trim_start_matches(':').parse::<u16>() {
            Ok(0) | Err(_) => return Err("its port is not a number from 1 to 65535"),
            Ok(port) => port,
        },
    };
    let server_name =
        ServerName::try_from(host.to_string()).map_err(|_| "its host is not a DNS name or IP")?;
    Ok(Endpoint {
        name: trimmed.to_string(),
        tls,
        host: host.to_string(),
        port,
        authority: authority.as_str().to_string(),
        server_name,
    })
}

/// The endpoint as it may be shown: credentials written into it (refused) are cut out, so no
/// error or log line carries them.
fn without_credentials(text: &str) -> String {
    let (scheme, rest) = text.split_once("://").unwrap_or(("", text));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<credentials>{}", &rest[at..]),
        None => text.to_string(),
    }
}

fn system_path(system: &str) -> Result<String, &'static str> {
    let path = system.trim_end_matches('/');
    if !path.starts_with(SERVICE_ROOT) || path.len() == SERVICE_ROOT.len() {
        return Err("it is not a path under /redfish/v1/");
    }
    if path
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#'))
    {
        return Err("it holds whitespace, a query or a fragment");
    }
    if path.split('/').any(|segment| segment == "..") {
        return Err("it holds ..");
    }
    Ok(path.to_string())
}

fn username(username: &str) -> Result<(), &'static str> {
    if username.is_empty() {
        return Err("is empty");
    }
    if username.contains(':') {
        return Err("holds ':', which basic auth cannot carry");
    }
    if username.chars().any(char::is_control) {
        return Err("holds a control character");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(endpoint: &str) -> RedfishTarget {
        RedfishTarget {
            endpoint: endpoint.to_string(),
            system: None,
            username: "admin".to_string(),
            password: Secret::new("pw-never-shown"),
            ca_file: None,
            tls_fingerprint: None,
            insecure: false,
        }
    }

    #[test]
    fn endpoints_are_taken_apart() {
        let rows: [(&str, bool, &str, u16, &str); 5] = [
            ("https://10.0.0.21", true, "10.0.0.21", 443, "10.0.0.21"),
            (
                "https://bmc.rack:8443/",
                true,
                "bmc.rack",
                8443,
                "bmc.rack:8443",
            ),
            (
                "http://127.0.0.1:8000",
                false,
                "127.0.0.1",
                8000,
                "127.0.0.1:8000",
            ),
            ("https://[::1]:9443", true, "::1", 9443, "[::1]:9443"),
            ("http://bmc", false, "bmc", 80, "bmc"),
        ];
        for (text, tls, host, port, authority) in rows {
            let got = endpoint(text).expect(text);
            assert_eq!(
                (got.tls, got.host.as_str(), got.port, got.authority.as_str()),
                (tls, host, port, authority),
                "{text}"
            );
            assert_eq!(got.name, text.trim_end_matches('/'));
        }
    }

    #[test]
    fn bad_endpoints_say_why() {
        let rows = [
            ("", "it is empty"),
            ("10.0.0.21", "it has no scheme"),
            ("ftp://10.0.0.21", "its scheme is neither https nor http"),
            ("https://admin:pw@10.0.0.21", "it holds credentials"),
            ("https://10.0.0.21/redfish/v1", "it has a path or a query"),
            ("https://10.0.0.21?x=1", "it has a path or a query"),
            (
                "https://10.0.0.21:0",
                "its port is not a number from 1 to 65535",
            ),
            (
                "https://10.0.0.21:99999",
                "its port is not a number from 1 to 65535",
            ),
            (
                "https://10.0.0.21:",
                "its port is not a number from 1 to 65535",
            ),
            ("https://bmc rack", "it holds whitespace"),
            ("https://", "it has no host"),
            ("https:///redfish", "it is not a URL"),
        ];
        for (text, want) in rows {
            let got = endpoint(text).expect_err(text);
            assert!(got.starts_with(want), "{text}: {got}");
        }
    }

    #[test]
    fn plain_http_needs_insecure() {
        let err = target("http://127.0.0.1:8000").check().expect_err("http");
        assert_eq!(
            err.to_string(),
            "redfish endpoint http://127.0.0.1:8000: plain http shows the BMC password to the \
             network; use https://, or set insecure: true for a test BMC"
        );
        let insecure = RedfishTarget {
            insecure: true,
            ..target("http://127.0.0.1:8000")
        };
        assert!(insecure.check().is_ok());
    }

    #[test]
    fn insecure_and_a_ca_file_are_refused_together() {
        let both = RedfishTarget {
            insecure: true,
            ca_file: Some(PathBuf::from("/etc/fleet/ca.pem")),
            ..target("https://10.0.0.21")
        };
        assert!(matches!(
            both.check(),
            Err(TargetError::InsecureWithCa { .. })
        ));
    }

    #[test]
    fn a_fingerprint_is_refused_beside_a_ca_file_or_insecure() {
        let pinned = RedfishTarget {
            tls_fingerprint: Some(TlsFingerprint([7; 32])),
            ..target("https://10.0.0.21")
        };
        assert!(pinned.check().is_ok());
        let with_ca = RedfishTarget {
            ca_file: Some(PathBuf::from("/etc/fleet/ca.pem")),
            ..pinned.clone()
        };
        assert_eq!(
            with_ca.check().map_err(|e| e.to_string()),
            Err(
                "redfish endpoint https://10.0.0.21: tls_fingerprint accepts exactly one \
                 certificate, so ca_file would be ignored; keep one of the two"
                    .to_string()
            )
        );
        let insecure = RedfishTarget {
            insecure: true,
            ..pinned
        };
        assert!(matches!(
            insecure.check(),
            Err(TargetError::FingerprintWith {
                other: "insecure: true",
                ..
            })
        ));
    }

    #[test]
    fn system_paths() {
        for (system, want) in [
            ("/redfish/v1/Systems/1", Ok("/redfish/v1/Systems/1")),
            ("/redfish/v1/Systems/1/", Ok("/redfish/v1/Systems/1")),
            ("/redfish/v1/", Err("it is not a path under /redfish/v1/")),
            ("Systems/1", Err("it is not a path under /redfish/v1/")),
            (
                "/redfish/v1/Systems/1?x",
                Err("it holds whitespace, a query or a fragment"),
            ),
            (
                "/redfish/v1/Systems/a b",
                Err("it holds whitespace, a query or a fragment"),
            ),
            ("/redfish/v1/../admin", Err("it holds ..")),
        ] {
            assert_eq!(system_path(system).as_deref(), want.as_deref(), "{system}");
        }
        let bad = RedfishTarget {
            system: Some("Systems/1".to_string()),
            ..target("https://10.0.0.21")
        };
        assert!(matches!(bad.check(), Err(TargetError::System { .. })));
    }

    #[test]
    fn usernames() {
        for (name, ok) in [
            ("admin", true),
            ("", false),
            ("a:b", false),
            ("a\nb", false),
        ] {
            let t = RedfishTarget {
                username: name.to_string(),
                ..target("https://10.0.0.21")
            };
            assert_eq!(t.check().is_ok(), ok, "{name:?}");
        }
    }

    #[test]
    fn no_error_shows_the_password() {
        let t = RedfishTarget {
            username: "".to_string(),
            ..target("https://admin:pw-never-shown@10.0.0.21")
        };
        let err = t.check().expect_err("bad");
        let shown = format!("{err} {err:?} {t:?}");
        assert!(!shown.contains("pw-never-shown"), "{shown}");
        assert!(shown.contains("https://<credentials>@10.0.0.21"), "{shown}");
    }
}
