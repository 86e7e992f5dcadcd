//! Units read from text: durations in the humantime form (`30s`, `12m10s`), counts (`4`), and
//! Kubernetes quantities (`16`, `500m`, `64Gi`; checked for the configuration, and read to their
//! value for pricing), each refused with a message that says what is valid.
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

/// A whole number from 0 to `u32::MAX`, read from text so that `-1` or `1e99` is refused with a
/// message rather than a type error.
pub fn count(text: &str) -> Result<u32, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty()
        && trimmed.chars().all(|c| c.is_ascii_digit())
        && let Ok(n) = trimmed.parse::<u32>()
    {
        return Ok(n);
    }
    Err(format!(
        "invalid number {text:?}: a whole number from 0 to {}",
        u32::MAX
    ))
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

/// Why a Kubernetes quantity is not one fleet prices with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "not a Kubernetes quantity (a number, optionally signed, with one of the suffixes Ki to \
         Ei, n, u, m, k to E, or an exponent like e3)"
    )]
    Unreadable,
    #[error("a negative request")]
    Negative,
    #[error("past 2^63 - 1 of its unit, more than Kubernetes' own int64 view of it holds")]
    TooLarge,
}

/// A Kubernetes quantity's value in its unit (cores, bytes, devices), read by Kubernetes'
/// grammar: a signed decimal number, then a binary suffix (`Ki` to `Ei`), a decimal one (`n`,
/// `u`, `m`, none, `k`, `M` to `E`) or a decimal exponent (`e3`, `E-2`). A negative value, or one
/// past `i64::MAX` (where Kubernetes' `Value()` saturates), is refused.
pub fn quantity_value(text: &str) -> Result<f64, QuantityError> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    // Digits and dots only: Rust's float grammar refuses no digit and a second dot, as
    // Kubernetes' does.
    let mantissa: f64 = number.parse().map_err(|_| QuantityError::Unreadable)?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => 10f64.powi(exponent(suffix)?),
    };
    // Zero stays zero whatever its exponent (0 × 10^400 would be NaN).
    let value = if mantissa == 0.0 {
        0.0
    } else {
        mantissa * scale
    };
    if negative && value > 0.0 {
        return Err(QuantityError::Negative);
    }
    // i64::MAX as f64 rounds up to 2^63, the first value Kubernetes cannot hold.
    if !value.is_finite() || value >= i64::MAX as f64 {
        return Err(QuantityError::TooLarge);
    }
    Ok(value)
}

/// A decimal exponent suffix (`e3`, `E-2`, `e+9`), clamped to where a power of ten is 0 or
/// infinite anyway.
fn exponent(suffix: &str) -> Result<i32, QuantityError> {
    let digits = suffix
        .strip_prefix(['e', 'E'])
        .ok_or(QuantityError::Unreadable)?;
    let (negative, unsigned) = match digits.as_bytes().first() {
        Some(b'-') => (true, &digits[1..]),
        Some(b'+') => (false, &digits[1..]),
        _ => (false, digits),
    };
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Unreadable);
    }
    // Only digits are left, so a failure to parse is an overflow.
    let magnitude = unsigned.parse::<i32>().unwrap_or(i32::MAX).min(400);
    Ok(if negative { -magnitude } else { magnitude })
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
    fn counts_are_whole_numbers_read_from_text() {
        assert_eq!(count("0"), Ok(0));
        assert_eq!(count("4"), Ok(4));
        assert_eq!(count(" 4 "), Ok(4));
        assert_eq!(count("4294967295"), Ok(u32::MAX));
        for bad in [
            "-1",
            "4294967296",
            "1.5",
            "1e3",
            "+4",
            "",
            " ",
            "four",
            "0x10",
        ] {
            let err = count(bad).expect_err(bad);
            assert!(err.contains("a whole number from 0"), "{bad:?}: {err}");
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
        // Shown as written, in a message or a view.
        assert_eq!(Quantity::parse("0.5Gi").unwrap().to_string(), "0.5Gi");
    }

    // Kubernetes' quantity grammar, row by row: the value in its unit, or why it is refused.
    #[test]
    fn quantities_read_as_kubernetes_reads_them() {
        use QuantityError::*;
        let rows: [(&str, Result<f64, QuantityError>); 33] = [
            ("1", Ok(1.0)),
            ("500m", Ok(0.5)),
            ("1.5", Ok(1.5)),
            (".5", Ok(0.5)),
            ("5.", Ok(5.0)),
            ("+2", Ok(2.0)),
            ("-0", Ok(0.0)),
            ("250u", Ok(250e-6)),
            ("7n", Ok(7e-9)),
            ("2k", Ok(2e3)),
            ("3M", Ok(3e6)),
            ("64G", Ok(64e9)),
            ("1T", Ok(1e12)),
            ("1P", Ok(1e15)),
            ("1E", Ok(1e18)),
            ("1Ki", Ok(1024.0)),
            ("1Mi", Ok(1024.0 * 1024.0)),
            ("64Gi", Ok(64.0 * 1024.0 * 1024.0 * 1024.0)),
            ("1Ti", Ok(1024f64.powi(4))),
            ("3Pi", Ok(3.0 * 1024f64.powi(5))),
            ("1e3", Ok(1e3)),
            ("15E-1", Ok(1.5)),
            ("1e+2", Ok(100.0)),
            ("1e-99999999999", Ok(0.0)),
            ("0e99999", Ok(0.0)),
            ("-1", Err(Negative)),
            ("-500m", Err(Negative)),
            ("8Ei", Err(TooLarge)),
            ("1e99999999999", Err(TooLarge)),
            ("", Err(Unreadable)),
            ("1.2.3", Err(Unreadable)),
            ("1x", Err(Unreadable)),
            ("1e", Err(Unreadable)),
        ];
        for (text, want) in rows {
            let got = quantity_value(text);
            match (got, want) {
                (Ok(g), Ok(w)) => assert!((g - w).abs() <= w * 1e-12, "{text:?}: {g} ≠ {w}"),
                (got, want) => assert_eq!(got, want, "{text:?}"),
            }
        }
        for text in [
            ".", "m", "NaN", "inf", "1 ", " 1", "1.5Gi ", "e3", "--1", "1ki", "1e3.5",
        ] {
            assert_eq!(quantity_value(text), Err(Unreadable), "{text:?}");
        }
        // The edge of Kubernetes' int64: the last whole values below 2^63 are held, 2^63 is not.
        assert!(quantity_value("9223372036854774784").is_ok());
        assert_eq!(quantity_value("9223372036854775808"), Err(TooLarge));
        assert_eq!(quantity_value("8Ei"), Err(TooLarge), "2^63 bytes");
        assert!(quantity_value("7Ei").is_ok());
    }
}
