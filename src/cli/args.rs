//! Parsers for flag values. Each error says what is valid; clap prints it and exits 2.

use std::time::Duration;

use crate::store::keys::Keys;

/// A duration like `30s`, `1500ms`, `12m10s` or `1h`; `0` alone is zero.
pub fn duration(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("invalid duration {text:?} ({e}): use a number with a unit, like 30s, 1500ms, 12m10s or 1h")
    })
}

/// A duration that must be longer than zero.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        Duration::ZERO => Err(format!(
            "invalid duration {text:?}: it must be longer than zero"
        )),
        d => Ok(d),
    }
}

/// A key prefix (see `Keys::new`).
pub fn prefix(text: &str) -> Result<Keys, String> {
    Keys::new(text).map_err(|e| e.to_string())
}

/// A load average: a finite number, zero or more.
pub fn load(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(l) if l.is_finite() && l >= 0.0 => Ok(l),
        _ => Err(format!(
            "invalid load {text:?}: a load average is a number, 0 or more, like 1.5"
        )),
    }
}

/// A core count: a whole number from 1.
pub fn cores(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(c) if c >= 1 => Ok(c),
        _ => Err(format!(
            "invalid core count {text:?}: a whole number from 1, like 16"
        )),
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
        assert!(
            positive_duration("0s")
                .unwrap_err()
                .contains("longer than zero")
        );
    }

    #[test]
    fn loads_and_cores_are_checked() {
        assert_eq!(load("21"), Ok(21.0));
        for bad in ["-1", "NaN", "inf", "x", ""] {
            assert!(load(bad).is_err(), "{bad}");
        }
        assert_eq!(cores("16"), Ok(16));
        for bad in ["0", "-1", "1.5", "x"] {
            assert!(cores(bad).is_err(), "{bad}");
        }
    }
}
