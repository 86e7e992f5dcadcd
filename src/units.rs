//! Units read from text: durations in the humantime form (`30s`, `12m10s`) and Kubernetes
//! quantities (`16`, `500m`, `64Gi`), each refused with a message that says what is valid.
//!
//! The lowest layer of fleet: the configuration file and the command line's flags both read
//! their values here, so neither reaches into the other. Pure: no I/O, and nothing of fleet is
//! imported; the ranges a flag or a field allows are its reader's, not this module's.

use std::fmt;
use std::time::Duration;

/// A duration like `30s`, `1500ms`, `12m10s` or `1h`; `0` alone is zero.
pub fn duration(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    if text.trim().starts_with('-') {
        return Err(format!(
            "invalid duration {text:?}: a duration is not negative; use a number with a unit, \
             like 30s, 1500ms, 12m10s or 1h (units: ms, s, m, h, d)"
        ));
    }
    humantime::parse_duration(text.trim()).map_err(|_| {
        format!(
            "invalid duration {text:?}: use a number with a unit, like 30s, 1500ms, 12m10s or \
             1h (units: ms, s, m, h, d)"
        )
    })
}

/// The suffixes a quantity may carry: binary (Ki..Ei), then decimal (n..E). Two-letter suffixes
/// come first so that `Mi` is not read as `M` followed by junk.
const QUANTITY_SUFFIXES: [&str; 15] = [
    "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E",
];

/// A Kubernetes quantity, checked loosely: a decimal number, optionally followed by one suffix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Quantity(String);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid quantity {0:?}: write a decimal number optionally followed by one of the suffixes \
     Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E (like 16, 500m or 64Gi)"
)]
pub struct InvalidQuantity(pub String);

impl Quantity {
    pub fn parse(text: &str) -> Result<Self, InvalidQuantity> {
        let number = QUANTITY_SUFFIXES
            .iter()
            .find_map(|suffix| text.strip_suffix(suffix))
            .unwrap_or(text);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
            return Err(InvalidQuantity(text.to_owned()));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Quantity {
    type Err = InvalidQuantity;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_the_humantime_form() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("12m10s"), Ok(Duration::from_secs(730)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "30", "ten seconds", "-5s", "1x", "s"] {
            let err = duration(bad).unwrap_err();
            assert!(err.contains("like 30s"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn quantities_are_decimal_numbers_with_an_optional_suffix() {
        for good in [
            "16", "0", "110", "64Gi", "500m", "1.5", "0.5Gi", ".5", "1.", "8Ki", "2Ei", "3n", "4u",
            "5k", "6M", "7G", "8T", "9P", "10E", "1Mi", "1Ti", "1Pi",
        ] {
            assert_eq!(
                Quantity::parse(good).map(|q| q.as_str().to_owned()),
                Ok(good.to_owned()),
                "{good}"
            );
        }
        for bad in [
            "", "Gi", ".", "64GB", "64gi", "-1", "+1", "1e3", "1.2.3", "16 ", " 16", "1K", "one",
            "1GiB", "Mi5", "1..", "m",
        ] {
            let err = Quantity::parse(bad).expect_err(bad).to_string();
            assert!(err.contains("like 16, 500m or 64Gi"), "{bad:?}: {err}");
        }
    }
}
