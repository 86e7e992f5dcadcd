//! A group's claims read (SPEC §4.3): every claim in the group's index, the slots' operation
//! records and the server's time, as they all stood at one moment.
//!
//! A small group is read by one script (`group_read.lua`), atomic by itself. A large one is read
//! in two round trips that move no value through Lua: the listing (the group's count of changes,
//! the index, the operation records, the time), then the claims by `MGET`s of a thousand keys and
//! the count again. Every script that writes a claim, the index or a record adds one to the count
//! in the same step, so an unmoved count proves nothing was written in between: the read is the
//! one the script would have made. The script spent about 3 ms of Redis's single thread on a
//! thousand claims, turning each into a Lua string and back (150 ms for 50 000, quiet, while
//! every beat waited); the `MGET`s spend about a sixth of that, a millisecond at a time, with the
//! beats served between them. A count that moved is read again; after three, the script reads.

use redis::aio::ConnectionLike;

use crate::domain::claim::Claim;
use crate::domain::name::GroupName;

use super::claims::{ClaimStore, ClaimStoreError, GroupClaims};
use super::script::{Script, eval_ro, script, server_time};

const READ_GROUP: Script = script!("group_read.lua");

/// From how many claims a group is read in batches at its next read.
const LARGE: usize = 500;

/// Claim keys a batch's `MGET` asks for.
const BATCH: usize = 250;

/// Batched reads tried while the group's count keeps moving, before the script reads it.
const TRIES: usize = 3;

/// A group's read as the script returns it: the server's time, the claim names, their values
/// (in the names' order, `None` for one deleted since it was listed) and the operation records'
/// fields and values.
type Reply = (
    (String, String),
    Vec<String>,
    Vec<Option<String>>,
    Vec<(String, String)>,
);

/// The listing of a batched read: the count of changes, the claim names, the operation
/// records, the server's time.
type Listing = (
    Option<String>,
    Vec<String>,
    Vec<(String, String)>,
    (String, String),
);

impl<C: ConnectionLike + Clone + Send> ClaimStore<C> {
    /// Reads the claims of every group in `groups`, one group at a time. Not all in one
    /// pipeline: a small group's read is a script, and Redis runs every script of a pipeline back
    /// to back when they arrive together (they fit in one read of its socket), so a hundred groups
    /// held every bench's beat for 300 ms (SPEC §4.3, §5.7). One after another, Redis serves the
    /// beats between them.
    pub async fn read_groups(
        &self,
        groups: &[GroupName],
    ) -> Result<Vec<GroupClaims>, ClaimStoreError> {
        let mut read = Vec::with_capacity(groups.len());
        for group in groups {
            let reply =
                self.read_group(group)
                    .await
                    .map_err(|source| ClaimStoreError::ReadGroup {
                        group: group.clone(),
                        source,
                    })?;
            read.push(decode(group, reply)?);
        }
        Ok(read)
    }

    async fn read_group(&self, group: &GroupName) -> redis::RedisResult<Reply> {
        let large = self.large.lock().is_ok_and(|l| l.contains(group));
        let mut reply = None;
        if large {
            for _ in 0..TRIES {
                reply = self.read_in_batches(group).await?;
                if reply.is_some() {
                    break;
                }
            }
        }
        let reply = match reply {
            Some(reply) => reply,
            None => {
                let g = self.keys().group(group);
                eval_ro(READ_GROUP, &[g.claims(), g.operations()])
                    .arg(g.claim_prefix())
                    .query_async(&mut self.conn())
                    .await?
            }
        };
        if let Ok(mut l) = self.large.lock() {
            if reply.1.len() >= LARGE {
                l.insert(group.clone());
            } else {
                l.remove(group);
            }
        }
        Ok(reply)
    }

    /// The listing, then the claims and the count again. `None` when the count moved between
    /// the two: something was written while the group was read.
    async fn read_in_batches(&self, group: &GroupName) -> redis::RedisResult<Option<Reply>> {
        let g = self.keys().group(group);
        let mut conn = self.conn();
        let (before, names, ops, time): Listing = redis::pipe()
            .get(g.changes())
            .zrange(g.claims(), 0, -1)
            .hgetall(g.operations())
            .cmd("TIME")
            .query_async(&mut conn)
            .await?;
        let prefix = g.claim_prefix();
        let mut pipe = redis::pipe();
        let mut key = String::with_capacity(prefix.len() + 64);
        for batch in names.chunks(BATCH) {
            let mget = pipe.cmd("MGET");
            for name in batch {
                key.clear();
                key.push_str(&prefix);
                key.push_str(name);
                mget.arg(&key);
            }
        }
        pipe.get(g.changes());
        let mut replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        let after: Option<String> = match replies.pop() {
            Some(v) => redis::from_redis_value(v)?,
            None => None,
        };
        if after != before {
            return Ok(None);
        }
        let mut values = Vec::with_capacity(names.len());
        for batch in replies {
            let batch: Vec<Option<String>> = redis::from_redis_value(batch)?;
            values.extend(batch);
        }
        if values.len() != names.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "the claims read",
                format!("{} claims listed but {} read", names.len(), values.len()),
            )));
        }
        Ok(Some((time, names, values, ops)))
    }
}

/// A group's read turned into its claims; a claim that does not decode is reported with what
/// can still be read of it.
fn decode(group: &GroupName, reply: Reply) -> Result<GroupClaims, ClaimStoreError> {
    let ((secs, micros), names, values, ops) = reply;
    let now = server_time(&secs, &micros)
        .ok_or_else(|| ClaimStoreError::Reply(format!("TIME was {secs:?} {micros:?}")))?;
    let mut claims = Vec::with_capacity(names.len());
    let mut unreadable = Vec::new();
    let mut unreadable_slots = Vec::new();
    for (name, value) in names.into_iter().zip(values) {
        match value
            .as_deref()
            .map(|v| (v, serde_json::from_str::<Claim>(v)))
        {
            Some((_, Ok(claim))) => claims.push(claim),
            Some((raw, Err(e))) => {
                // What can still be read of it: the slot it names.
                let slot = serde_json::from_str::<serde_json::Value>(raw)
                    .ok()
                    .and_then(|v| v.get("slot").and_then(|s| s.as_str()).map(str::to_owned));
                unreadable_slots.push(slot);
                unreadable.push((name, e.to_string()));
            }
            // Listed but gone: deleted between the index and the read. Not a claim.
            None => {}
        }
    }
    Ok(GroupClaims {
        group: group.clone(),
        now,
        claims,
        unreadable,
        unreadable_slots,
        operations: super::operation_record::decode(ops),
    })
}
