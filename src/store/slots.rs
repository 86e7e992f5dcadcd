//! The slots' records in the claim store (SPEC §4.3, §4.7): each slot's status as the controller
//! last published it and its last-claim digest, read for a pass, for the views, or to seed a new
//! claim's attempt; the statuses written back, and a digest swapped. Every call is one round
//! trip.
//!
//! The claims themselves are in `claims`: a claim's terminal write leaves its slot's digest, in
//! the same script.

use super::conn::{Order, query_by_tag};
use redis::aio::ConnectionLike;

use crate::domain::claim::LastClaim;
use crate::domain::name::{BenchName, GroupName};

use super::claims::{ClaimStore, ClaimStoreError, GroupView, Seed, SlotStatus, json};
use super::script::{Script, eval, script};

const WRITE_SLOTS: Script = script!("slots_write.lua");
const SWAP_DIGEST: Script = script!("digest_swap.lua");

/// A slot's stored status and digest, decoded; a value that does not decode reads as none.
fn decoded(
    status: Option<String>,
    digest: Option<String>,
) -> (Option<SlotStatus>, Option<LastClaim>) {
    (
        status.and_then(|s| serde_json::from_str(&s).ok()),
        digest.and_then(|d| serde_json::from_str(&d).ok()),
    )
}

impl<C: ConnectionLike + Clone + Send> ClaimStore<C> {
    /// Reads a slot's last-claim digest, to seed a new claim's attempt.
    pub async fn seed(&self, group: &GroupName, slot: &BenchName) -> Result<Seed, ClaimStoreError> {
        let mut seeds = self.seeds(group, std::slice::from_ref(slot)).await?;
        seeds
            .pop()
            .ok_or_else(|| ClaimStoreError::Reply("MGET of one key returned nothing".to_owned()))
    }

    /// Replaces the slot's digest `seed` with `next` if it has not moved since it was read;
    /// returns whether it was replaced.
    pub async fn swap_digest(
        &self,
        group: &GroupName,
        slot: &BenchName,
        seed: &Seed,
        next: &LastClaim,
    ) -> Result<bool, ClaimStoreError> {
        let mut conn = self.shell.conn();
        let swapped: i64 = eval(
            SWAP_DIGEST,
            &[self.shell.keys().group(group).last_claim(slot)],
        )
        .arg(&seed.raw)
        .arg(json("a last-claim digest", next)?)
        .query_async(&mut conn)
        .await
        .map_err(|source| ClaimStoreError::WriteDigest {
            slot: slot.clone(),
            source,
        })?;
        Ok(swapped == 1)
    }

    /// The seeds of several slots of a group, read in one round trip.
    pub async fn seeds(
        &self,
        group: &GroupName,
        slots: &[BenchName],
    ) -> Result<Vec<Seed>, ClaimStoreError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let g = self.shell.keys().group(group);
        let mut conn = self.shell.conn();
        let raws: Vec<Option<String>> = redis::cmd("MGET")
            .arg(slots.iter().map(|s| g.last_claim(s)).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::ReadSlots {
                group: group.clone(),
                source,
            })?;
        Ok(raws
            .into_iter()
            .map(|raw| {
                let raw = raw.unwrap_or_default();
                Seed {
                    last: serde_json::from_str(&raw).ok(),
                    raw,
                }
            })
            .collect())
    }

    /// Reads the statuses and last-claim digests of a group's slots, in one round trip.
    #[allow(clippy::type_complexity)]
    pub async fn read_slots(
        &self,
        group: &GroupName,
        slots: &[BenchName],
    ) -> Result<Vec<(Option<SlotStatus>, Option<LastClaim>)>, ClaimStoreError> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let g = self.shell.keys().group(group);
        let mut pipe = redis::pipe();
        pipe.cmd("MGET")
            .arg(slots.iter().map(|s| g.slot(s)).collect::<Vec<_>>());
        pipe.cmd("MGET")
            .arg(slots.iter().map(|s| g.last_claim(s)).collect::<Vec<_>>());
        let mut conn = self.shell.conn();
        let (statuses, digests): (Vec<Option<String>>, Vec<Option<String>>) = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::ReadSlots {
                group: group.clone(),
                source,
            })?;
        Ok(statuses
            .into_iter()
            .zip(digests)
            .map(|(s, d)| decoded(s, d))
            .collect())
    }

    /// What the views show of each group beside its claims: every slot's status and last-claim
    /// digest, and the group's last scaling call, for all `groups` in one round trip.
    pub async fn read_views(
        &self,
        groups: &[(GroupName, Vec<BenchName>)],
    ) -> Result<Vec<GroupView>, ClaimStoreError> {
        let Some((first, _)) = groups.first() else {
            return Ok(Vec::new());
        };
        let replies: Vec<redis::Value> =
            query_by_tag(&self.shell.conn(), &self.views_parts(groups), Order::Any)
                .await
                .map_err(|source| ClaimStoreError::ReadSlots {
                    group: first.clone(),
                    source,
                })?;
        let mut replies = replies.into_iter();
        groups
            .iter()
            .map(|(group, slots)| view(group, slots.is_empty(), &mut replies))
            .collect()
    }

    /// Three commands a group: its scale record, its slots' statuses, their digests; one part a
    /// group (its keys share its hash tag: one Cluster slot).
    fn views_parts(&self, groups: &[(GroupName, Vec<BenchName>)]) -> Vec<redis::Pipeline> {
        let mut parts = Vec::with_capacity(groups.len());
        for (group, slots) in groups {
            let mut pipe = redis::pipe();
            let g = self.shell.keys().group(group);
            pipe.cmd("GET").arg(g.last_scale());
            // MGET needs a key: an empty group asks for its scale record twice instead.
            let statuses: Vec<String> = slots.iter().map(|s| g.slot(s)).collect();
            let digests: Vec<String> = slots.iter().map(|s| g.last_claim(s)).collect();
            pipe.cmd("MGET").arg(if slots.is_empty() {
                vec![g.last_scale()]
            } else {
                statuses
            });
            pipe.cmd("MGET").arg(if slots.is_empty() {
                vec![g.last_scale()]
            } else {
                digests
            });
            parts.push(pipe);
        }
        parts
    }

    /// Writes slot statuses, in one round trip, fenced like every controller write.
    pub async fn write_slots(
        &self,
        group: &GroupName,
        statuses: &[(BenchName, SlotStatus)],
    ) -> Result<(), ClaimStoreError> {
        if statuses.is_empty() {
            return Ok(());
        }
        let g = self.shell.keys().group(group);
        let mut keys = vec![g.fence()];
        keys.extend(statuses.iter().map(|(slot, _)| g.slot(slot)));
        let mut cmd = eval(WRITE_SLOTS, &keys);
        cmd.arg(self.token());
        for (_, status) in statuses {
            cmd.arg(json("a slot status", status)?);
        }
        let mut conn = self.shell.conn();
        let written: i64 =
            cmd.query_async(&mut conn)
                .await
                .map_err(|source| ClaimStoreError::WriteSlots {
                    group: group.clone(),
                    source,
                })?;
        if written == 1 {
            Ok(())
        } else {
            Err(ClaimStoreError::Fenced {
                group: group.clone(),
            })
        }
    }
}

/// One group's view from its three replies (see `views_pipeline`).
fn view(
    group: &GroupName,
    empty: bool,
    replies: &mut impl Iterator<Item = redis::Value>,
) -> Result<GroupView, ClaimStoreError> {
    let mut next = || -> Result<redis::Value, ClaimStoreError> {
        replies.next().ok_or_else(|| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source: redis::RedisError::from((
                redis::ErrorKind::Parse,
                "a reply is missing from the pipeline",
            )),
        })
    };
    let parse = |v: redis::Value| -> Result<Vec<Option<String>>, ClaimStoreError> {
        redis::from_redis_value(v).map_err(|source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source: source.into(),
        })
    };
    let scale: Option<String> =
        redis::from_redis_value(next()?).map_err(|source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source: source.into(),
        })?;
    let statuses = parse(next()?)?;
    let digests = parse(next()?)?;
    let slots = if empty {
        Vec::new()
    } else {
        statuses
            .into_iter()
            .zip(digests)
            .map(|(s, d)| decoded(s, d))
            .collect()
    };
    Ok(GroupView {
        slots,
        last_scale: scale.and_then(|r| serde_json::from_str(&r).ok()),
    })
}
