//! Names and free-text fields that cross the trust boundary: bench names and hold reasons, and
//! the names of the environment variables an operation is given (its `env`, a driver's
//! `password_env`).
//!
//! Pure: no I/O. Every value that becomes part of a Redis key or a row is validated here once,
//! so a name that reached the store is known to be well-formed (SPEC §2.1).

use std::fmt;

/// The longest bench name: an RFC 1123 subdomain, as a Kubernetes node name is.
pub const MAX_NAME_LEN: usize = 253;
/// The longest label of a bench name (the part between dots).
pub const MAX_LABEL_LEN: usize = 63;
/// The longest hold reason, in characters. A reason is a note for a person, not a document.
pub const MAX_REASON_LEN: usize = 256;

/// A bench's name: an RFC 1123 subdomain (lowercase letters, digits, `-` and `.`, each
/// dot-separated label starting and ending with a letter or digit, at most 253 characters).
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct BenchName(String);

/// Why a name or a reason was refused; the message says what is valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    #[error("invalid bench name {0:?}: a name is empty")]
    Empty(String),
    #[error("invalid bench name {name:?}: {len} characters, at most {MAX_NAME_LEN} are allowed")]
    TooLong { name: String, len: usize },
    #[error(
        "invalid bench name {name:?}: the label {label:?} is longer than {MAX_LABEL_LEN} characters"
    )]
    LabelTooLong { name: String, label: String },
    #[error(
        "invalid bench name {name:?}: {why}; a bench name is an RFC 1123 subdomain \
         (lowercase letters, digits, '-' and '.', each label starting and ending with a letter or digit)"
    )]
    Syntax { name: String, why: &'static str },
}

impl InvalidName {
    /// The reason alone, for a message that names the thing itself.
    pub fn why(&self) -> String {
        match self {
            InvalidName::Empty(_) => "it is empty".to_owned(),
            InvalidName::TooLong { len, .. } => format!("it has {len} characters"),
            InvalidName::LabelTooLong { label, .. } => {
                format!("the label {label:?} is longer than {MAX_LABEL_LEN} characters")
            }
            InvalidName::Syntax { why, .. } => (*why).to_owned(),
        }
    }
}

/// Why a claim name was refused: said as a claim name, not a bench name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid claim name {name:?}: {why}; a claim name is one `fleet claims` lists, like \
     bench-01-18c2f9a4b10"
)]
pub struct InvalidClaimName {
    pub name: String,
    pub why: String,
}

impl BenchName {
    /// Validates `name` as an RFC 1123 subdomain.
    pub fn parse(name: &str) -> Result<Self, InvalidName> {
        if name.is_empty() {
            return Err(InvalidName::Empty(name.to_owned()));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(InvalidName::TooLong {
                name: name.to_owned(),
                len: name.len(),
            });
        }
        let syntax = |why| InvalidName::Syntax {
            name: name.to_owned(),
            why,
        };
        for label in name.split('.') {
            if label.is_empty() {
                return Err(syntax(
                    "it has an empty label (a leading, trailing or double dot)",
                ));
            }
            if label.len() > MAX_LABEL_LEN {
                return Err(InvalidName::LabelTooLong {
                    name: name.to_owned(),
                    label: label.to_owned(),
                });
            }
            if let Some(c) = label
                .chars()
                .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
            {
                return Err(if c.is_ascii_uppercase() {
                    syntax("it has an uppercase letter")
                } else {
                    syntax("it has a character other than a-z, 0-9, '-' and '.'")
                });
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(syntax("a label starts or ends with '-'"));
            }
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BenchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for BenchName {
    type Error = InvalidName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<BenchName> for String {
    fn from(n: BenchName) -> String {
        n.0
    }
}

impl std::str::FromStr for BenchName {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A group's name: an RFC 1123 label (a bench name without dots, at most 63 characters).
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct GroupName(String);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid group name {0:?}: a group name is an RFC 1123 label (1 to 63 lowercase letters, digits \
     and '-', starting and ending with a letter or digit)"
)]
pub struct InvalidGroupName(pub String);

impl GroupName {
    pub fn parse(name: &str) -> Result<Self, InvalidGroupName> {
        match BenchName::parse(name) {
            Ok(_) if !name.contains('.') && name.len() <= MAX_LABEL_LEN => {
                Ok(Self(name.to_owned()))
            }
            _ => Err(InvalidGroupName(name.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for GroupName {
    type Error = InvalidGroupName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<GroupName> for String {
    fn from(n: GroupName) -> String {
        n.0
    }
}

impl std::str::FromStr for GroupName {
    type Err = InvalidGroupName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A claim's name: an RFC 1123 subdomain, like a bench name (`<slot>-<attempt>-<suffix>` when
/// fleet makes one).
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct ClaimName(String);

impl ClaimName {
    pub fn parse(name: &str) -> Result<Self, InvalidClaimName> {
        BenchName::parse(name)
            .map(|n| Self(n.0))
            .map_err(|e| InvalidClaimName {
                name: name.to_owned(),
                why: e.why(),
            })
    }

    /// A claim name for `slot` with a `suffix` of lowercase letters and digits (at most 62 of
    /// them, so `.<suffix>` always fits a label): `<slot>-<suffix>` while that is a valid name
    /// (its last label within 63 characters), else `<slot>.<suffix>`; a slot name too long for
    /// either gives way to a short digest of itself. Always valid.
    pub fn for_slot(slot: &BenchName, suffix: &str) -> Self {
        let suffix: String = suffix
            .chars()
            .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            .take(MAX_LABEL_LEN - 1)
            .collect();
        let suffix = if suffix.is_empty() {
            "0".to_owned()
        } else {
            suffix
        };
        let slot = slot.as_str();
        for name in [format!("{slot}-{suffix}"), format!("{slot}.{suffix}")] {
            if let Ok(n) = Self::parse(&name) {
                return n;
            }
        }
        // FNV-1a of the slot name: stable, and short enough for any suffix.
        let digest = slot.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Self(format!("s{digest:x}.{suffix}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClaimName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ClaimName {
    type Error = InvalidClaimName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<ClaimName> for String {
    fn from(n: ClaimName) -> String {
        n.0
    }
}

impl std::str::FromStr for ClaimName {
    type Err = InvalidClaimName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Why a bench holds: free text for a person, one line, printable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reason(String);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReason {
    #[error("invalid hold reason: it is empty; say why the bench holds")]
    Empty,
    #[error("invalid hold reason: {0} characters, at most {MAX_REASON_LEN} are allowed")]
    TooLong(usize),
    /// A control character (tab, newline, escape, ...) or a bidirectional control (U+202E,
    /// ...), which a terminal or a page would act on rather than show (SPEC §2.1).
    #[error("invalid hold reason: {0}; a reason is one printable line")]
    Character(crate::domain::text::Unsafe),
}

impl Reason {
    pub fn parse(text: &str) -> Result<Self, InvalidReason> {
        if text.trim().is_empty() {
            return Err(InvalidReason::Empty);
        }
        let len = text.chars().count();
        if len > MAX_REASON_LEN {
            return Err(InvalidReason::TooLong(len));
        }
        if let Some(found) = crate::domain::text::first_unsafe(text) {
            return Err(InvalidReason::Character(found));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Reason {
    type Err = InvalidReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The prefix of the environment variables fleet sets for an operation itself.
pub const RESERVED_ENV_PREFIX: &str = "FLEET_";

/// The variables fleet sets for every operation; the file may not set them, nor any other name
/// with the same prefix (a later fleet may set more).
pub const RESERVED_ENV: [&str; 7] = [
    "FLEET_SLOT",
    "FLEET_GROUP",
    "FLEET_CLAIM",
    "FLEET_ATTEMPT",
    "FLEET_PROVIDER_ID",
    "FLEET_OPERATION",
    "FLEET_CONTROLLER",
];

/// Checks the name of an environment variable an operation is given (its `env`, or the one a
/// driver reads its password from): `[A-Za-z_][A-Za-z0-9_]*`, not starting with `FLEET_`, since
/// the operation's wrapper starts without fleet's own variables (one may hold Redis's password).
/// The error says what is valid.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Err(format!(
            "invalid environment variable name {name:?}: a name is a letter or '_' followed by \
             letters, digits and '_' (like BMC_HOST)"
        ));
    }
    if name.starts_with(RESERVED_ENV_PREFIX) {
        return Err(format!(
            "environment variable name {name:?} is reserved: fleet sets {} itself; choose a name \
             that does not start with {RESERVED_ENV_PREFIX}",
            RESERVED_ENV.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_shell_names_outside_the_fleet_prefix() {
        for good in ["BMC", "_x", "a1", "BMC_HOST", "fleet_lowercase", "FLEETX"] {
            assert_eq!(check_env_name(good), Ok(()), "{good}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "é", "A.B", "_-"] {
            let err = check_env_name(bad).expect_err(bad);
            assert!(err.contains("a letter or '_'"), "{bad:?}: {err}");
        }
        for reserved in ["FLEET_SLOT", "FLEET_OPERATION", "FLEET_ANYTHING", "FLEET_"] {
            let err = check_env_name(reserved).expect_err(reserved);
            assert!(err.contains("is reserved"), "{reserved}: {err}");
            assert!(err.contains("FLEET_PROVIDER_ID"), "{reserved}: {err}");
        }
    }

    #[test]
    fn the_reason_alone_names_what_is_wrong_without_the_name() {
        let long_label = "a".repeat(64);
        for (input, why) in [
            ("", "it is empty".to_owned()),
            (&*"a".repeat(254), "it has 254 characters".to_owned()),
            (
                &*long_label,
                format!("the label {long_label:?} is longer than 63 characters"),
            ),
        ] {
            assert_eq!(BenchName::parse(input).unwrap_err().why(), why, "{input:?}");
        }
        let e = BenchName::parse("Bench").unwrap_err();
        assert!(matches!(e, InvalidName::Syntax { .. }), "{e:?}");
        let InvalidName::Syntax { why, .. } = &e else {
            unreachable!()
        };
        assert_eq!(e.why(), *why);
        assert!(!why.is_empty());
        // The claim name's error carries the same reason, said of a claim name.
        let claim = ClaimName::parse("Bench").unwrap_err().to_string();
        assert!(claim.contains(why), "{claim}");
    }

    #[test]
    fn valid_names_are_accepted() {
        for name in [
            "a",
            "bench-01",
            "0",
            "rack1.bench-02",
            "a.b.c",
            &"a".repeat(63),
            &format!(
                "{}.{}.{}.{}",
                "a".repeat(63),
                "b".repeat(63),
                "c".repeat(63),
                "d".repeat(61)
            ),
        ] {
            assert_eq!(
                BenchName::parse(name).map(|n| n.0),
                Ok(name.to_owned()),
                "{name}"
            );
        }
    }

    #[test]
    fn invalid_names_say_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("Bench", "uppercase"),
            ("bench_01", "other than"),
            ("bench 01", "other than"),
            ("-bench", "starts or ends"),
            ("bench-", "starts or ends"),
            (".bench", "empty label"),
            ("bench.", "empty label"),
            ("a..b", "empty label"),
            ("bénch", "other than"),
            ("a/b", "other than"),
            ("a:b", "other than"),
            ("{a}", "other than"),
        ];
        for (name, want) in cases {
            let err = BenchName::parse(name).expect_err(name).to_string();
            assert!(err.contains(want), "{name:?}: {err}");
        }
        let long = "a".repeat(254);
        assert!(matches!(
            BenchName::parse(&long),
            Err(InvalidName::TooLong { len: 254, .. })
        ));
        let label = "a".repeat(64);
        assert!(matches!(
            BenchName::parse(&label),
            Err(InvalidName::LabelTooLong { .. })
        ));
    }

    #[test]
    fn group_names_are_labels() {
        assert_eq!(GroupName::parse("pool-a").unwrap().as_str(), "pool-a");
        for bad in ["", "pool.a", "Pool", "-a", &"a".repeat(64)] {
            assert!(GroupName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ClaimName::parse("bench-01-3-x7k2").is_ok());
        assert!(ClaimName::parse("Bad").is_err());
    }

    #[test]
    fn names_serialize_as_their_text_and_refuse_bad_text() {
        let b = BenchName::parse("bench-01").unwrap();
        let g = GroupName::parse("pool-a").unwrap();
        let c = ClaimName::parse("bench-01-1").unwrap();
        assert_eq!(
            serde_json::to_string(&(&b, &g, &c)).unwrap(),
            r#"["bench-01","pool-a","bench-01-1"]"#
        );
        assert_eq!(
            (b.to_string(), g.to_string(), c.to_string()),
            ("bench-01".into(), "pool-a".into(), "bench-01-1".into())
        );
        let back: (BenchName, GroupName, ClaimName) =
            serde_json::from_str(r#"["bench-01","pool-a","bench-01-1"]"#).unwrap();
        assert_eq!(back, (b, g, c));
        assert!(serde_json::from_str::<BenchName>(r#""Bad""#).is_err());
        assert!(serde_json::from_str::<GroupName>(r#""a.b""#).is_err());
        assert!(serde_json::from_str::<ClaimName>(r#""""#).is_err());
    }

    #[test]
    fn claim_names_for_any_slot_are_valid() {
        let short = BenchName::parse("bench-01").unwrap();
        assert_eq!(
            ClaimName::for_slot(&short, "1a2b").as_str(),
            "bench-01-1a2b"
        );
        let long_label = BenchName::parse(&"a".repeat(60)).unwrap();
        assert_eq!(
            ClaimName::for_slot(&long_label, "1a2b").as_str(),
            format!("{}.1a2b", "a".repeat(60))
        );
        let longest = BenchName::parse(&format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        ))
        .unwrap();
        let n = ClaimName::for_slot(&longest, "1a22b2ddcef");
        assert!(ClaimName::parse(n.as_str()).is_ok(), "{n}");
        // FNV-1a 64 of the slot name (the same function gives af63dc4c8601ec8c for "a", the
        // published test vector).
        assert_eq!(n.as_str(), "s8b50ab2ca1b804bd.1a22b2ddcef");
        assert_eq!(ClaimName::for_slot(&short, "-!").as_str(), "bench-01-0");
        // The dash form up to a last label of exactly 63, the dot form past it.
        let label = |n: usize| BenchName::parse(&format!("x.{}", "a".repeat(n))).unwrap();
        let suffix = "b".repeat(10);
        assert_eq!(
            ClaimName::for_slot(&label(52), &suffix).as_str(),
            format!("x.{}-{suffix}", "a".repeat(52))
        );
        assert_eq!(
            ClaimName::for_slot(&label(53), &suffix).as_str(),
            format!("x.{}.{suffix}", "a".repeat(53))
        );
        // A suffix too long for a label is cut to 62, so the dot form still fits.
        let one = BenchName::parse("b").unwrap();
        assert_eq!(
            ClaimName::for_slot(&one, &"c".repeat(100)).as_str(),
            format!("b.{}", "c".repeat(62))
        );
    }

    #[test]
    fn reasons_are_one_printable_line() {
        assert_eq!(
            Reason::parse("kernel upgrade").unwrap().as_str(),
            "kernel upgrade"
        );
        assert_eq!(
            Reason::parse("kernel upgrade").unwrap().to_string(),
            "kernel upgrade"
        );
        assert_eq!(Reason::parse(""), Err(InvalidReason::Empty));
        assert_eq!(Reason::parse("   "), Err(InvalidReason::Empty));
        assert!(matches!(
            Reason::parse("a\tb"),
            Err(InvalidReason::Character(u)) if u.position == 2
        ));
        assert!(matches!(
            Reason::parse("a\nb"),
            Err(InvalidReason::Character(_))
        ));
        // SPEC §2.1: a bidirectional control would show another reason than the one written.
        assert_eq!(
            Reason::parse("ok \u{202E}evil").unwrap_err().to_string(),
            "invalid hold reason: character 4 is U+202E (RIGHT-TO-LEFT OVERRIDE), a \
             bidirectional control, which reorders the text around it; a reason is one printable \
             line"
        );
        assert!(Reason::parse(&"x".repeat(256)).is_ok());
        assert_eq!(
            Reason::parse(&"x".repeat(257)),
            Err(InvalidReason::TooLong(257))
        );
    }
}
