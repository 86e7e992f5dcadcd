//! The digest a slot keeps of its last claim, and the failure streak read from it (SPEC §3.5).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Call, ClaimName, GroupName, Phase, Reason, Timings, add};

/// The digest the slot keeps of its last claim; it outlives the claim's collection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastClaim {
    pub name: ClaimName,
    pub phase: Phase,
    pub attempt: u32,
    pub group: GroupName,
    pub reason: Option<Reason>,
    pub requested_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Whether the claim ever reached ready (an episode that produced a machine).
    pub reached_ready: bool,
    /// When an operator reset the slot's failure streak (`fleet reset-attempts`); the next
    /// claim's digest replaces this one, so a reset is spent by the claim it lets through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streak_reset_at: Option<DateTime<Utc>>,
    /// The call that made the claim (the seed's `call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
}

impl LastClaim {
    /// The same digest with its failure streak reset by an operator at `now`.
    pub fn reset_streak(&self, now: DateTime<Utc>) -> Self {
        LastClaim {
            streak_reset_at: Some(now),
            ..self.clone()
        }
    }
}

/// The slot's failure streak at `now` (SPEC §3.5): how many consecutive attempts failed and still
/// count. It is 0 on a fresh slot, after an episode that produced a machine (the claim reached
/// ready, or ended completed), after an operator's reset, and once `failed_slot_cooldown` has
/// passed since the last failure; otherwise it is the last claim's attempt.
pub fn failure_streak(last: Option<&LastClaim>, now: DateTime<Utc>, timings: &Timings) -> u32 {
    match last {
        None => 0,
        Some(l) if l.reached_ready || l.phase == Phase::Completed => 0,
        Some(l) if l.streak_reset_at.is_some() => 0,
        Some(l)
            if l.phase == Phase::Failed
                && now
                    >= add(
                        l.finished_at.unwrap_or(l.requested_at),
                        timings.failed_slot_cooldown,
                    ) =>
        {
            0
        }
        Some(l) => l.attempt,
    }
}

/// Whether the slot spent its attempts (SPEC §3.5): its failure streak reached the bound, so it
/// is offered to no request until the streak is reset.
pub fn streak_spent(last: Option<&LastClaim>, now: DateTime<Utc>, timings: &Timings) -> bool {
    failure_streak(last, now, timings) >= timings.max_attempts
}

/// The attempt number of a new claim on a slot (SPEC §3.5): one more than the failure streak,
/// so 1 on a fresh slot, after a machine was produced, after a reset or a cooldown, and +1 while
/// the slot keeps failing.
pub fn seed_attempt(last: Option<&LastClaim>, now: DateTime<Utc>, timings: &Timings) -> u32 {
    failure_streak(last, now, timings).saturating_add(1)
}
