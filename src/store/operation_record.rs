//! How a slot's operation record (`domain::operation`'s `SlotOp`) lies in Redis, and how a
//! group's records are read back (SPEC §4.3, §5.4).
//!
//! A group's records are one hash (`{P:G}:ops`): per slot the start of the last operation fired
//! on it (field `<slot>`), its outcome (`<slot>:end`) and, for a shutdown, when the machine was
//! observed off after it (`<slot>:off`). The claim store reads the hash with a group's claims;
//! the writes that keep it are in `operations`. No I/O here.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::claim::{OperationKind, OperationOutcome};
use crate::domain::name::{BenchName, ClaimName};
use crate::domain::operation::{OpEnd, SlotOp};

/// The start of an operation as stored (field `<slot>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct WireStart {
    pub(super) kind: OperationKind,
    pub(super) claim: Option<ClaimName>,
    pub(super) attempt: u32,
    /// Milliseconds of the server's clock: the record's identity, compared by the scripts.
    pub(super) started_at: i64,
    pub(super) timeout_ms: u64,
    pub(super) controller: String,
    #[serde(default)]
    pub(super) streak: u32,
}

/// How an operation ended, as stored (field `<slot>:end`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct WireEnd {
    pub(super) started_at: i64,
    pub(super) outcome: OperationOutcome,
    /// Set by the script from the server's clock.
    #[serde(default)]
    pub(super) finished_at: i64,
    pub(super) duration_ms: u64,
    pub(super) tail: String,
}

pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// A group's operation records as read: by slot, and the slots whose record cannot be read (the
/// controller takes no power action on those).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Operations {
    pub by_slot: HashMap<BenchName, SlotOp>,
    pub unreadable: Vec<BenchName>,
}

/// Decodes a group's operation-record hash (its `HGETALL`, as field and value pairs).
pub(crate) fn decode(pairs: Vec<(String, String)>) -> Operations {
    let mut starts: HashMap<String, String> = HashMap::new();
    let mut ends: HashMap<String, String> = HashMap::new();
    let mut offs: HashMap<String, String> = HashMap::new();
    for (field, value) in pairs {
        match field.split_once(':') {
            None => {
                starts.insert(field, value);
            }
            Some((slot, "end")) => {
                ends.insert(slot.to_owned(), value);
            }
            Some((slot, "off")) => {
                offs.insert(slot.to_owned(), value);
            }
            // A field fleet does not write: not a record.
            Some(_) => {}
        }
    }
    let mut out = Operations::default();
    for (slot, raw) in starts {
        let Ok(slot) = BenchName::parse(&slot) else {
            continue;
        };
        let Ok(start) = serde_json::from_str::<WireStart>(&raw) else {
            out.unreadable.push(slot);
            continue;
        };
        let Some(started_at) = DateTime::from_timestamp_millis(start.started_at) else {
            out.unreadable.push(slot);
            continue;
        };
        let end = ends
            .get(slot.as_str())
            .and_then(|raw| serde_json::from_str::<WireEnd>(raw).ok())
            .filter(|e| e.started_at == start.started_at)
            .and_then(|e| {
                Some(OpEnd {
                    outcome: e.outcome,
                    finished_at: DateTime::from_timestamp_millis(e.finished_at)?,
                    duration_ms: e.duration_ms,
                    tail: e.tail,
                })
            });
        let off_at = offs
            .get(slot.as_str())
            .and_then(|raw| raw.parse::<i64>().ok())
            .and_then(DateTime::from_timestamp_millis);
        out.by_slot.insert(
            slot,
            SlotOp {
                kind: start.kind,
                claim: start.claim,
                attempt: start.attempt,
                started_at,
                timeout: Duration::from_millis(start.timeout_ms),
                controller: start.controller,
                streak: start.streak,
                end,
                off_at,
            },
        );
    }
    out.unreadable.sort();
    out
}
