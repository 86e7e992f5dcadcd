//! The heartbeat value and the hold request as the protocol reads them (docs/protocol.md §2,
//! SPEC §2.3): the bytes a bounded read found, to a reading and the load facts beside it.
//!
//! The state is the key's alone (`state::decide`): a value that breaks a rule of `v`, `at`, `ttl`
//! or `hold` is unreadable, so DOWN. `load` and `cores` never have a say: one out of its range, of
//! another type or `null` is dropped, and the row carries nothing for it, whatever the rest of the
//! value says (the seed's principle: a bench at load 21 on 16 cores that keeps beating is UP).
//!
//! Pure: no I/O, no clock.

use std::time::Duration;

use chrono::DateTime;

use super::name::Reason;
use super::state::{Flaw, HoldRequest, Key, Reading, Unreadable};

pub mod json;

use json::{Json, Repeats, integer};

/// The most bytes of a value a reader reads (`GETRANGE key 0 MAX_VALUE`, so one byte more shows
/// a value longer than this). A heartbeat is about 100 bytes, at most about 1.2 kB (a hold of 256
/// four-byte characters); a value past 2 kB is none of fleet's (SPEC §7 S3).
pub const MAX_VALUE: usize = 2_048;

/// The longest TTL one beat may promise, in ms: 30 days. A long promise hides a crash for its
/// whole length (reference §1.7), and a month is already far past the longest planned sleep.
pub const MAX_TTL_MS: u64 = 30 * 24 * 3_600 * 1_000;

/// The longest TTL one beat may promise.
pub const MAX_TTL: Duration = Duration::from_millis(MAX_TTL_MS);

/// The latest write time a value may carry, in server ms: 8·10¹⁵ (year 255 479). With the
/// longest TTL added it stays below 2⁵³, so a reader that counts in doubles counts exactly, and
/// it is the bound of a hold request's lapse.
pub const MAX_AT_MS: i64 = 8_000_000_000_000_000;

/// The largest load a row carries, as `fleet beat --load` takes it (SPEC §2.1).
pub const MAX_LOAD: f64 = 1e6;

/// One key as a bounded read (`GETRANGE key 0 MAX_VALUE`) found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// No key, or an empty string (which `GETRANGE` cannot tell from none).
    Missing,
    /// A string's first bytes, at most `MAX_VALUE + 1` of them.
    Bytes(&'a [u8]),
    /// A string longer than `MAX_VALUE` bytes, not kept past them.
    TooLarge,
    /// A key of another type than a string, with its type when asked.
    OtherType(Option<&'a str>),
}

/// What a reader makes of one key: the reading the state is decided from, and the load facts a
/// readable value carries (whether or not its beat still counts).
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub reading: Reading,
    pub load: Option<f64>,
    pub cores: Option<u32>,
}

impl Read {
    fn unreadable(kind: Flaw, why: String) -> Read {
        Read {
            reading: Reading::Unreadable(Unreadable { kind, why }),
            load: None,
            cores: None,
        }
    }
}

/// The reading of one key as a bounded read found it (docs/protocol.md §3, the rows before the
/// clock's): missing, of another type, too large, unreadable, or a beat.
pub fn read(found: Found<'_>) -> Read {
    match found {
        Found::Missing | Found::Bytes([]) => Read {
            reading: Reading::Missing,
            load: None,
            cores: None,
        },
        Found::OtherType(kind) => Read::unreadable(
            Flaw::WrongType,
            format!(
                "the key holds a {}, not a heartbeat: something else wrote it",
                kind.unwrap_or("value of another type")
            ),
        ),
        Found::TooLarge => Read::unreadable(
            Flaw::TooLarge,
            format!(
                "value too large: more than {MAX_VALUE} bytes, where a heartbeat is about 100; \
                 something else wrote it"
            ),
        ),
        Found::Bytes(bytes) if bytes.len() > MAX_VALUE => read(Found::TooLarge),
        Found::Bytes(bytes) => decode_beat(bytes),
    }
}

/// Decodes one heartbeat value (docs/protocol.md §2): strict JSON, `v` 1, `at` and `ttl` in
/// range, a valid hold or none; `load` and `cores` kept only within their ranges. Garbage is a
/// reading (unreadable, so DOWN with the reason), never an error.
pub fn decode_beat(bytes: &[u8]) -> Read {
    let bad = |why: String| Read::unreadable(Flaw::Unreadable, why);
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return bad(format!("not UTF-8 (at byte {})", e.valid_up_to())),
    };
    let members = match json::object(text, Repeats::Refused) {
        Ok(members) => members,
        Err(e) => return bad(format!("not a heartbeat ({e})")),
    };
    let field = |name: &str| members.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let whole = |name: &str, range: std::ops::RangeInclusive<i128>| match field(name) {
        None => Err(format!("no {name}")),
        Some(Json::Number(n)) => match integer(n) {
            Some(value) if range.contains(&value) => Ok(value),
            Some(_) => Err(format!("{name} {n} is out of its range ({range:?})")),
            None => Err(format!("{name} {n} is not written as an integer")),
        },
        Some(_) => Err(format!("{name} is not a number")),
    };
    match field("v") {
        Some(Json::Number(n)) if integer(n) == Some(1) => {}
        Some(Json::Number(n)) if integer(n).is_some() => {
            return bad(format!("heartbeat version {n} is not known to this fleet"));
        }
        None => return bad("no v".to_owned()),
        Some(_) => return bad("v is not the integer 1".to_owned()),
    }
    let fields = (|| {
        let at = whole("at", 0..=i128::from(MAX_AT_MS))?;
        let ttl = whole("ttl", 0..=i128::from(MAX_TTL_MS))?;
        let hold = match field("hold") {
            None | Some(Json::Null) => None,
            Some(Json::String(text)) => {
                Some(Reason::parse(text).map_err(|e| format!("bad hold ({e})"))?)
            }
            Some(_) => return Err("hold is not text".to_owned()),
        };
        Ok((at, ttl, hold))
    })();
    let (at, ttl, hold) = match fields {
        Ok(fields) => fields,
        Err(why) => return bad(why),
    };
    let key = Key {
        written_at: DateTime::from_timestamp_millis(
            i64::try_from(at).expect("within 0..=MAX_AT_MS"),
        )
        .expect("within chrono's range: MAX_AT_MS is"),
        ttl: Duration::from_millis(u64::try_from(ttl).expect("within 0..=MAX_TTL_MS")),
        hold,
    };
    Read {
        reading: Reading::Beat(key),
        load: field("load").and_then(load),
        cores: field("cores").and_then(cores),
    }
}

/// The load a row carries: a number of any form whose value, as the nearest double, is from 0 to
/// `MAX_LOAD` (`-0` is 0); else none.
fn load(value: &Json<'_>) -> Option<f64> {
    let Json::Number(text) = value else {
        return None;
    };
    let load: f64 = text.parse().ok()?;
    // `+ 0.0` makes -0 read as 0.
    (0.0..=MAX_LOAD).contains(&load).then_some(load + 0.0)
}

/// The cores a row carries: an integer from 1 to 2³² − 1 (`fleet beat --cores`); else none.
fn cores(value: &Json<'_>) -> Option<u32> {
    let Json::Number(text) = value else {
        return None;
    };
    u32::try_from(integer(text)?).ok().filter(|c| *c >= 1)
}

/// Decodes one hold request (docs/protocol.md §5.3, SPEC §2.4): strict JSON but that a repeated
/// member's last value counts (as the previous release's decoder read it), a valid reason, and a
/// lapse absent, `null`, or a number of any form whose value, as the nearest double, is a whole
/// number of ms within ±8·10¹⁵ (`9e12` equals `9000000000000.0`). Anything else is no request:
/// it is an operator's ask, never the bench's word, and trusting garbage would hold a bench.
pub fn decode_request(bytes: &[u8]) -> Option<HoldRequest> {
    let text = std::str::from_utf8(bytes).ok()?;
    let members = json::object(text, Repeats::LastCounts).ok()?;
    let field = |name: &str| members.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let Some(Json::String(reason)) = field("reason") else {
        return None;
    };
    let reason = Reason::parse(reason).ok()?;
    let until = match field("until") {
        None | Some(Json::Null) => None,
        Some(Json::Number(text)) => {
            let ms: f64 = text.parse().ok()?;
            let bound = MAX_AT_MS as f64;
            if ms.fract() != 0.0 || !(-bound..=bound).contains(&ms) {
                return None;
            }
            // Exact: a whole number within ±8e15 is an exact f64 and fits an i64.
            Some(DateTime::from_timestamp_millis(ms as i64)?)
        }
        Some(_) => return None,
    };
    Some(HoldRequest { reason, until })
}

#[cfg(test)]
mod tests;
