//! The changes cluster-autoscaler asks of a group (SPEC §6.3): IncreaseSize, DeleteNodes and
//! DecreaseTargetSize, each under the group's lock, written by the leader through the command
//! layer, judged by `domain::sizing` from a fresh read, and judged again from a fresh read each
//! time a concurrent write (the controller's) moved a claim first.

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::info;

use crate::config::Group;
use crate::domain::claim::{Call, Claim, Reason};
use crate::domain::history::ScaleAction;
use crate::domain::name::BenchName;
use crate::domain::sizing::{self, Fake, Removal, Removed};
use crate::requests::{self, Cancelled, RequestError};
use crate::store::claims::ClaimStore;

use super::super::current::Settings;
use super::super::error::ProviderError;
use super::{Fresh, Groups};

/// How often a change re-reads and retries when a concurrent write (the controller's) moved a
/// claim between the read and the write.
const RACE_RETRIES: usize = 8;

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Groups<C> {
    /// IncreaseSize: `delta` new claims on the group's best free slots, all or none.
    pub async fn increase(
        &self,
        settings: &Settings,
        group: &Group,
        delta: usize,
    ) -> Result<(), ProviderError> {
        let writer = self.leader.writer(&self.store)?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let refused = |refused| ProviderError::Increase {
            group: group.name.clone(),
            refused,
            cooldown: group.timings.failed_slot_cooldown,
        };
        let Fresh { claims, ops, now } = self.fresh(&group.name).await?;
        let target = sizing::target(&claims);
        sizing::check_increase(target, delta, group.max_size).map_err(refused)?;
        let room = self
            .room(&settings.config, group, &claims, &ops, now)
            .await?;
        let slots = settings.config.slots_of(&group.name).count();
        let chosen = sizing::pick_increase(room, delta, group.max_size, slots).map_err(refused)?;
        let catalog_group =
            settings
                .catalog()
                .group(&group.name)
                .ok_or(ProviderError::Internal(
                    "the group is missing from its own catalog",
                ))?;
        // All or nothing, in one step: a refused call leaves the target where it was.
        let made =
            requests::claim_slots(&writer, catalog_group, &chosen, now, Call::IncreaseSize).await?;
        // The snapshot a stale read would answer from follows the change.
        let _ = self.fresh(&group.name).await;
        info!(
            group = %group.name,
            delta,
            target = target + delta,
            slots = ?made.iter().map(|c| c.slot.to_string()).collect::<Vec<_>>(),
            "IncreaseSize: claims created"
        );
        Ok(())
    }

    /// DeleteNodes: each named slot's machine removed (SPEC §6.3), the registered ones only down
    /// to the min size. What was given back is one scaling record, even when a later slot fails.
    pub async fn delete(
        &self,
        group: &Group,
        named: &[(BenchName, Fake)],
    ) -> Result<(), ProviderError> {
        let writer = self.leader.writer(&self.store)?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let Fresh { claims, now, .. } = self.fresh(&group.name).await?;
        sizing::check_delete(named, &claims, group.min_size).map_err(|below| {
            ProviderError::BelowMin {
                group: group.name.clone(),
                below,
            }
        })?;
        let mut removed = Vec::new();
        let mut given_back = 0;
        for (slot, fake) in named {
            let what = match self.remove(&writer, group, slot, *fake, &claims, now).await {
                Ok(what) => what,
                Err(e) => {
                    // What was given back before the failure is still a scaling call.
                    if given_back > 0 {
                        requests::scaled(
                            &writer,
                            &group.name,
                            now,
                            ScaleAction::Delete,
                            given_back,
                        )
                        .await;
                    }
                    return Err(e);
                }
            };
            if let Some(what) = what {
                given_back += usize::from(what.gives_back());
                removed.push(format!("{slot} ({})", what.as_str()));
            }
        }
        if given_back > 0 {
            requests::scaled(&writer, &group.name, now, ScaleAction::Delete, given_back).await;
        }
        // The snapshot a stale read would answer from follows the change.
        let after = self
            .fresh(&group.name)
            .await
            .map(|f| sizing::target(&f.claims))
            .ok();
        info!(group = %group.name, removed = ?removed, target = ?after, "DeleteNodes");
        Ok(())
    }

    /// Removes one slot's machine for DeleteNodes (`sizing::removal`), judging from `claims` and
    /// again from a fresh read each time a concurrent write moved the claim first. Returns what
    /// it did, `None` when there was nothing to remove.
    async fn remove(
        &self,
        writer: &ClaimStore<C>,
        group: &Group,
        slot: &BenchName,
        fake: Fake,
        claims: &[Claim],
        now: DateTime<Utc>,
    ) -> Result<Option<Removed>, ProviderError> {
        let ttl = group.timings.ttl_after_finished;
        let mut fresh = None;
        for _ in 0..RACE_RETRIES {
            let claims = fresh.as_ref().map_or(claims, |f: &Fresh| &f.claims);
            let result = match sizing::removal(slot, fake, claims) {
                Removal::Nothing => return Ok(None),
                Removal::Cancel(c) => requests::cancel(writer, c, Reason::NodeDeleted, now, ttl)
                    .await
                    .map(|done| match done {
                        Cancelled::Deleted => Removed::Cancelled,
                        Cancelled::Marked => Removed::PoweringOff,
                    }),
                Removal::Dismiss(c) => requests::dismiss_failed(writer, c, now, ttl)
                    .await
                    .map(|()| Removed::Dismissed),
            };
            match result {
                Ok(what) => return Ok(Some(what)),
                Err(RequestError::Raced(_)) => fresh = Some(self.fresh(&group.name).await?),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ProviderError::KeptChanging(slot.clone()))
    }

    /// DecreaseTargetSize: `wanted` pending requests taken back, newest first (SPEC §6.3); never
    /// a machine that exists, never below the min size.
    pub async fn decrease(&self, group: &Group, wanted: usize) -> Result<(), ProviderError> {
        let writer = self.leader.writer(&self.store)?;
        let lock = self.lock(&group.name);
        let _held = lock.lock().await;
        let Fresh { claims, now, .. } = self.fresh(&group.name).await?;
        let target = sizing::target(&claims);
        sizing::check_decrease(&claims, wanted, group.min_size).map_err(|refused| {
            ProviderError::Decrease {
                group: group.name.clone(),
                refused,
            }
        })?;
        let mut claims: Vec<Claim> = claims.to_vec();
        let mut taken = 0;
        let mut races = 0;
        while taken < wanted {
            let Some(c) = sizing::next_to_take_back(&claims).cloned() else {
                // The controller started booting the rest meanwhile: those exist now.
                if taken > 0 {
                    requests::scaled(&writer, &group.name, now, ScaleAction::Decrease, taken).await;
                }
                let _ = self.fresh(&group.name).await;
                return Err(ProviderError::Overtaken {
                    group: group.name.clone(),
                    taken,
                    wanted,
                });
            };
            let reason = Reason::CancelledByDecreaseTargetSize;
            let ttl = group.timings.ttl_after_finished;
            match requests::cancel(&writer, &c, reason, now, ttl).await {
                Ok(_) => {
                    taken += 1;
                    claims.retain(|k| k.name != c.name);
                }
                Err(RequestError::Raced(_)) if races < RACE_RETRIES => {
                    races += 1;
                    claims = self.fresh(&group.name).await?.claims.to_vec();
                }
                Err(e) => {
                    if taken > 0 {
                        requests::scaled(&writer, &group.name, now, ScaleAction::Decrease, taken)
                            .await;
                    }
                    return Err(e.into());
                }
            }
        }
        requests::scaled(&writer, &group.name, now, ScaleAction::Decrease, taken).await;
        // The snapshot a stale read would answer from follows the change.
        let _ = self.fresh(&group.name).await;
        info!(group = %group.name, wanted, target = target - wanted, "DecreaseTargetSize: pending claims cancelled");
        Ok(())
    }
}
