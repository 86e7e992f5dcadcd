//! A group's claims read (SPEC §4.3): every claim in the group's index, the slots' operation
//! records and the server's time, as they all stood at one moment.
//!
//! A small group is read by one script (`group_read.lua`), atomic by itself; a store without
//! scripts (the views, SPEC §7) reads every group in batches, as a large one. A large one is read
//! in two round trips that move no value through Lua: the listing (the group's count of changes,
//! the index, the operation records, the time), then the claims by `MGET`s of `BATCH` keys and
//! the count again. Every script that writes a claim, the index or a record moves the count on
//! in the same step (`count_change`), so an unmoved count proves nothing was written in between:
//! the read is the one the script would have made. The script spent about 3 ms of Redis's single thread on a
//! thousand claims, turning each into a Lua string and back (150 ms for 50 000, quiet, while
//! every beat waited); the `MGET`s spend about a sixth of that, a millisecond at a time, with the
//! beats served between them. A count that moved is read again; after three, the script reads.
//!
//! A large group's claims as its last batched read found them are held, with the count they were
//! read at and a digest of each claim's value. A listing that finds the same count before and
//! after it (its pipeline reads the count first and last) is served from that copy: nothing was
//! written since, so the claims are the ones held, and neither Redis nor the controller handles them
//! again (at rest, a 100 000-slot pass moved and decoded 50 000 claims of some 530 bytes, 27 MB, for
//! nothing). The count can only come back to a value already seen after a failover that lost
//! writes if a write gave it again, which `count_change` rules out (the server's time in µs). What
//! fleet's scripts do not write (a claim key edited by hand) the count cannot see: so the listing
//! also reads a tenth of the held claims (`CHECKS`), a different tenth each read, and a value whose
//! digest is not the one held reads the group again. Such an edit is seen within ten reads, and no
//! read is the one that reads a whole group again at rest (that read, every tenth pass, was the
//! p99 of a pass over 100 000 slots).

use redis::aio::ConnectionLike;

use crate::domain::claim::Claim;
use crate::domain::name::GroupName;

use super::claims::{ClaimStore, ClaimStoreError, GroupClaims};
use super::held::{Digests, Held, checked};
use super::script::{Script, eval_ro, script, server_time};

const READ_GROUP: Script = script!("group_read.lua");

/// From how many claims a group is read in batches at its next read.
const LARGE: usize = 500;

/// Claim keys a batch's `MGET` asks for.
const BATCH: usize = 250;

/// Batched reads tried while the group's count keeps moving, before the script reads it.
const TRIES: usize = 3;

/// Batched reads a store without scripts (a view) tries while the group's count keeps moving,
/// before it says so: a view has no script to fall back on (SPEC §7), and ten writes of one group
/// in a row, each between a listing and its read, is a controller rewriting the group's claims on
/// every pass.
const VIEW_TRIES: usize = 10;

/// A large group's read: the claims, or the claims held since an earlier one.
enum Read {
    /// A read of the claims; when the batched read made it, the count it was made at and the
    /// digests of the claims' values.
    Claims(Reply, Option<Fresh>),
    /// The held claims, with the listing's time and operation records.
    Held(Held, (String, String), Vec<(String, String)>),
}

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

/// What a batched read of the claims gives a copy to hold: the count it was made at, and each
/// listed claim's digest (`Digests`), in the listing's order.
struct Fresh {
    changes: String,
    digests: Digests,
}

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
            let claims = match self.read_group(group).await {
                Ok(Read::Claims(reply, changes)) => self.decode_and_hold(group, reply, changes)?,
                Ok(Read::Held(held, time, ops)) => self.serve_held(group, held, time, ops)?,
                Err(source) => {
                    return Err(ClaimStoreError::ReadGroup {
                        group: group.clone(),
                        source,
                    });
                }
            };
            read.push(claims);
        }
        Ok(read)
    }

    async fn read_group(&self, group: &GroupName) -> redis::RedisResult<Read> {
        // Taken out while the group is read: the copy goes back with the read it served or is
        // replaced by the read that made a new one.
        let held = match self.large.lock() {
            Ok(mut l) => l.get_mut(group).map(Option::take),
            Err(_) => None,
        };
        if !self.scripts {
            for _ in 0..VIEW_TRIES {
                if let Some(read) = self.read_in_batches(group, &mut None).await? {
                    return Ok(read);
                }
            }
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the group's claims changed under every read",
                format!("{VIEW_TRIES} reads in a row; try again"),
            )));
        }
        if let Some(mut held) = held {
            for _ in 0..TRIES {
                if let Some(read) = self.read_in_batches(group, &mut held).await? {
                    return Ok(read);
                }
            }
        }
        let g = self.shell.keys().group(group);
        let reply: Reply = eval_ro(READ_GROUP, &[g.claims(), g.operations()])
            .arg(g.claim_prefix())
            .query_async(&mut self.shell.conn())
            .await?;
        Ok(Read::Claims(reply, None))
    }

    /// Decodes a read of a group's claims and, for a large group read in batches, holds them.
    fn decode_and_hold(
        &self,
        group: &GroupName,
        reply: Reply,
        changes: Option<Fresh>,
    ) -> Result<GroupClaims, ClaimStoreError> {
        let names = match changes {
            Some(_) => reply.1.clone(),
            None => Vec::new(),
        };
        let large = reply.1.len() >= LARGE;
        let claims = decode(group, reply)?;
        if let Ok(mut l) = self.large.lock() {
            if !large {
                l.remove(group);
            } else {
                let held = changes.map(|Fresh { changes, digests }| Held {
                    changes,
                    names,
                    digests,
                    claims: claims.claims.clone(),
                    unreadable: claims.unreadable.clone(),
                    unreadable_slots: claims.unreadable_slots.clone(),
                    served: 0,
                });
                l.insert(group.clone(), held);
            }
        }
        Ok(claims)
    }

    /// A group's read served from its held claims, with the listing's time and records.
    fn serve_held(
        &self,
        group: &GroupName,
        held: Held,
        (secs, micros): (String, String),
        ops: Vec<(String, String)>,
    ) -> Result<GroupClaims, ClaimStoreError> {
        let now = server_time(&secs, &micros)
            .ok_or_else(|| ClaimStoreError::Reply(format!("TIME was {secs:?} {micros:?}")))?;
        let claims = GroupClaims {
            group: group.clone(),
            now,
            claims: held.claims.clone(),
            unreadable: held.unreadable.clone(),
            unreadable_slots: held.unreadable_slots.clone(),
            operations: super::operation_record::decode(ops),
        };
        if let Ok(mut l) = self.large.lock() {
            l.insert(group.clone(), Some(held));
        }
        Ok(claims)
    }

    /// The listing, then the claims and the count again; or the listing alone, when it shows
    /// the count `held` was read at and the part of `held`'s claims it reads again is as held.
    /// `None` when the count moved between the two: something was written while the group was
    /// read.
    async fn read_in_batches(
        &self,
        group: &GroupName,
        held: &mut Option<Held>,
    ) -> redis::RedisResult<Option<Read>> {
        let g = self.shell.keys().group(group);
        let mut conn = self.shell.conn();
        let mut pipe = redis::pipe();
        pipe.get(g.changes())
            .zrange(g.claims(), 0, -1)
            .hgetall(g.operations())
            .cmd("TIME");
        // The part of the held claims this read checks, read between the two counts so that an
        // unmoved count makes it a read of the same moment.
        let part = held.as_ref().map(|h| checked(h.names.len(), h.served));
        if let (Some(h), Some(part)) = (held.as_ref(), &part) {
            mgets(&mut pipe, &g.claim_prefix(), &h.names[part.clone()]);
        }
        pipe.get(g.changes());
        let mut replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        let again: Option<String> = take_last(&mut replies)?;
        let (before, names, ops, time) = listing(&mut replies)?;
        if let Some(count) = before.as_ref().filter(|_| again == before)
            && let Some(part) = part
            && let Some(mut copy) = held
                .take()
                .filter(|h| &h.changes == count && h.names == names)
            && copy.digests.same(part, bulks(&replies).into_iter())
        {
            copy.served += 1;
            return Ok(Some(Read::Held(copy, time, ops)));
        }
        let mut pipe = redis::pipe();
        mgets(&mut pipe, &g.claim_prefix(), &names);
        pipe.get(g.changes());
        let mut replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        let after: Option<String> = take_last(&mut replies)?;
        if after != before {
            return Ok(None);
        }
        let values = values_of(replies)?;
        if values.len() != names.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "the claims read",
                format!("{} claims listed but {} read", names.len(), values.len()),
            )));
        }
        let fresh = before.map(|changes| Fresh {
            changes,
            digests: Digests::new(values.iter().map(|v| v.as_deref().map(str::as_bytes))),
        });
        Ok(Some(Read::Claims((time, names, values, ops), fresh)))
    }
}

/// `MGET`s of the claims `names` of the group whose claim keys start with `prefix`, `BATCH` keys
/// each.
fn mgets(pipe: &mut redis::Pipeline, prefix: &str, names: &[String]) {
    let mut key = String::with_capacity(prefix.len() + 64);
    for batch in names.chunks(BATCH) {
        let mget = pipe.cmd("MGET");
        for name in batch {
            key.clear();
            key.push_str(prefix);
            key.push_str(name);
            mget.arg(&key);
        }
    }
}

/// The listing's four replies, taken off the front of `replies`: the count of changes, the claim
/// names, the operation records and the server's time.
fn listing(replies: &mut Vec<redis::Value>) -> redis::RedisResult<Listing> {
    if replies.len() < 4 {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the claims listing",
            format!("{} replies, not 4 or more", replies.len()),
        )));
    }
    let mut head = replies.drain(..4);
    let mut next = || head.next().unwrap_or(redis::Value::Nil);
    Ok((
        redis::from_redis_value(next())?,
        redis::from_redis_value(next())?,
        redis::from_redis_value(next())?,
        redis::from_redis_value(next())?,
    ))
}

/// The last reply of a pipeline, taken off it.
fn take_last<T: redis::FromRedisValue>(replies: &mut Vec<redis::Value>) -> redis::RedisResult<T> {
    match replies.pop() {
        Some(v) => Ok(redis::from_redis_value(v)?),
        None => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the claims read",
            "no reply".to_owned(),
        ))),
    }
}

/// The values of a pipeline's `MGET`s as the bytes they arrived in, in order, for a part's check:
/// no string made of each. A reply that is not an array of values or nils reads as a nil, which
/// no held value's digest matches unless it was nil too: such a reply reads the group again.
fn bulks(replies: &[redis::Value]) -> Vec<Option<&[u8]>> {
    let mut values = Vec::new();
    for batch in replies {
        match batch {
            redis::Value::Array(items) => values.extend(items.iter().map(|v| match v {
                redis::Value::BulkString(b) => Some(b.as_slice()),
                _ => None,
            })),
            _ => values.push(None),
        }
    }
    values
}

/// The values of a pipeline's `MGET`s, in order.
fn values_of(replies: Vec<redis::Value>) -> redis::RedisResult<Vec<Option<String>>> {
    let mut values = Vec::new();
    for batch in replies {
        let batch: Vec<Option<String>> = redis::from_redis_value(batch)?;
        values.extend(batch);
    }
    Ok(values)
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
        claims: std::sync::Arc::new(claims),
        unreadable,
        unreadable_slots,
        operations: super::operation_record::decode(ops),
    })
}
