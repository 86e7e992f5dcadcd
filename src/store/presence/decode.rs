//! Decoding what a fleet read returns (SPEC §2.3, §2.4): the replies of the read's pipeline,
//! each heartbeat value into a reading, each hold request into a request or none, and
//! the benches whose key holds another type than a heartbeat.
//!
//! Pure: no I/O, and no clock but the server's time the read returned. A defect in a value is a
//! reading (unreadable, so DOWN with the reason) or no request, never an error of the read; only
//! a reply of the wrong shape, or a refused or failed command, fails it (a reader that cannot
//! see a bench is blind, never told it is DOWN).

use std::time::Duration;

use chrono::DateTime;
use serde::Deserialize;

use crate::domain::name::{BenchName, Reason};
use crate::domain::state::{Bench, HoldRequest, Key, Reading};
use crate::store::script::server_time;

use super::{MAX_TTL, PresenceError, Snapshot};

/// The heartbeat value as it lies in Redis (SPEC §2.3): this release's beat writes it with
/// serde_json, the previous release's script with cjson.
#[derive(Debug, Deserialize)]
struct Wire<'a> {
    v: u32,
    at: i64,
    ttl: u64,
    #[serde(default, borrow)]
    hold: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    load: Option<f64>,
    #[serde(default)]
    cores: Option<u32>,
}

/// The hold-request hash as `HGETALL` returns it: field and value pairs.
pub(super) type HoldPairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A reply of a pipeline that keeps errors per command.
pub(super) fn parse_result<T: redis::FromRedisValue>(
    value: Option<redis::RedisResult<redis::Value>>,
) -> Result<T, PresenceError> {
    match value {
        Some(Err(source)) => Err(PresenceError::Read { source }),
        Some(Ok(v)) => parse(Some(v)),
        None => parse(None),
    }
}

/// The most bytes of a value a bench wrote that fleet reads (SPEC §2.3, §7): a heartbeat is about
/// 100 bytes and at most about 1.2 kB (a hold of 256 four-byte characters), so a value past
/// 2 kB is none of fleet's, and reading it whole would let one bench's user make every reader as
/// large as the value (a 200 MB heartbeat took `fleet serve` to 833 MB). Reads ask Redis for the
/// first `MAX_VALUE + 1` bytes (`GETRANGE key 0 MAX_VALUE`), so a value past it is known to be.
pub const MAX_VALUE: usize = 2_048;

/// One key as a bounded read (`GETRANGE key 0 MAX_VALUE`) returned it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Got {
    /// No key (or an empty value, which `GETRANGE` cannot tell from none; fleet never writes
    /// one).
    Missing,
    Value(Vec<u8>),
    /// More than `MAX_VALUE` bytes: not read past them.
    TooLarge,
    /// A key of another type than a string: the type, once asked.
    OtherType(Option<String>),
}

impl Got {
    /// One `GETRANGE` reply of a pipeline that keeps errors per command. Only a key of another
    /// type says something of that key; any other error (a refused command, a node that cannot
    /// answer) says nothing of the bench, and fails the read: a reader that cannot see a bench
    /// is blind, and never reads it DOWN (SPEC §2.5).
    pub(super) fn of(reply: redis::RedisResult<redis::Value>) -> Result<Got, PresenceError> {
        Ok(match reply {
            Ok(redis::Value::BulkString(b)) if b.is_empty() => Got::Missing,
            Ok(redis::Value::BulkString(b)) if b.len() > MAX_VALUE => Got::TooLarge,
            Ok(redis::Value::BulkString(b)) => Got::Value(b),
            Ok(redis::Value::Nil) => Got::Missing,
            Ok(_) => Got::OtherType(Some("reply of another kind".to_owned())),
            Err(e) if e.code() == Some("WRONGTYPE") => Got::OtherType(None),
            Err(e) if e.code() == Some("NOPERM") => return Err(PresenceError::Outdated(e)),
            Err(source) => return Err(PresenceError::Read { source }),
        })
    }

    /// The reading it is, with the load facts of a heartbeat.
    fn reading(self) -> (Reading, Option<f64>, Option<u32>) {
        match self {
            Got::Missing => (Reading::Missing, None, None),
            Got::Value(bytes) => decode_beat(&bytes),
            Got::TooLarge => (
                Reading::Unreadable(format!(
                    "value too large: more than {MAX_VALUE} bytes, where a heartbeat is about \
                     100; something else wrote it"
                )),
                None,
                None,
            ),
            Got::OtherType(kind) => (
                Reading::Unreadable(format!(
                    "the key holds a {}, not a heartbeat: something else wrote it",
                    kind.as_deref().unwrap_or("value of another type")
                )),
                None,
                None,
            ),
        }
    }
}

/// One bench's reading from its key as a bounded read returns it: `None` for no key, the bytes
/// of a string key (at most `MAX_VALUE + 1` of them, as `GETRANGE key 0 MAX_VALUE` gives), or
/// `Err(())` for a key of another type. With `domain::state::decide` and the server's `now`, this
/// is the whole decision a reader in another language implements (SPEC §2.12,
/// docs/protocol.md); the test vectors run through it.
pub fn reading_of(value: Result<Option<&[u8]>, ()>) -> (Reading, Option<f64>, Option<u32>) {
    match value {
        Err(()) => Got::OtherType(None),
        Ok(None) => Got::Missing,
        Ok(Some([])) => Got::Missing,
        Ok(Some(b)) if b.len() > MAX_VALUE => Got::TooLarge,
        Ok(Some(b)) => Got::Value(b.to_vec()),
    }
    .reading()
}

/// One reply of a pipeline that stops at the first error.
pub(super) fn parse<T: redis::FromRedisValue>(
    value: Option<redis::Value>,
) -> Result<T, PresenceError> {
    let value = value.ok_or_else(|| PresenceError::ReadReply("a reply is missing".into()))?;
    redis::from_redis_value(value).map_err(|e| PresenceError::ReadReply(e.to_string()))
}

/// The fleet size from which a read's values are decoded on two threads.
const PARALLEL_DECODE: usize = 4_096;

/// Turns one read's replies into a snapshot. `names` are sorted and `values` are in their order.
pub(super) fn assemble(
    time: (String, String),
    names: &[BenchName],
    values: Vec<Got>,
    holds: Vec<(Vec<u8>, Vec<u8>)>,
    foreign: Vec<String>,
) -> Result<Snapshot, PresenceError> {
    let now = server_time(&time.0, &time.1)
        .ok_or_else(|| PresenceError::ReadReply(format!("TIME was {time:?}")))?;
    if values.len() != names.len() {
        return Err(PresenceError::ReadReply(format!(
            "{} benches but {} values",
            names.len(),
            values.len()
        )));
    }
    let requests: std::collections::HashMap<Vec<u8>, Vec<u8>> = holds.into_iter().collect();
    let bench = |(name, value): (&BenchName, Got)| {
        let (reading, load, cores) = value.reading();
        let requested_hold = if requests.is_empty() {
            None
        } else {
            requests
                .get(name.as_str().as_bytes())
                .and_then(|r| decode_request(r))
        };
        Bench {
            name: name.clone(),
            load,
            cores,
            reading,
            requested_hold,
        }
    };
    // A large fleet's values are decoded on two threads, half each: by then the whole reply has
    // arrived and Redis waits for nothing of this reader, so the second core is free, and the
    // decoding is a third of a one-shot read's time at 10 000 benches (SPEC §2.5).
    let benches = if names.len() >= PARALLEL_DECODE {
        let half = names.len() / 2;
        let mut values = values;
        let second = values.split_off(half);
        std::thread::scope(|scope| {
            let later = scope.spawn(|| {
                names[half..]
                    .iter()
                    .zip(second)
                    .map(bench)
                    .collect::<Vec<_>>()
            });
            let mut benches: Vec<Bench> = names[..half].iter().zip(values).map(bench).collect();
            benches.extend(later.join().expect("decoding a heartbeat never panics"));
            benches
        })
    } else {
        names.iter().zip(values).map(bench).collect()
    };
    Ok(Snapshot {
        now,
        benches,
        foreign,
        problems: Vec::new(),
    })
}

/// Decodes one heartbeat value into a reading and the load facts. Garbage is a reading
/// (unreadable, so DOWN with the reason), never an error of the read.
pub(super) fn decode_beat(bytes: &[u8]) -> (Reading, Option<f64>, Option<u32>) {
    let unreadable = |why: String| (Reading::Unreadable(why), None, None);
    let wire: Wire = match serde_json::from_slice(bytes) {
        Ok(wire) => wire,
        Err(e) => return unreadable(format!("not a heartbeat ({e})")),
    };
    if wire.v != 1 {
        return unreadable(format!(
            "heartbeat version {} is not known to this fleet",
            wire.v
        ));
    }
    let hold = match wire.hold.as_deref().map(Reason::parse).transpose() {
        Ok(hold) => hold,
        Err(e) => return unreadable(format!("bad hold ({e})")),
    };
    let Some(written_at) = DateTime::from_timestamp_millis(wire.at) else {
        return unreadable(format!("bad write time {}", wire.at));
    };
    let ttl = Duration::from_millis(wire.ttl);
    if ttl > MAX_TTL {
        return unreadable(format!("ttl {} ms is past the longest promise", wire.ttl));
    }
    let load = wire.load.filter(|l| l.is_finite() && *l >= 0.0);
    let key = Key {
        written_at,
        ttl,
        hold,
    };
    (Reading::Beat(key), load, wire.cores)
}

/// The largest lapse time a hold request may name, in ms either side of the epoch (the previous
/// release's beat script held requests to the same bound).
const MAX_UNTIL_MS: i64 = 8_000_000_000_000_000;

/// Decodes one hold request; one that is not a valid request (a foreign write) is no request:
/// it is an operator's ask, never the bench's word, and trusting garbage would hold a bench. The
/// beat carries a request by this very rule (`beat::Request`), so a bench never carries a hold
/// that would make its own beat unreadable.
///
/// Read as the previous release's script's JSON decoder read it: a repeated field takes its last value, and a lapse
/// is any JSON number that is a whole number of ms within the bound (`9e12` and `9000000000000.0`
/// alike).
pub fn decode_request(bytes: &[u8]) -> Option<HoldRequest> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let object = value.as_object()?;
    let reason = Reason::parse(object.get("reason")?.as_str()?).ok()?;
    let until = match object.get("until") {
        None | Some(serde_json::Value::Null) => None,
        Some(until) => {
            let ms = until.as_f64()?;
            if ms.fract() != 0.0 || !(-(MAX_UNTIL_MS as f64)..=MAX_UNTIL_MS as f64).contains(&ms) {
                return None;
            }
            // Exact: a whole number within ±8e15 is an exact f64 and fits an i64.
            Some(DateTime::from_timestamp_millis(ms as i64)?)
        }
    };
    Some(HoldRequest { reason, until })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_value_decodes() {
        let v = br#"{"v":1,"at":1799999990000,"ttl":30000,"hold":"upgrade","load":21,"cores":16}"#;
        let (reading, load, cores) = decode_beat(v);
        let Reading::Beat(key) = reading else {
            panic!("{reading:?}")
        };
        assert_eq!(key.ttl, Duration::from_secs(30));
        assert_eq!(key.hold.unwrap().as_str(), "upgrade");
        assert_eq!(key.written_at.timestamp_millis(), 1_799_999_990_000);
        assert_eq!((load, cores), (Some(21.0), Some(16)));
    }

    #[test]
    fn garbage_values_are_unreadable_not_errors() {
        for (value, want) in [
            (&b"hello"[..], "not a heartbeat"),
            (br#"{"v":2,"at":1,"ttl":1}"#, "version 2"),
            (br#"{"v":1,"ttl":1}"#, "not a heartbeat"),
            (br#"{"v":1,"at":1,"ttl":-5}"#, "not a heartbeat"),
            (br#"{"v":1,"at":1,"ttl":99999999999999}"#, "longest promise"),
            (br#"{"v":1,"at":1,"ttl":1,"hold":"a\tb"}"#, "bad hold"),
            (br#"{"v":1,"at":1,"ttl":1,"hold":""}"#, "bad hold"),
            (
                br#"{"v":1,"at":9999999999999999,"ttl":1}"#,
                "bad write time",
            ),
            (&[0xff, 0xfe][..], "not a heartbeat"),
        ] {
            match decode_beat(value).0 {
                Reading::Unreadable(why) => assert!(why.contains(want), "{why}"),
                other => panic!("{value:?} read as {other:?}"),
            }
        }
    }

    #[test]
    fn a_bad_load_is_dropped_not_trusted() {
        let v = br#"{"v":1,"at":1,"ttl":30000,"load":-1}"#;
        assert_eq!(decode_beat(v).1, None);
    }

    #[test]
    fn garbage_hold_requests_are_no_requests() {
        assert_eq!(decode_request(b"nonsense"), None);
        assert_eq!(decode_request(br#"{"reason":""}"#), None);
        assert_eq!(decode_request(br#"{"until":5}"#), None);
        let r = decode_request(br#"{"reason":"x","until":5}"#).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.until.map(|u| u.timestamp_millis())),
            ("x", Some(5))
        );
    }

    #[test]
    fn server_time_keeps_microseconds() {
        let t = server_time("1800000000", "123456").unwrap();
        assert_eq!(t.timestamp_micros(), 1_800_000_000_123_456);
        assert_eq!(server_time("x", "1"), None);
    }
}
