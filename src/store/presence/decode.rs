//! Decoding what a fleet read returns (SPEC §2.3, §2.4): the replies of the read's pipeline,
//! each heartbeat value into a reading, each hold request into a request or none, and
//! the benches whose key holds another type than a heartbeat.
//!
//! Pure: no I/O, and no clock but the server's time the read returned. A defect in a value is a
//! reading (unreadable, so DOWN with the reason) or no request, never an error of the read; only
//! a reply of the wrong shape, or a refused or failed command, fails it (a reader that cannot
//! see a bench is blind, never told it is DOWN).

use crate::domain::heartbeat::{Found, Read, decode_request, read};
use crate::domain::name::BenchName;
use crate::domain::state::Bench;
use crate::store::script::server_time;

use super::{PresenceError, Snapshot};

pub use crate::domain::heartbeat::MAX_VALUE;

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

    /// The reading it is, with the load facts of a heartbeat (docs/protocol.md §2, §3).
    fn reading(&self) -> Read {
        read(match self {
            Got::Missing => Found::Missing,
            Got::Value(bytes) => Found::Bytes(bytes),
            Got::TooLarge => Found::TooLarge,
            Got::OtherType(kind) => Found::OtherType(kind.as_deref()),
        })
    }
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
        let Read {
            reading,
            load,
            cores,
        } = value.reading();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_time_keeps_microseconds() {
        let t = server_time("1800000000", "123456").unwrap();
        assert_eq!(t.timestamp_micros(), 1_800_000_000_123_456);
        assert_eq!(server_time("x", "1"), None);
    }
}
