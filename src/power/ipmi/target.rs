//! The BMC an [`Ipmi`](super::Ipmi) drives, and the checks that refuse what `ipmitool` would
//! misread: pure, no I/O.

use crate::power::action::Secret;

/// IPMI's limit on a user name (IPMI 2.0 §22.28: 16 bytes).
pub(super) const MAX_USERNAME: usize = 16;
/// IPMI 2.0's limit on a password (20 bytes); `ipmitool -f` reads no more.
const MAX_PASSWORD: usize = 20;
/// The cipher suites fleet sends: 17 (HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128), the default and
/// the only one OpenBMC offers, and 3 (HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) for older BMCs.
/// Suites without authentication or encryption (0, 1, 2, 6, …) are never sent.
pub(super) const SUITES: [u8; 2] = [17, 3];

/// One BMC reached over IPMI 2.0 LAN+ (SPEC §4.10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpmiTarget {
    /// A host name or an IP address (`10.0.0.31`, `bmc-7.rack`).
    pub host: String,
    /// The RMCP+ UDP port, 623 unless the BMC says otherwise.
    pub port: u16,
    pub username: String,
    /// Written to a file of mode 0600 for each call, never passed as an argument.
    pub password: Secret,
    /// `None`: 17, with a logged fallback to 3 when the BMC refuses 17. `Some(s)`: `s` only.
    pub cipher_suite: Option<u8>,
}

impl IpmiTarget {
    /// The IPMI LAN port (RMCP's registered port).
    pub const DEFAULT_PORT: u16 = 623;
    /// The suite sent when none is configured.
    pub const DEFAULT_CIPHER_SUITE: u8 = 17;
    /// The suite tried once when the BMC refuses the default (and none is configured).
    pub const FALLBACK_CIPHER_SUITE: u8 = 3;

    /// A target on the default port with the default cipher suite.
    pub fn new(host: impl Into<String>, username: impl Into<String>, password: Secret) -> Self {
        IpmiTarget {
            host: host.into(),
            port: Self::DEFAULT_PORT,
            username: username.into(),
            password,
            cipher_suite: None,
        }
    }

    /// The BMC's name in errors, logs and metrics: `ipmi HOST:PORT`, never a credential.
    pub fn name(&self) -> String {
        format!("ipmi {}:{}", self.host, self.port)
    }

    /// Refuses a target `ipmitool` could not use, or would read as something else (a host that
    /// starts with `-` is an option to it), with the field and what to do.
    pub fn check(&self) -> Result<(), TargetError> {
        let host = &self.host;
        if host.is_empty() {
            return Err(TargetError::EmptyHost);
        }
        let host_ok = host.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[')
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        if !host_ok {
            return Err(TargetError::Host { host: host.clone() });
        }
        if self.port == 0 {
            return Err(TargetError::Port);
        }
        let user = &self.username;
        if user.is_empty() {
            return Err(TargetError::EmptyUsername);
        }
        if user.len() > MAX_USERNAME || user.chars().any(char::is_control) {
            return Err(TargetError::Username { len: user.len() });
        }
        let password = self.password.expose();
        if password.is_empty() {
            return Err(TargetError::EmptyPassword);
        }
        if password.len() > MAX_PASSWORD {
            return Err(TargetError::PasswordTooLong {
                len: password.len(),
            });
        }
        if password.contains(['\n', '\r', '\0']) {
            return Err(TargetError::PasswordLine);
        }
        match self.cipher_suite {
            Some(suite) if !SUITES.contains(&suite) => Err(TargetError::CipherSuite { suite }),
            _ => Ok(()),
        }
    }
}

/// Why an IPMI target cannot be used. No message carries the password, or any part of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("ipmi: host is empty: give the BMC's address or host name")]
    EmptyHost,
    #[error(
        "ipmi: host {host:?} is not a host name or an IP address (letters, digits, '.', '-', ':', \
         starting with a letter or digit)"
    )]
    Host { host: String },
    #[error("ipmi: port 0 is no port: leave it out for 623, or give the BMC's RMCP+ port")]
    Port,
    #[error("ipmi: username is empty: give the BMC user fleet logs in as")]
    EmptyUsername,
    #[error(
        "ipmi: the username ({len} bytes) is not one IPMI takes: at most 16 bytes, no control \
         characters"
    )]
    Username { len: usize },
    #[error("ipmi: the password is empty: check the password file or variable")]
    EmptyPassword,
    #[error(
        "ipmi: the password is {len} bytes, and IPMI 2.0 takes at most 20: check the password \
         file or variable"
    )]
    PasswordTooLong { len: usize },
    #[error(
        "ipmi: the password holds a line break or a NUL, which ipmitool's password file cannot \
         carry: check the password file or variable"
    )]
    PasswordLine,
    #[error(
        "ipmi: cipher suite {suite} is not one fleet sends: leave it out for 17 \
         (HMAC-SHA256, AES-128), or give 3 (HMAC-SHA1, AES-128) for an older BMC"
    )]
    CipherSuite { suite: u8 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> IpmiTarget {
        IpmiTarget::new("10.0.0.31", "admin", Secret::new("s3cret-pass"))
    }

    #[test]
    fn a_plain_target_takes_the_defaults_and_passes() {
        let t = target();
        assert_eq!((t.port, t.cipher_suite), (623, None));
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.name(), "ipmi 10.0.0.31:623");
    }

    /// A change to a valid target.
    type Change = fn(&mut IpmiTarget);

    #[test]
    fn every_refusal_names_its_field() {
        let cases: [(Change, TargetError); 11] = [
            (|t| t.host.clear(), TargetError::EmptyHost),
            (
                |t| t.host = "-oProxyCommand".into(),
                TargetError::Host {
                    host: "-oProxyCommand".into(),
                },
            ),
            (
                |t| t.host = "a b".into(),
                TargetError::Host { host: "a b".into() },
            ),
            (|t| t.port = 0, TargetError::Port),
            (|t| t.username.clear(), TargetError::EmptyUsername),
            (
                |t| t.username = "a".repeat(17),
                TargetError::Username { len: 17 },
            ),
            (|t| t.password = Secret::new(""), TargetError::EmptyPassword),
            (
                |t| t.password = Secret::new("x".repeat(21)),
                TargetError::PasswordTooLong { len: 21 },
            ),
            (
                |t| t.password = Secret::new("two\nlines"),
                TargetError::PasswordLine,
            ),
            (
                |t| t.cipher_suite = Some(0),
                TargetError::CipherSuite { suite: 0 },
            ),
            (
                |t| t.cipher_suite = Some(1),
                TargetError::CipherSuite { suite: 1 },
            ),
        ];
        for (change, want) in cases {
            let mut t = target();
            change(&mut t);
            assert_eq!(t.check(), Err(want.clone()), "{want}");
        }
    }

    #[test]
    fn the_suites_fleet_sends_pass_and_addresses_of_every_form_pass() {
        for suite in [3, 17] {
            let t = IpmiTarget {
                cipher_suite: Some(suite),
                ..target()
            };
            assert_eq!(t.check(), Ok(()), "suite {suite}");
        }
        for host in ["bmc-7.rack", "127.0.0.1", "fe80::1", "[::1]"] {
            let t = IpmiTarget {
                host: host.into(),
                ..target()
            };
            assert_eq!(t.check(), Ok(()), "{host}");
        }
    }

    #[test]
    fn no_refusal_shows_the_password() {
        let secret = "x".repeat(21);
        let t = IpmiTarget {
            password: Secret::new(secret.clone()),
            ..target()
        };
        let shown = format!("{} {t:?}", t.check().expect_err("too long"));
        assert!(!shown.contains(&secret), "{shown}");
    }
}
