//! Parsers for flag values. Each error says what is valid; clap prints it and exits 2.
//!
//! The units themselves (the humantime form of a duration) are read by [`crate::units`]; here
//! each flag gets its range.

use std::path::Path;
use std::time::Duration;

use crate::store::keys::Keys;
use crate::store::presence::MAX_TTL;
use crate::units::duration;
use fleet_redis::connect::Password;

/// A duration within `[min, max]`: every duration flag has a documented range (SPEC §2.6), so no
/// value can overflow the arithmetic fleet does with it (`3 × --interval`, an instant plus a
/// timeout) or wait for centuries.
fn within(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = duration(text)?;
    if d < min || d > max {
        let why = if d.is_zero() {
            " (longer than zero)"
        } else if max == MAX_TTL {
            " (the longest promise a beat may make)"
        } else {
            ""
        };
        return Err(format!(
            "invalid duration {text:?}: it must be from {} to {}{why}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

const MS: Duration = Duration::from_millis(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(60 * 60);
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A bound on one call (to Redis, to the provider): 1ms to 1h.
pub fn call_timeout(text: &str) -> Result<Duration, String> {
    within(text, MS, HOUR)
}

/// How often an agent beats: 100ms to 1 day.
pub fn beat_interval(text: &str) -> Result<Duration, String> {
    within(text, Duration::from_millis(100), DAY)
}

/// The TTL of one beat: 0 (DOWN at once) to 30 days.
pub fn ttl(text: &str) -> Result<Duration, String> {
    within(text, Duration::ZERO, MAX_TTL)
}

/// A TTL that counts: 1ms to 30 days.
pub fn positive_ttl(text: &str) -> Result<Duration, String> {
    within(text, MS, MAX_TTL)
}

/// How often a view redraws: 100ms to 1h.
pub fn watch_interval(text: &str) -> Result<Duration, String> {
    within(text, Duration::from_millis(100), HOUR)
}

/// How long a hold request lasts: 1ms to 365 days.
pub fn hold_for(text: &str) -> Result<Duration, String> {
    within(text, MS, 365 * DAY)
}

/// How often the controller passes over every slot: 10ms to 10m.
pub fn pass_interval(text: &str) -> Result<Duration, String> {
    within(text, Duration::from_millis(10), 10 * MINUTE)
}

/// The leader lease: 100ms to 10m (and longer than the pass interval: `fleet serve` checks).
pub fn lease(text: &str) -> Result<Duration, String> {
    within(text, Duration::from_millis(100), 10 * MINUTE)
}

/// This process's name in the leader lease (`--holder`): shown by every view and on the page, so
/// one printable word of 1 to 253 characters, with no control or bidirectional control (SPEC
/// §2.1, §7 S7) and no space.
pub fn holder(text: &str) -> Result<String, String> {
    if let Some(found) = crate::domain::text::first_unsafe(text) {
        return Err(format!(
            "invalid holder \"{}\": {found}; a holder is one printable word, like the host name",
            crate::domain::text::escaped(text)
        ));
    }
    let len = text.chars().count();
    if len == 0 || len > 253 || text.chars().any(char::is_whitespace) {
        return Err(format!(
            "invalid holder {text:?}: a holder is one word of 1 to 253 characters without \
             spaces, like the host name"
        ));
    }
    Ok(text.to_owned())
}

/// A grace (the stop's wait, the blind grace): 0 to 1h.
pub fn grace(text: &str) -> Result<Duration, String> {
    within(text, Duration::ZERO, HOUR)
}

/// How far back `fleet energy` looks: 1ms to the ledger's 400 days.
pub fn since(text: &str) -> Result<Duration, String> {
    const RETENTION: Duration =
        Duration::from_secs(crate::domain::energy::RETENTION_DAYS as u64 * 24 * 60 * 60);
    within(text, MS, RETENTION)
}

/// The sentinels' password in a file (`--sentinel-password-file`): the file's text less one
/// trailing newline, as `fleet acl` reads its password files. Read once, here, so a file that
/// cannot be read, is empty or holds more than one line is exit 2 before anything connects. The
/// error names the file and the fix, never what the file holds.
pub fn password_file(path: &str) -> Result<Password, String> {
    let whose = Whose {
        named: "the sentinels' password",
        short: "the sentinels' password",
        reader: "fleet",
    };
    one_line_secret(Path::new(path), &whose).map(Password::new)
}

/// Whose secret a file holds, as its errors say it: `named` where the fix is to write it,
/// `short` where the fix names it again, `reader` the program that must read the file.
pub(crate) struct Whose<'a> {
    pub named: &'a str,
    pub short: &'a str,
    pub reader: &'a str,
}

/// A file holding one secret (a password): its text less one trailing newline. A file that
/// cannot be read, is empty or holds more than one line is an error naming the file and the fix,
/// never what the file holds. The one reader of `--sentinel-password-file` and of `fleet acl`'s
/// password files.
pub(crate) fn one_line_secret(path: &Path, whose: &Whose<'_>) -> Result<String, String> {
    let shown = path.display();
    let Whose {
        named,
        short,
        reader,
    } = whose;
    use fleet_redis::file::{self, ReadError};
    // Read to a bound (SPEC §7 S10): a path that names a file without end is refused, not read.
    let bytes = file::read(path, file::SECRET).map_err(|e| match e {
        ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("{shown}: missing: write {named} there")
        }
        ReadError::Io(e) => format!("{shown}: cannot be read ({e}): let {reader} read it"),
        too_large @ ReadError::TooLarge { .. } => too_large.to_string(),
    })?;
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{shown}: not UTF-8 text: write {short} there as text"))?;
    let secret = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if secret.is_empty() {
        return Err(format!("{shown}: empty: write {named} there"));
    }
    if secret.contains(['\n', '\r']) {
        return Err(format!(
            "{shown}: more than one line: keep only {short}, on one line"
        ));
    }
    Ok(secret.to_owned())
}

/// A key prefix (see `Keys::new`).
pub fn prefix(text: &str) -> Result<Keys, String> {
    Keys::new(text).map_err(|e| e.to_string())
}

/// The largest load average a beat may carry: a machine's run queue is never near it.
pub const MAX_LOAD: f64 = 1e6;

/// A load average: a finite number from 0 to `MAX_LOAD`.
pub fn load(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(l) if l.is_finite() && (0.0..=MAX_LOAD).contains(&l) => Ok(l),
        _ => Err(format!(
            "invalid load {text:?}: a load average is a number from 0 to 1000000, like 1.5"
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

    // Values past any range panicked (`3 × interval` overflowed) or never led.
    #[test]
    fn every_bounded_duration_refuses_what_is_outside_its_range() {
        type Parser = fn(&str) -> Result<Duration, String>;
        let huge = "10000000000000000000s";
        let cases: [(Parser, &str, &str, &str); 9] = [
            (call_timeout, "1ms", "1h", "0"),
            (beat_interval, "100ms", "1day", "99ms"),
            (ttl, "0", "30days", "31days"),
            (positive_ttl, "1ms", "30days", "0"),
            (watch_interval, "100ms", "1h", "2h"),
            (hold_for, "1ms", "365days", "366days"),
            (pass_interval, "10ms", "10m", "5000000000000000000s"),
            (lease, "100ms", "10m", "11m"),
            (grace, "0", "1h", "61m"),
        ];
        for (parse, low, high, out) in cases {
            assert!(parse(low).is_ok(), "{low}");
            assert!(parse(high).is_ok(), "{high}");
            for bad in [out, huge] {
                let err = parse(bad).unwrap_err();
                assert!(err.contains("it must be from"), "{bad}: {err}");
            }
        }
    }

    #[test]
    fn a_password_file_gives_its_one_line_and_no_message_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        for text in [" s3cret pw \n", " s3cret pw ", " s3cret pw \r\n"] {
            let read = password_file(&file("pw", text)).unwrap();
            assert_eq!(read, Password::new(" s3cret pw "), "{text:?}");
            assert_eq!(format!("{read:?}"), "***");
        }
        for (path, said) in [
            (
                file("empty", "\n"),
                "empty: write the sentinels' password there",
            ),
            (file("two", "hunter2\nhunter2\n"), "more than one line"),
            ("/nonexistent/pw".to_owned(), "/nonexistent/pw: missing"),
            (
                "/dev/zero".to_owned(),
                "/dev/zero holds more than 64 KiB, the most fleet reads of a token or password file",
            ),
        ] {
            let err = password_file(&path).unwrap_err();
            assert!(err.contains(said), "{path}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
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
