//! Requests for machines and their reversal: what `fleet claim`, `fleet cancel`,
//! `fleet reset-shutdown-attempts` and the cluster-autoscaler provider ask of the store
//! (SPEC §4.6). Each is a claim write through the store's atomic scripts; none powers anything:
//! the controller acts on the claims.
//!
//! The command layer: `cli` and `provider` call it, and it calls `store` and `domain`, so it
//! sits below both of its callers and above the store (SPEC §1). The rules it follows are the
//! domain's (`domain::claim`); what it adds is the store's round trips and their bounded retries.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;

use crate::domain::claim::{self, Call, Cancellation, Claim, NotMarkable, Reason, failure_streak};
use crate::domain::history::ScaleAction;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::store::catalog::CatalogGroup;
use crate::store::claims::{ClaimStore, ClaimStoreError, Created, Entry, Event};

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(
        "slot {slot} already has a live claim, {claim}: cancel it first, or wait for it to end"
    )]
    SlotTaken { slot: BenchName, claim: ClaimName },
    #[error("no claim named {0}: list them with `fleet claims`")]
    NoSuchClaim(ClaimName),
    #[error("claim {claim} has ended ({phase}); there is nothing to cancel")]
    Ended {
        claim: ClaimName,
        phase: claim::Phase,
    },
    #[error("claim {0} changed while it was being written; run the command again")]
    Raced(ClaimName),
    #[error("claim {0}: {1}")]
    NotMarkable(ClaimName, NotMarkable),
    #[error(
        "slot {slot} is powering off: fleet fired its shutdown at {since} and has not seen the \
         machine off yet; claim it once `fleet state {slot}` reads DOWN"
    )]
    PoweringOff { slot: BenchName, since: String },
    #[error(
        "slot {slot} spent its attempts ({attempts} failed in a row): it rests until {until}; \
         reset it now with `fleet reset-attempts {slot}`"
    )]
    Spent {
        slot: BenchName,
        attempts: u32,
        until: String,
    },
    #[error(transparent)]
    Store(#[from] ClaimStoreError),
}

/// How a cancellation was carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// A pending claim: deleted; nothing was in flight.
    Deleted,
    /// A booting or ready claim: marked; the controller reverses the boot.
    Marked,
}

/// Creates a claim on `slot` of `group`: atomic with the check that the slot has no live claim,
/// its attempt seeded from the slot's last claim.
pub async fn claim_slot<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    group: &CatalogGroup,
    slot: &BenchName,
    now: DateTime<Utc>,
) -> Result<Claim, RequestError> {
    let mut made = claim_slots(store, group, std::slice::from_ref(slot), now, Call::Claim).await?;
    made.pop().ok_or_else(|| {
        RequestError::Store(ClaimStoreError::Reply(format!("no claim made on {slot}")))
    })
}

/// `fleet claim`: a claim on a slot that is free (SPEC §4.6): no live claim (checked by the
/// create, atomically) and no machine on its way down (a claim on it would wait for the machine to
/// go dark and start it again: a person asking for a machine is told instead). The request time
/// is the server's, from the same read.
pub async fn claim_free_slot<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    group: &CatalogGroup,
    slot: &BenchName,
) -> Result<Claim, RequestError> {
    let read = store
        .read_groups(std::slice::from_ref(&group.name))
        .await?
        .pop()
        .ok_or_else(|| ClaimStoreError::Reply("a group read returned no group".to_owned()))?;
    if let Some(op) = read
        .operations
        .by_slot
        .get(slot)
        .filter(|o| o.going_down(read.now, group.timings.job_monitor_poll_interval))
    {
        return Err(RequestError::PoweringOff {
            slot: slot.clone(),
            since: op
                .started_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
    }
    // A slot that spent its attempts would fail its claim AttemptLimitExceeded before a machine
    // is bought: a person asking for it is told when it rests until, and how to reset it.
    let seed = store.seed(&group.name, slot).await?;
    if claim::streak_spent(seed.last.as_ref(), read.now, &group.timings)
        && let Some(last) = &seed.last
    {
        let since = last.finished_at.unwrap_or(last.requested_at);
        return Err(RequestError::Spent {
            slot: slot.clone(),
            attempts: last.attempt,
            until: claim::add(since, group.timings.failed_slot_cooldown)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
    }
    claim_slot(store, group, slot, read.now).await
}

/// Creates one claim on each of `slots` of `group`, all or none (SPEC §6.3: a provider's
/// IncreaseSize), each atomic with the check that its slot has no live claim and its attempt
/// seeded from the slot's last claim.
pub async fn claim_slots<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    group: &CatalogGroup,
    slots: &[BenchName],
    now: DateTime<Utc>,
    call: Call,
) -> Result<Vec<Claim>, RequestError> {
    // The group is among those that may hold claims, so a controller reads them even after the
    // group left its configuration (SPEC §4.1).
    store.known_groups(&[(&group.name, &group.timings)]).await?;
    // A claim name is the slot and the request time; a collision (two requests in one
    // millisecond) or a digest that moved under us is retried a bounded number of times, with
    // the seeds read again.
    for n in 0..8 {
        let seeds = store.seeds(&group.name, slots).await?;
        let claims: Vec<Claim> = slots
            .iter()
            .zip(&seeds)
            .map(|(slot, seed)| {
                Claim::new(
                    ClaimName::for_slot(slot, &format!("{:x}", now.timestamp_millis() + n)),
                    slot.clone(),
                    group.name.clone(),
                    seed.last.as_ref(),
                    now,
                    &group.timings,
                    group.max_node_provision_time,
                )
                .made_by(call)
            })
            .collect();
        match store.create_all(&claims, &seeds).await? {
            None => {
                // Recorded again after the create: a controller forgetting the group (it left
                // its configuration) in between puts it back or sees this claim (SPEC §4.1).
                store.known_groups(&[(&group.name, &group.timings)]).await?;
                let count = u32::try_from(claims.len()).unwrap_or(u32::MAX);
                scaled(
                    store,
                    &group.name,
                    now,
                    ScaleAction::Increase,
                    count as usize,
                )
                .await;
                return Ok(claims);
            }
            Some((i, Created::SlotTaken(claim))) => {
                return Err(RequestError::SlotTaken {
                    slot: slots[i].clone(),
                    claim,
                });
            }
            Some((_, Created::NameTaken | Created::SeedMoved | Created::Created)) => continue,
        }
    }
    Err(RequestError::Store(ClaimStoreError::Reply(format!(
        "could not create claims on {} slots of group {} after 8 tries",
        slots.len(),
        group.name
    ))))
}

/// Finds a claim by name among `groups`.
pub async fn find_claim<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    groups: &[GroupName],
    name: &ClaimName,
) -> Result<Claim, RequestError> {
    store
        .read_groups(groups)
        .await?
        .iter()
        .find_map(|g| g.claims.iter().find(|c| &c.name == name).cloned())
        .ok_or_else(|| RequestError::NoSuchClaim(name.clone()))
}

/// Cancels a claim (SPEC §3.2): a pending claim is deleted; a booting or ready one is marked for
/// deletion and reversed by the controller, never interrupted.
pub async fn cancel<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    c: &Claim,
    reason: Reason,
    now: DateTime<Utc>,
    timeline_ttl: std::time::Duration,
) -> Result<Cancelled, RequestError> {
    match claim::cancellation(c.phase) {
        Cancellation::Delete => {
            let mut entry = Entry::of(c, Event::Cancelled, now);
            entry.reason = Some(reason);
            if store.delete(c, Some(&entry), timeline_ttl).await? {
                Ok(Cancelled::Deleted)
            } else {
                Err(RequestError::Raced(c.name.clone()))
            }
        }
        Cancellation::Reverse => {
            let marked = c
                .mark_for_deletion(reason)
                .map_err(|e| RequestError::NotMarkable(c.name.clone(), e))?;
            let mut entry = Entry::of(&marked, Event::Marked, now);
            entry.reason = Some(reason);
            if store.write(c, &marked, Some(&entry)).await? {
                Ok(Cancelled::Marked)
            } else {
                Err(RequestError::Raced(c.name.clone()))
            }
        }
        Cancellation::Nothing => Err(RequestError::Ended {
            claim: c.name.clone(),
            phase: c.phase,
        }),
    }
}

/// Records a scaling call for `fleet groups`, once per call whatever it counted (a DeleteNodes
/// of four nodes is one `delete 4`). A report: a failure to write it is logged, never the
/// request's failure.
pub async fn scaled<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    group: &GroupName,
    now: DateTime<Utc>,
    action: ScaleAction,
    count: usize,
) {
    let count = u32::try_from(count).unwrap_or(u32::MAX);
    if let Err(e) = store.record_scale(group, now, action, count).await {
        tracing::debug!(%group, error = fleet_redis::connect::chain(&e), "recording the scaling call failed");
    }
}

/// The seed's escape hatch: the claim's shutdown streak starts again, so the controller fires the
/// shutdown on its next pass.
pub async fn reset_shutdown_attempts<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    c: &Claim,
    now: DateTime<Utc>,
) -> Result<Claim, RequestError> {
    let next = c.reset_shutdown_attempts();
    let mut entry = Entry::of(&next, Event::Warned, now);
    entry.detail = Some("shutdown attempts reset by an operator".to_owned());
    if store.write(c, &next, Some(&entry)).await? {
        Ok(next)
    } else {
        Err(RequestError::Raced(c.name.clone()))
    }
}

/// What an operator's reset of a slot's failure streak found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreakReset {
    /// The streak was reset: the slot's last claim failed attempt `was` of a streak that still
    /// counted.
    Reset { was: u32, spent: bool },
    /// Nothing to reset: the slot has no failure streak that counts (none, or it already ended).
    NoStreak,
}

/// The operator's way back for a slot that spent its attempts (SPEC §3.5): its failure streak is
/// reset, so the slot is offered to requests again and its next claim is attempt 1.
pub async fn reset_failure_streak<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    group: &CatalogGroup,
    slot: &BenchName,
    now: DateTime<Utc>,
) -> Result<StreakReset, RequestError> {
    // The digest moves only when a claim on the slot ends: a bounded retry covers that race.
    for _ in 0..8 {
        let seed = store.seed(&group.name, slot).await?;
        let streak = failure_streak(seed.last.as_ref(), now, &group.timings);
        let Some(last) = seed.last.as_ref().filter(|_| streak > 0) else {
            return Ok(StreakReset::NoStreak);
        };
        if store
            .swap_digest(&group.name, slot, &seed, &last.reset_streak(now))
            .await?
        {
            return Ok(StreakReset::Reset {
                was: streak,
                spent: streak >= group.timings.max_attempts,
            });
        }
    }
    Err(RequestError::Store(ClaimStoreError::Reply(format!(
        "the last claim of {slot} kept changing; try again"
    ))))
}

/// Dismisses a failed claim cluster-autoscaler deleted (SPEC §6.3): it stops being reported, its
/// digest (and so the slot's failure streak) stays, and its timeline records why.
pub async fn dismiss_failed<C: ConnectionLike + Clone + Send>(
    store: &ClaimStore<C>,
    c: &Claim,
    now: DateTime<Utc>,
    timeline_ttl: std::time::Duration,
) -> Result<(), RequestError> {
    if c.phase != claim::Phase::Failed {
        return Err(RequestError::Ended {
            claim: c.name.clone(),
            phase: c.phase,
        });
    }
    let mut entry = Entry::of(c, Event::Warned, now);
    entry.detail = Some("dismissed: cluster-autoscaler deleted the failed instance".to_owned());
    if store.delete(c, Some(&entry), timeline_ttl).await? {
        Ok(())
    } else {
        Err(RequestError::Raced(c.name.clone()))
    }
}
