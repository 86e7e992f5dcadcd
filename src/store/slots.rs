//! The slots' records in the claim store (SPEC §4.3, §4.7): each slot's status as the controller
//! last published it and its last-claim digest, read for a pass, for the views, or to seed a new
//! claim's attempt; the statuses written back, and a digest swapped. Every call is one round
//! trip, of commands of `KEYS_PER_COMMAND` keys at most each.
//!
//! The claims themselves are in `claims`: a claim's terminal write leaves its slot's digest, in
//! the same script.

use fleet_redis::conn::{Order, query_by_tag};
use redis::aio::ConnectionLike;

use crate::domain::claim::LastClaim;
use crate::domain::name::{BenchName, GroupName};

use super::claims::{ClaimStore, ClaimStoreError, GroupView, Seed, SlotStatus, encodes, json};
use super::script::{Script, eval, pipelined, script};
use super::{KEYS_PER_COMMAND, mget, mget_chunked, mget_joined};

const WRITE_SLOTS: Script = script!("slots_write.lua");
const SWAP_DIGEST: Script = script!("digest_swap.lua");

/// The slots whose statuses [`ClaimStore::read_statuses`] reads a round trip: a piece's replies
/// are about 3 MB, and 100 000 slots are ten round trips, once in a leader's life.
pub const STATUS_PIECE: usize = 10_000;

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
        let failed = |source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source,
        };
        let keys: Vec<String> = slots.iter().map(|s| g.last_claim(s)).collect();
        let raws = mget(&mut conn, &keys).await.map_err(failed)?;
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
        mget_chunked(
            &mut pipe,
            &slots.iter().map(|s| g.slot(s)).collect::<Vec<_>>(),
        );
        mget_chunked(
            &mut pipe,
            &slots.iter().map(|s| g.last_claim(s)).collect::<Vec<_>>(),
        );
        let mut conn = self.shell.conn();
        let failed = |source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source,
        };
        let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(failed)?;
        let mut replies = replies.into_iter();
        let statuses = mget_joined(&mut replies, slots.len()).map_err(failed)?;
        let digests = mget_joined(&mut replies, slots.len()).map_err(failed)?;
        Ok(statuses
            .into_iter()
            .zip(digests)
            .map(|(s, d)| decoded(s, d))
            .collect())
    }

    /// Reads the statuses of a group's slots, the slots `STATUS_PIECE` a round trip, and gives
    /// `into` each status that decodes as its piece comes (a value that does not decode is
    /// none): ⌈slots / `STATUS_PIECE`⌉ round trips (SPEC §1.4). A new leader fills its memory
    /// of what it last reported this way: read whole, with the digests it has no use for, the
    /// replies were 30 MB beside the 30 MB map they fill at 100 000 slots, the top of its first
    /// pass (docs/measurements.md).
    pub async fn read_statuses(
        &self,
        group: &GroupName,
        slots: &[&BenchName],
        mut into: impl FnMut(&BenchName, SlotStatus),
    ) -> Result<(), ClaimStoreError> {
        let g = self.shell.keys().group(group);
        let mut conn = self.shell.conn();
        let failed = |source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source,
        };
        for part in slots.chunks(STATUS_PIECE) {
            let keys: Vec<String> = part.iter().map(|s| g.slot(s)).collect();
            let statuses = mget(&mut conn, &keys).await.map_err(failed)?;
            for (slot, status) in part.iter().zip(statuses) {
                if let Some(status) = status.and_then(|s| serde_json::from_str(&s).ok()) {
                    into(slot, status);
                }
            }
        }
        Ok(())
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
            .map(|(group, slots)| view(group, slots.len(), &mut replies))
            .collect()
    }

    /// A group's scale record, its slots' statuses, their digests (the `MGET`s of
    /// `KEYS_PER_COMMAND` keys at most); one part a group (its keys share its hash tag: one
    /// Cluster slot).
    fn views_parts(&self, groups: &[(GroupName, Vec<BenchName>)]) -> Vec<redis::Pipeline> {
        let mut parts = Vec::with_capacity(groups.len());
        for (group, slots) in groups {
            let mut pipe = redis::pipe();
            let g = self.shell.keys().group(group);
            pipe.cmd("GET").arg(g.last_scale());
            let statuses: Vec<String> = slots.iter().map(|s| g.slot(s)).collect();
            mget_chunked(&mut pipe, &statuses);
            let digests: Vec<String> = slots.iter().map(|s| g.last_claim(s)).collect();
            mget_chunked(&mut pipe, &digests);
            parts.push(pipe);
        }
        parts
    }

    /// Writes slot statuses, in one round trip, fenced like every controller write: one script
    /// of `KEYS_PER_COMMAND` statuses at most, each checking the fence, so the first pass over
    /// 100 000 slots holds Redis for 400 short scripts, not one long one. A status is the
    /// leader's word on its own slot, so a writer fenced between two scripts leaves the first
    /// written (the next leader writes every status again) and is refused as a whole.
    pub async fn write_slots(
        &self,
        group: &GroupName,
        statuses: &[(BenchName, SlotStatus)],
    ) -> Result<(), ClaimStoreError> {
        if statuses.is_empty() {
            return Ok(());
        }
        let g = self.shell.keys().group(group);
        // Each status is encoded as its script is built, not all first: at 100 000 slots the
        // encoded statuses of a new leader's first pass were 35 MB at once, the process's peak
        // Whether each encodes is known before anything is sent, at no allocation.
        for (_, status) in statuses {
            encodes("a slot status", status)?;
        }
        let chunks: Vec<_> = statuses.chunks(KEYS_PER_COMMAND).collect();
        let conn = self.shell.conn();
        let failed = |source| ClaimStoreError::WriteSlots {
            group: group.clone(),
            source,
        };
        let answers = pipelined(&conn, chunks.len(), |i, start| {
            let chunk = chunks[i];
            let mut keys = vec![g.fence()];
            keys.extend(chunk.iter().map(|(slot, _)| g.slot(slot)));
            let mut cmd = start(WRITE_SLOTS, &keys);
            cmd.arg(self.token());
            for (_, status) in chunk {
                // Encodes: checked above.
                cmd.arg(serde_json::to_vec(status).unwrap_or_default());
            }
            cmd
        })
        .await
        .map_err(failed)?;
        let written = answers
            .into_iter()
            .map(redis::from_redis_value::<i64>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| failed(e.into()))?;
        if written.iter().all(|w| *w == 1) {
            Ok(())
        } else {
            Err(ClaimStoreError::Fenced {
                group: group.clone(),
            })
        }
    }
}

/// One group's view of `n` slots from its replies (see `views_parts`).
fn view(
    group: &GroupName,
    n: usize,
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
    let scale: Option<String> =
        redis::from_redis_value(next()?).map_err(|source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source: source.into(),
        })?;
    let joined = |replies: &mut _| {
        mget_joined(replies, n).map_err(|source| ClaimStoreError::ReadSlots {
            group: group.clone(),
            source,
        })
    };
    let statuses = joined(replies)?;
    let digests = joined(replies)?;
    let slots = statuses
        .into_iter()
        .zip(digests)
        .map(|(s, d)| decoded(s, d))
        .collect();
    Ok(GroupView {
        slots,
        last_scale: scale.and_then(|r| serde_json::from_str(&r).ok()),
    })
}
