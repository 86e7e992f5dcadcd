//! The slots' operation records in the claim store (SPEC §4.3, §5.4): the writes that keep
//! them (how a record lies in Redis and is read back is in `operation_record`).
//!
//! A group's records are one hash (`{P:G}:ops`): per slot the start of the last operation fired
//! on it (written in the same script as the claim write that records the operation, or by the
//! script that checks no claim wants the machine), its outcome (written once, by the operation's
//! wrapper or the controller that ran it) and, for a shutdown, when the machine was observed off
//! after it. Every call is one round trip.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;

use crate::domain::claim::Claim;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::domain::operation::{OpEnd, SlotOp};

use super::claims::{ClaimStore, ClaimStoreError, json};
pub use super::operation_record::Operations;
use super::operation_record::{WireEnd, WireStart, ms};
use super::script::{Script, eval, script};

const UNCLAIMED: Script = script!("op_unclaimed.lua");
const END: Script = script!("op_end.lua");
const OBSERVE: Script = script!("op_observe.lua");

fn start_json(op: &SlotOp) -> Result<String, ClaimStoreError> {
    json(
        "an operation record",
        &WireStart {
            kind: op.kind,
            claim: op.claim.clone(),
            attempt: op.attempt,
            started_at: ms(op.started_at),
            timeout_ms: u64::try_from(op.timeout.as_millis()).unwrap_or(u64::MAX),
            controller: op.controller.clone(),
            streak: op.streak,
        },
    )
}

fn end_json(started_at: DateTime<Utc>, end: &OpEnd) -> Result<String, ClaimStoreError> {
    json(
        "an operation outcome",
        &WireEnd {
            started_at: ms(started_at),
            outcome: end.outcome,
            finished_at: ms(end.finished_at),
            duration_ms: end.duration_ms,
            tail: end.tail.clone(),
        },
    )
}

/// How recording a shutdown of a machine no claim wants ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unclaimed {
    Recorded,
    /// A live claim took the slot since the pass read it: nothing is recorded, nothing may run.
    Claimed(String),
}

impl<C: ConnectionLike + Clone + Send> ClaimStore<C> {
    /// The arguments that make a claim write also record the start of `op` as its slot's
    /// operation record (`claim_write.lua`, ARGV[10] and [11]).
    pub(crate) fn start_args(
        op: Option<&SlotOp>,
        slot: &BenchName,
    ) -> Result<(String, String), ClaimStoreError> {
        Ok(match op {
            Some(op) => (slot.to_string(), start_json(op)?),
            None => (String::new(), String::new()),
        })
    }

    /// Records the start of a shutdown of a machine no claim wants, atomic with the check that
    /// the slot still has no live claim (SPEC §4.5). Fenced.
    pub async fn record_unclaimed(
        &self,
        group: &GroupName,
        slot: &BenchName,
        op: &SlotOp,
    ) -> Result<Unclaimed, ClaimStoreError> {
        let g = self.shell.keys().group(group);
        let mut conn = self.shell.conn();
        let (code, detail): (i64, String) = eval(
            UNCLAIMED,
            &[g.fence(), g.live(slot), g.operations(), g.changes()],
        )
        .arg(self.token())
        .arg(g.claim_prefix())
        .arg(slot.as_str())
        .arg(start_json(op)?)
        .query_async(&mut conn)
        .await
        .map_err(|source| ClaimStoreError::Operation {
            slot: slot.clone(),
            source,
        })?;
        match (code, detail.as_str()) {
            (1, _) => Ok(Unclaimed::Recorded),
            (_, "fenced") => Err(ClaimStoreError::Fenced {
                group: group.clone(),
            }),
            (_, holder) => Ok(Unclaimed::Claimed(holder.to_owned())),
        }
    }

    /// Records how the operation that started at `started_at` ended, once (SPEC §5.4). Not
    /// fenced: the operation's wrapper writes it, whoever leads. Returns whether it was recorded
    /// (false when the record is another operation's, or already has an outcome).
    pub async fn end_operation(
        &self,
        group: &GroupName,
        slot: &BenchName,
        started_at: DateTime<Utc>,
        end: &OpEnd,
    ) -> Result<bool, ClaimStoreError> {
        let mut conn = self.shell.conn();
        let g = self.shell.keys().group(group);
        let written: i64 = eval(END, &[g.operations(), g.changes()])
            .arg(slot.as_str())
            .arg(ms(started_at))
            .arg(end_json(started_at, end)?)
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::Operation {
                slot: slot.clone(),
                source,
            })?;
        Ok(written == 1)
    }

    /// Records that the machine was observed off at `at` after the shutdown that started at
    /// `started_at`: the shutdown took effect, and the machine is no longer on its way down.
    /// Fenced.
    pub async fn observe_off(
        &self,
        group: &GroupName,
        slot: &BenchName,
        started_at: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Result<bool, ClaimStoreError> {
        self.observe(
            group,
            slot,
            started_at,
            &["off".to_owned(), ms(at).to_string()],
        )
        .await
    }

    /// Puts back an operation record the store lost (a restart that dropped its last writes),
    /// from the controller's memory: only where the store holds no record of the slot, or an
    /// older one. Fenced.
    pub async fn restore_operation(
        &self,
        group: &GroupName,
        slot: &BenchName,
        op: &SlotOp,
    ) -> Result<bool, ClaimStoreError> {
        let end = match &op.end {
            Some(end) => end_json(op.started_at, end)?,
            None => String::new(),
        };
        let off = op.off_at.map(|t| ms(t).to_string()).unwrap_or_default();
        self.observe(
            group,
            slot,
            op.started_at,
            &["restore".to_owned(), start_json(op)?, end, off],
        )
        .await
    }

    async fn observe(
        &self,
        group: &GroupName,
        slot: &BenchName,
        started_at: DateTime<Utc>,
        rest: &[String],
    ) -> Result<bool, ClaimStoreError> {
        let g = self.shell.keys().group(group);
        let mut conn = self.shell.conn();
        let mut cmd = eval(OBSERVE, &[g.fence(), g.operations(), g.changes()]);
        cmd.arg(self.token()).arg(slot.as_str()).arg(ms(started_at));
        for a in rest {
            cmd.arg(a);
        }
        let written: i64 =
            cmd.query_async(&mut conn)
                .await
                .map_err(|source| ClaimStoreError::Operation {
                    slot: slot.clone(),
                    source,
                })?;
        match written {
            -1 => Err(ClaimStoreError::Fenced {
                group: group.clone(),
            }),
            n => Ok(n == 1),
        }
    }

    /// Reads one claim as it is stored now (the re-read after an ambiguous write). One round
    /// trip. `None` when it does not exist or cannot be read.
    pub async fn read_claim(
        &self,
        group: &GroupName,
        name: &ClaimName,
    ) -> Result<Option<Claim>, ClaimStoreError> {
        let mut conn = self.shell.conn();
        let raw: Option<String> = redis::cmd("GET")
            .arg(self.shell.keys().group(group).claim(name))
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::ReadGroup {
                group: group.clone(),
                source,
            })?;
        Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::operation_record::decode;
    use super::*;
    use crate::domain::claim::{OperationKind, OperationOutcome};

    fn op() -> SlotOp {
        SlotOp {
            kind: OperationKind::Shutdown,
            claim: None,
            attempt: 0,
            started_at: DateTime::from_timestamp_millis(1_800_000_000_123).unwrap(),
            timeout: Duration::from_secs(300),
            controller: "ctl-1".into(),
            streak: 2,
            end: None,
            off_at: None,
        }
    }

    #[test]
    fn a_record_reads_back_with_its_outcome_and_observation() {
        let o = op();
        let end = OpEnd {
            outcome: OperationOutcome::Completed,
            finished_at: DateTime::from_timestamp_millis(1_800_000_001_000).unwrap(),
            duration_ms: 877,
            tail: "off / done".into(),
        };
        let pairs = vec![
            ("bench-01".to_owned(), start_json(&o).unwrap()),
            (
                "bench-01:end".to_owned(),
                end_json(o.started_at, &end).unwrap(),
            ),
            ("bench-01:off".to_owned(), "1800000002000".to_owned()),
        ];
        let read = decode(pairs);
        let got = &read.by_slot[&BenchName::parse("bench-01").unwrap()];
        assert_eq!(got.end.as_ref(), Some(&end));
        assert_eq!(
            got.off_at,
            DateTime::from_timestamp_millis(1_800_000_002_000)
        );
        assert_eq!(
            SlotOp {
                end: None,
                off_at: None,
                ..got.clone()
            },
            o
        );
    }

    #[test]
    fn an_outcome_of_another_operation_is_not_this_ones() {
        let o = op();
        let end = OpEnd {
            outcome: OperationOutcome::Failed,
            finished_at: o.started_at,
            duration_ms: 1,
            tail: String::new(),
        };
        let earlier = o.started_at - chrono::TimeDelta::seconds(1);
        let read = decode(vec![
            ("bench-01".to_owned(), start_json(&o).unwrap()),
            ("bench-01:end".to_owned(), end_json(earlier, &end).unwrap()),
        ]);
        assert_eq!(
            read.by_slot[&BenchName::parse("bench-01").unwrap()].end,
            None
        );
    }

    #[test]
    fn garbage_records_are_reported_not_trusted() {
        let read = decode(vec![
            ("bench-01".to_owned(), "nonsense".to_owned()),
            ("bench-02".to_owned(), start_json(&op()).unwrap()),
            ("bench-02:end".to_owned(), "nonsense".to_owned()),
            ("bench-02:what".to_owned(), "x".to_owned()),
            ("Not A Slot".to_owned(), start_json(&op()).unwrap()),
        ]);
        assert_eq!(read.unreadable, vec![BenchName::parse("bench-01").unwrap()]);
        assert_eq!(read.by_slot.len(), 1);
        assert_eq!(
            read.by_slot[&BenchName::parse("bench-02").unwrap()].end,
            None
        );
    }
}
