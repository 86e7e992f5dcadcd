//! The claim store: NodeClaims, their timelines, slot statuses and last-claim digests, per group
//! (SPEC §4.3).
//!
//! Every write is one round trip and atomic: creating a claim is one script with the check that
//! its slot has no live claim, and every later write is a compare-and-set on the claim's version,
//! so two writers can never both win and a refused write writes nothing. The store does not
//! decide: the controller passes it the claim `Claim::apply` returned.
//!
//! This file is the store itself (its handle, its error, the values it reads and writes) and the
//! claims' own writes and reads. The store's other records extend `ClaimStore` in files of their
//! own: the slots' statuses and digests in `slots`, the groups in `groups`, the operation records
//! in `operations`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use serde::{Deserialize, Serialize};

use crate::domain::claim::{Claim, LastClaim};
use crate::domain::history::ScaleAction;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::domain::operation::SlotOp;

use super::fenced::Fenced;
use super::keys::Keys;
use super::operation_record::Operations;
use super::script::{Script, eval, script, server_time};

const CREATE: Script = script!("claim_create.lua");
const WRITE: Script = script!("claim_write.lua");
const DELETE: Script = script!("claim_delete.lua");
const RAISE_FENCE: Script = script!("fence_raise.lua");

/// The most entries a claim's timeline keeps; older ones are dropped as new ones come.
pub const TIMELINE_CAP: usize = 64;

/// The most ended claims (failed or completed) a group keeps (SPEC §4.3). Ended claims
/// are kept `ttl_after_finished` for the views and cluster-autoscaler, but a provider that asks
/// as fast as it can ends claims without limit in that hour (it grew Redis some 470 MB an hour):
/// past this many, the terminal write that ends one more collects the oldest, with its timeline,
/// in the same step. A slot's last claim lives on in its digest (SPEC §3.10), which no collection
/// touches. A thousand claims with timelines of a few kB each are a few MB a group.
pub const ENDED_KEPT: usize = 1_000;

/// A failed claim-store operation, named after the operation, with the claim or group.
#[derive(Debug, thiserror::Error)]
pub enum ClaimStoreError {
    #[error("creating claim {claim}")]
    Create {
        claim: ClaimName,
        #[source]
        source: redis::RedisError,
    },
    #[error("writing claim {claim}")]
    Write {
        claim: ClaimName,
        #[source]
        source: redis::RedisError,
    },
    #[error("deleting claim {claim}")]
    Delete {
        claim: ClaimName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the claims of group {group}")]
    ReadGroup {
        group: GroupName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the slots of group {group}")]
    ReadSlots {
        group: GroupName,
        #[source]
        source: redis::RedisError,
    },
    #[error("writing the slot statuses of group {group}")]
    WriteSlots {
        group: GroupName,
        #[source]
        source: redis::RedisError,
    },
    #[error("writing the last-claim digest of slot {slot}")]
    WriteDigest {
        slot: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the timeline of claim {claim}")]
    Timeline {
        claim: ClaimName,
        #[source]
        source: redis::RedisError,
    },
    #[error("encoding {what}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("reading or writing the set of groups")]
    Groups {
        #[source]
        source: redis::RedisError,
    },
    #[error("writing the operation record of slot {slot}")]
    Operation {
        slot: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("raising the fence of group {group}")]
    RaiseFence {
        group: GroupName,
        #[source]
        source: redis::RedisError,
    },
    #[error("a write to group {group} was refused: a newer leader holds the group's fence")]
    Fenced { group: GroupName },
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
}

pub use crate::domain::slot::{SlotStatus, SlotWaiting};
pub use crate::domain::timeline::{Entry, Event};

/// A group's last scaling call, as the requests record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastScale {
    pub at: DateTime<Utc>,
    pub action: ScaleAction,
    /// How many machines it asked for or gave back.
    pub count: u32,
}

/// A group as the views show it beside its claims ([`ClaimStore::read_views`]).
#[derive(Clone, Debug, Default)]
pub struct GroupView {
    /// Each slot's status and last-claim digest, in the order asked.
    pub slots: Vec<(Option<SlotStatus>, Option<LastClaim>)>,
    pub last_scale: Option<LastScale>,
}

/// The seed of a new claim's attempt: the slot's last-claim digest as the creator read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Seed {
    pub last: Option<LastClaim>,
    /// The digest's stored text: the create script checks it has not moved since. Read in
    /// `slots`, which reads the digests.
    pub(super) raw: String,
}

/// How a create ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    Created,
    /// The slot has a live claim already: this one.
    SlotTaken(ClaimName),
    /// A claim of that name exists.
    NameTaken,
    /// The slot's digest moved between the read and the create: read it again and retry.
    SeedMoved,
}

/// A group's claims as one read saw them, with the server's time of the read.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupClaims {
    pub group: GroupName,
    pub now: DateTime<Utc>,
    /// Shared with the copy a large group's read holds (`claims_read`), never copied from it:
    /// the copy of 50 000 claims was 11.6 MB of every pass at 100 000 slots.
    pub claims: std::sync::Arc<Vec<Claim>>,
    /// Claims whose stored JSON does not decode: reported, never acted on.
    pub unreadable: Vec<(String, String)>,
    /// The slot each unreadable claim names, when that much can be read; the controller takes
    /// no power action on those slots (or on the whole group, for one it cannot tell).
    pub unreadable_slots: Vec<Option<String>>,
    /// The slots' operation records (SPEC §5.4), read in the same step.
    pub operations: Operations,
}

/// The claim store over one connection.
#[derive(Clone)]
pub struct ClaimStore<C> {
    /// The connection, the keys, and the leadership token the writes carry (the controller's,
    /// and the provider's changes while it leads); none for operator requests (`fleet claim`,
    /// `fleet cancel`), which are not fenced.
    pub(super) shell: Fenced<C>,
    /// The groups this store read last as large, read in batches next, each with its claims as
    /// its last batched read found them (`claims_read`).
    pub(super) large: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<GroupName, Option<super::held::Held>>>,
    >,
    /// Whether this store's reads may run a script (the controller's), or read with plain
    /// commands alone (the views: a user that may run one script may run any, SPEC §7).
    pub(super) scripts: bool,
}

fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

pub(crate) fn json<T: Serialize>(what: &str, value: &T) -> Result<String, ClaimStoreError> {
    serde_json::to_string(value).map_err(|source| encode_error(what, source))
}

/// Whether `value` encodes as `json` would, found without keeping the text: for a write that
/// encodes each value only as its command is built, and must fail whole before sending any.
pub(crate) fn encodes<T: Serialize>(what: &str, value: &T) -> Result<(), ClaimStoreError> {
    serde_json::to_writer(std::io::sink(), value).map_err(|source| encode_error(what, source))
}

fn encode_error(what: &str, source: serde_json::Error) -> ClaimStoreError {
    ClaimStoreError::Encode {
        what: what.to_owned(),
        source,
    }
}

impl<C: ConnectionLike + Clone + Send> ClaimStore<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        Self {
            shell: Fenced::new(conn, keys),
            large: Default::default(),
            scripts: true,
        }
    }

    /// The same store, reading with plain commands alone (SPEC §7): the views, which run as a
    /// user that may run no script.
    pub fn without_scripts(self) -> Self {
        Self {
            scripts: false,
            ..self
        }
    }

    /// The same store, its writes carrying the leadership `token` (SPEC §5.1).
    pub fn fenced(&self, token: &str) -> Self {
        Self {
            shell: self.shell.fenced(token),
            ..self.clone()
        }
    }

    pub(crate) fn token(&self) -> &str {
        self.shell.token()
    }

    pub(crate) fn conn(&self) -> C {
        self.shell.conn.clone()
    }

    /// Raises `group`'s fence to `token`: from now on only writes carrying it are accepted.
    /// Returns false when a newer leader's token is already there.
    pub async fn raise_fence(
        &self,
        group: &GroupName,
        token: &str,
    ) -> Result<bool, ClaimStoreError> {
        let mut conn = self.shell.conn.clone();
        let raised: i64 = eval(RAISE_FENCE, &[self.shell.keys.group(group).fence()])
            .arg(token)
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::RaiseFence {
                group: group.clone(),
                source,
            })?;
        Ok(raised == 1)
    }

    pub fn keys(&self) -> &Keys {
        &self.shell.keys
    }

    /// Creates `claim`, atomic with the check that its slot has no live claim.
    pub async fn create(&self, claim: &Claim, seed: &Seed) -> Result<Created, ClaimStoreError> {
        Ok(self
            .create_all(std::slice::from_ref(claim), std::slice::from_ref(seed))
            .await?
            .map_or(Created::Created, |(_, refused)| refused))
    }

    /// Creates `claims` (of one group, each with the seed its attempt came from), all or none,
    /// each atomic with the check that its slot has no live claim. One round trip. Returns
    /// `None` when all were created, else the first refused claim's index and why.
    pub async fn create_all(
        &self,
        claims: &[Claim],
        seeds: &[Seed],
    ) -> Result<Option<(usize, Created)>, ClaimStoreError> {
        let Some(first) = claims.first() else {
            return Ok(None);
        };
        if claims.len() != seeds.len() || claims.iter().any(|c| c.group != first.group) {
            return Err(ClaimStoreError::Reply(
                "create_all takes claims of one group, each with its seed".to_owned(),
            ));
        }
        let g = self.shell.keys.group(&first.group);
        let mut keys = vec![g.claims(), g.fence(), g.wanted()];
        for c in claims {
            keys.extend([
                g.live(&c.slot),
                g.claim(&c.name),
                g.timeline(&c.name),
                g.last_claim(&c.slot),
            ]);
        }
        keys.push(g.changes());
        let mut cmd = eval(CREATE, &keys);
        cmd.arg(self.token())
            .arg(TIMELINE_CAP)
            .arg(g.claim_prefix());
        for (c, seed) in claims.iter().zip(seeds) {
            let entry = Entry::of(c, Event::Created, c.requested_at);
            cmd.arg(c.name.as_str())
                .arg(json("a claim", c)?)
                .arg(c.requested_at.timestamp_millis())
                .arg(json("a timeline entry", &entry)?)
                .arg(&seed.raw)
                .arg(flag(c.wants_machine()));
        }
        let mut conn = self.shell.conn.clone();
        let (code, index, detail): (i64, usize, String) = cmd
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::Create {
                claim: first.name.clone(),
                source,
            })?;
        let at = index.saturating_sub(1);
        match code {
            1 => Ok(None),
            0 => ClaimName::parse(&detail)
                .map(|holder| Some((at, Created::SlotTaken(holder))))
                .map_err(|e| ClaimStoreError::Reply(e.to_string())),
            -1 => Ok(Some((at, Created::NameTaken))),
            -2 => Ok(Some((at, Created::SeedMoved))),
            -3 => Err(ClaimStoreError::Fenced {
                group: first.group.clone(),
            }),
            other => Err(ClaimStoreError::Reply(format!("create returned {other}"))),
        }
    }

    /// Writes `next` over `old` if the stored claim is still at `old`'s version; returns whether
    /// it was written. A terminal `next` releases the slot and keeps its digest.
    pub async fn write(
        &self,
        old: &Claim,
        next: &Claim,
        entry: Option<&Entry>,
    ) -> Result<bool, ClaimStoreError> {
        self.write_recording(old, next, entry, None).await
    }

    /// `write`, which also makes `op` the slot's operation record in the same step: the write
    /// that records an operation before it runs (SPEC §5.4).
    pub async fn write_recording(
        &self,
        old: &Claim,
        next: &Claim,
        entry: Option<&Entry>,
        op: Option<&SlotOp>,
    ) -> Result<bool, ClaimStoreError> {
        let g = self.shell.keys.group(&old.group);
        let keys = [
            g.claim(&old.name),
            g.live(&old.slot),
            g.timeline(&old.name),
            g.last_claim(&old.slot),
            g.fence(),
            g.wanted(),
            g.operations(),
            g.changes(),
            g.ended(),
            g.claims(),
        ];
        let (op_slot, op_start) = Self::start_args(op, &old.slot)?;
        let terminal = next.phase.is_terminal();
        let digest = if terminal {
            json("a digest", &next.digest())?
        } else {
            String::new()
        };
        let entry = entry
            .map(|e| json("a timeline entry", e))
            .transpose()?
            .unwrap_or_default();
        let mut conn = self.shell.conn.clone();
        let (code, why): (i64, String) = eval(WRITE, &keys)
            .arg(old.version)
            .arg(json("a claim", next)?)
            .arg(if terminal { "1" } else { "0" })
            .arg(entry)
            .arg(TIMELINE_CAP)
            .arg(digest)
            .arg(old.name.as_str())
            .arg(self.token())
            .arg(flag(next.wants_machine()))
            .arg(op_slot)
            .arg(op_start)
            .arg(ENDED_KEPT)
            .arg(g.claim_prefix())
            .arg(g.timeline_prefix())
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::Write {
                claim: old.name.clone(),
                source,
            })?;
        settled(code, &why, &old.group)
    }

    /// Deletes `claim` (a pending claim cancelled, or a terminal one collected) if it is still at
    /// its version; its timeline lives on for `timeline_ttl`. Returns whether it was deleted.
    pub async fn delete(
        &self,
        claim: &Claim,
        entry: Option<&Entry>,
        timeline_ttl: Duration,
    ) -> Result<bool, ClaimStoreError> {
        let g = self.shell.keys.group(&claim.group);
        let keys = [
            g.claim(&claim.name),
            g.live(&claim.slot),
            g.claims(),
            g.timeline(&claim.name),
            g.fence(),
            g.wanted(),
            g.changes(),
            g.ended(),
        ];
        let entry = entry
            .map(|e| json("a timeline entry", e))
            .transpose()?
            .unwrap_or_default();
        let mut conn = self.shell.conn.clone();
        let (code, why): (i64, String) = eval(DELETE, &keys)
            .arg(claim.version)
            .arg(claim.name.as_str())
            .arg(entry)
            .arg(TIMELINE_CAP)
            .arg(
                u64::try_from(timeline_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            )
            .arg(self.token())
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::Delete {
                claim: claim.name.clone(),
                source,
            })?;
        settled(code, &why, &claim.group)
    }

    /// The server's time: every claim time is on the store's clock. The `EXISTS` of a key of
    /// the prefix's tag routes the pipeline on a Cluster: the clock is the node's that holds the
    /// lease, not a random node's.
    pub async fn now(&self) -> Result<DateTime<Utc>, ClaimStoreError> {
        let mut conn = self.shell.conn.clone();
        let (_, (secs, micros)): (i64, (String, String)) = redis::pipe()
            .cmd("EXISTS")
            .arg(self.shell.keys.leader())
            .cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(|e| ClaimStoreError::Reply(format!("TIME failed: {e}")))?;
        server_time(&secs, &micros)
            .ok_or_else(|| ClaimStoreError::Reply(format!("TIME was {secs:?} {micros:?}")))
    }

    /// A claim's timeline, oldest first.
    pub async fn timeline(
        &self,
        group: &GroupName,
        claim: &ClaimName,
    ) -> Result<Vec<Entry>, ClaimStoreError> {
        let mut conn = self.shell.conn.clone();
        let raw: Vec<String> = redis::cmd("LRANGE")
            .arg(self.shell.keys.group(group).timeline(claim))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::Timeline {
                claim: claim.clone(),
                source,
            })?;
        Ok(raw
            .iter()
            .filter_map(|e| serde_json::from_str(e).ok())
            .collect())
    }
}

/// A compare-and-set script's answer: written, refused (another writer won), or fenced.
fn settled(code: i64, why: &str, group: &GroupName) -> Result<bool, ClaimStoreError> {
    if why == "fenced" {
        return Err(ClaimStoreError::Fenced {
            group: group.clone(),
        });
    }
    Ok(code == 1)
}
