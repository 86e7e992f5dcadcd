//! A claim's timeline: what happened to it, in order, with the attempt's numbers (SPEC §4.4).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::claim::{Claim, OperationKind, Phase, Reason};

/// What a timeline entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    Created,
    Booting,
    Ready,
    Failed,
    Cancelled,
    Completed,
    Superseded,
    Marked,
    Shutdown,
    Operation,
    Observed,
    Warned,
}

/// One entry of a claim's timeline: what happened, in order, with the attempt's numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: DateTime<Utc>,
    pub event: Event,
    pub phase: Phase,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<DateTime<Utc>>,
    /// How long the step took (an operation's run, a boot from request to ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The tail of an operation's output, or a note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Entry {
    /// An entry for `claim` as it is after the step.
    pub fn of(claim: &Claim, event: Event, at: DateTime<Utc>) -> Self {
        Entry {
            at,
            event,
            phase: claim.phase,
            attempt: claim.attempt,
            reason: claim.reason,
            operation: None,
            deadline_at: claim.deadline_at,
            duration_ms: None,
            detail: None,
        }
    }
}
