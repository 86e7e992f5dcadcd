//! The fleet read (SPEC §2.5). Named benches, and a reader that holds a current copy of the
//! registry, send one pipeline: the registry's version and sizes, `HGETALL` of the hold requests,
//! a bounded `GETRANGE` of every heartbeat key, `EXISTS` of the keys the copy waits for, and
//! `TIME`. A reader without a copy, or whose copy the pipeline shows out of date, reads cold
//! (`cold`): it lists the registry and sends the same pipeline over the listing.
//!
//! Every value a bench wrote is read through `GETRANGE key 0 MAX_VALUE`, never whole: a bench's
//! own user may write its own key as large as Redis lets it, and one 200 MB value read whole cost
//! `fleet serve` 600 MB (SPEC §7). A value past the bound reads DOWN, "value too large", and costs
//! the reader `MAX_VALUE` bytes. `GETRANGE` answers a key of another type with an error of its
//! own, so such a key is found in the same round trip; a second one asks only what type it is,
//! to say so.

use redis::Value;
use redis::aio::ConnectionLike;

use crate::domain::name::BenchName;
use crate::store::keys::Keys;

use super::decode::{Got, HoldPairs, MAX_VALUE, assemble, parse_result};
use super::{Presence, PresenceError, Snapshot};

/// The most keys one `EXISTS` of a read asks for. A larger set is asked in several in the same
/// pipeline, still one round trip, so a beat gets in between them (SPEC §2.5).
pub(super) const BATCH: usize = 250;

/// The most heartbeat keys one piece of a read's pipeline asks for. A read's replies are decoded
/// piece by piece as they come, so no more than [`IN_FLIGHT`] pieces of replies are held at once:
/// at 100 000 benches the replies of the whole pipeline, held until the last came, were 35 MB of
/// each of `fleet serve`'s passes. A fleet of up to this many is one piece.
pub const PIECE: usize = 10_000;

/// The pieces of a read sent at once, in order on the one connection: Redis has the next to run
/// while the replies of one come back and are decoded.
const IN_FLIGHT: usize = 2;

/// A reader's copy of the registry, valid while the registry's version and the sizes of both its
/// sets are unchanged and no name of the join set without its keys got one: the benches
/// sorted by name, each with its heartbeat key, so a warm read builds nothing.
#[derive(Debug, Default)]
pub(super) struct Registry {
    pub(super) version: String,
    /// The sizes of the registry proper and of the join set (the join set's as `Joined`).
    pub(super) size: (usize, Joined),
    /// Both keys (join key and heartbeat) of the join set's members that had neither: the
    /// bench that owns them may still write them (an agent of the previous release, SPEC §2.3).
    pub(super) unproven: Vec<Vec<u8>>,
    pub(super) names: Vec<BenchName>,
    /// The heartbeat key of each name, in the same order.
    pub(super) keys: Vec<String>,
    /// Members that are not bench names, reported with every snapshot.
    pub(super) foreign: Vec<String>,
    /// What the listing could not use, said with every snapshot (a join set over its bound).
    pub(super) problems: Vec<String>,
    /// The read's pipeline over this registry, in its pieces, built at its first read and sent
    /// again by every read after: a copy is read over and over (the controller's slots every
    /// pass), and building a command a bench was most of a read's own time.
    pub(super) pipeline: std::sync::OnceLock<Vec<std::sync::Arc<redis::Pipeline>>>,
}

/// The join set's size, as a copy of the registry is judged by: exact while the join set is read,
/// `Over` once it is past the bound (SPEC §2.5), so a set that keeps growing past it does not make
/// every read cold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Joined {
    #[default]
    Empty,
    Read(usize),
    Over,
}

/// The most names of the legacy join set a read takes, beside a registry of `registered`: enough
/// for every bench of a fleet whose agents predate this release, and no more, so a set any
/// bench's user could add to under the old ACL file costs a read at most about twice its usual
/// time (SPEC §2.5, §7).
pub(super) fn joined_bound(registered: usize) -> usize {
    registered.max(1_024)
}

impl Joined {
    pub(super) fn of(size: usize, registered: usize) -> Joined {
        match size {
            0 => Joined::Empty,
            n if n <= joined_bound(registered) => Joined::Read(n),
            _ => Joined::Over,
        }
    }
}

/// What a read over a registry says of it, to check the registry by: its version, the sizes of
/// its two sets, and how many of the keys it was asked to count exist.
#[derive(Debug, PartialEq)]
pub(super) struct Stamp {
    version: String,
    size: (usize, Joined),
    proved: usize,
}

impl Registry {
    /// Whether a read's stamp shows this copy still current: nothing changed, and no name of the
    /// join set that had neither of its keys got one since.
    pub(super) fn is_current(&self, stamp: &Stamp) -> bool {
        stamp.version == self.version && stamp.size == self.size && stamp.proved == 0
    }

    /// A registry of `names` alone (a named read), sorted and without repeats.
    pub(super) fn of(names: &[BenchName], keys: &Keys) -> Self {
        let mut names = names.to_vec();
        names.sort();
        names.dedup();
        Registry {
            keys: names.iter().map(|n| keys.heartbeat(n)).collect(),
            names,
            ..Registry::default()
        }
    }
}

/// A copy of the named benches' registry, built once and read over many times (the controller's
/// slots, SPEC §4.5): a pass reads the benches of its configured slots, never the registry.
#[derive(Debug)]
pub struct Named(pub(super) Registry);

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    /// Reads every registered bench (with `names` empty), or the named ones, whatever the
    /// fleet's size: one round trip for the named ones and for a reader holding a current copy
    /// of the registry, two for a reader without one (SPEC §2.5). A named bench that never beat
    /// comes back `Reading::Missing`.
    pub async fn read(&self, names: &[BenchName]) -> Result<Snapshot, PresenceError> {
        if !names.is_empty() {
            return self.read_named(&self.named(names)).await;
        }
        let held = self.registry.lock().expect("registry lock").clone();
        if let Some(registry) = held {
            let (stamp, snapshot) = self.read_registered(&registry).await?;
            if registry.is_current(&stamp) {
                return Ok(snapshot);
            }
        }
        self.read_cold().await
    }

    /// The named benches, to read over and over with [`Presence::read_named`].
    pub fn named(&self, names: &[BenchName]) -> Named {
        Named(Registry::of(names, &self.keys))
    }

    /// Reads the named benches: one round trip, whatever the registry holds.
    pub async fn read_named(&self, named: &Named) -> Result<Snapshot, PresenceError> {
        Ok(self.read_registered(&named.0).await?.1)
    }

    /// One pipeline over a registry: returns the registry's stamp alongside, so the caller can
    /// tell whether its copy was current. A second round trip asks the type of a key of another
    /// type than a heartbeat, only when there is one.
    pub(super) async fn read_registered(
        &self,
        registry: &Registry,
    ) -> Result<(Stamp, Snapshot), PresenceError> {
        use futures::StreamExt;
        let n = registry.keys.len();
        let proving = registry.unproven.chunks(BATCH).len();
        let pieces = registry.pipeline.get_or_init(|| self.pipeline(registry));
        // Owned pieces and connection: a stream of futures that borrow, held across an await, is
        // not provably Send to the tasks that run a read (the compiler's higher-ranked lifetimes).
        let conn = self.conn.clone();
        let sent = (pieces.iter().cloned()).map(move |piece| query(piece, conn.clone()));
        let mut answers = futures::stream::iter(sent).buffered(IN_FLIGHT);
        // Each reply in its place as it comes: the head (version, sizes, requests), a value a
        // bench, then the tail (`EXISTS` counts, `TIME`).
        let (mut replies, mut got, mut count) = (Vec::new(), Vec::with_capacity(n), 0);
        let mut tail = Vec::new();
        while let Some(piece) = answers.next().await {
            for reply in piece.map_err(|source| PresenceError::Read { source })? {
                match count {
                    c if c < 4 => replies.push(reply),
                    c if c < 4 + n => got.push(Got::of(reply)?),
                    _ => tail.push(reply),
                }
                count += 1;
            }
        }
        drop(answers);
        if count != 5 + n + proving {
            return Err(PresenceError::ReadReply(format!(
                "{count} replies to the read pipeline"
            )));
        }
        let time: (String, String) = parse_result(tail.pop())?;
        let proved = tail;
        let mut head = replies.into_iter();
        let version: Option<String> = parse_result(head.next())?;
        let registered: usize = parse_result(head.next())?;
        let joined: usize = match head.next() {
            // A join set of another type is no join set: the registry proper is read.
            Some(Err(e)) if e.code() == Some("WRONGTYPE") => 0,
            other => parse_result(other)?,
        };
        let mut problems = registry.problems.clone();
        let holds = self.holds_or_problem(head.next(), &mut problems)?;
        let stamp = Stamp {
            version: version.unwrap_or_default(),
            size: (registered, Joined::of(joined, registered)),
            proved: sum(proved)?,
        };
        self.name_other_types(&registry.keys, &mut got).await?;
        let mut snapshot = assemble(time, &registry.names, got, holds, registry.foreign.clone())?;
        snapshot.problems = problems;
        Ok((stamp, snapshot))
    }

    /// The read's pipeline: version, sizes, requests, a bounded `GETRANGE` of each heartbeat key,
    /// `EXISTS` of the keys the registry waits for, `TIME`; in pieces of [`PIECE`] keys,
    /// sent in order on one connection.
    fn pipeline(&self, registry: &Registry) -> Vec<std::sync::Arc<redis::Pipeline>> {
        // TIME goes last: Redis runs a client's commands in order, so `now` is never before the
        // instant the keys were read. A key the read missed expired at or before `now`, and a key
        // it saw is judged against `now` by its deadline; a pause of the server between the two
        // can never make a bench read DOWN before its deadline. The pieces go in order on the one
        // connection (`buffered` sends each before the next), so that holds across them; and
        // TIME rides with the last keys, so on a Redis Cluster it is the clock of the node that
        // holds them. Errors stay per command: a corrupted hold-request hash or a key of another
        // type spoils nothing else.
        let piece = || {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            pipe
        };
        let mut pieces = Vec::with_capacity(registry.keys.len() / PIECE + 1);
        let mut pipe = piece();
        pipe.get(self.keys.registry_version())
            .scard(self.keys.registry())
            .scard(self.keys.joined())
            .hgetall(self.keys.hold_requests());
        let end = MAX_VALUE.to_string();
        for (i, key) in registry.keys.iter().enumerate() {
            if i > 0 && i % PIECE == 0 {
                pieces.push(std::sync::Arc::new(std::mem::replace(&mut pipe, piece())));
            }
            pipe.cmd("GETRANGE").arg(key).arg("0").arg(&end);
        }
        // Whether a name of the join set that had neither key got one: then it is a bench now.
        for batch in registry.unproven.chunks(BATCH) {
            pipe.cmd("EXISTS").arg(batch);
        }
        pipe.cmd("TIME");
        pieces.push(std::sync::Arc::new(pipe));
        pieces
    }

    /// Asks the type of each key a read found of another type than a string, to say which: one
    /// round trip, only when there is one (a foreign write).
    async fn name_other_types(
        &self,
        keys: &[String],
        got: &mut [Got],
    ) -> Result<(), PresenceError> {
        let other: Vec<usize> = (0..got.len())
            .filter(|&i| matches!(got[i], Got::OtherType(None)))
            .collect();
        if other.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for &i in &other {
            pipe.cmd("TYPE").arg(&keys[i]);
        }
        let mut conn = self.conn.clone();
        let types: Vec<String> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        for (i, kind) in other.into_iter().zip(types) {
            got[i] = match kind.as_str() {
                // Gone, or written as a heartbeat, since: read as missing until the next read.
                "none" | "string" => Got::Missing,
                _ => Got::OtherType(Some(kind)),
            };
        }
        Ok(())
    }

    /// The hold requests a read returned, or none and a problem that names the key when it holds
    /// another type (a foreign write): the benches are read all the same.
    fn holds_or_problem(
        &self,
        reply: Option<redis::RedisResult<Value>>,
        problems: &mut Vec<String>,
    ) -> Result<HoldPairs, PresenceError> {
        match reply {
            Some(Err(e)) if e.code() == Some("WRONGTYPE") => {
                problems.push(self.holds_problem());
                Ok(Vec::new())
            }
            other => parse_result(other),
        }
    }

    pub(super) fn holds_problem(&self) -> String {
        format!(
            "{} is not a hash of hold requests (something else wrote it): requests are ignored \
             until it is repaired (`redis-cli DEL '{}'`, then ask again with `fleet hold`)",
            self.keys.hold_requests(),
            self.keys.hold_requests()
        )
    }
}

/// One piece of a read's pipeline, each reply its own result.
async fn query<C: ConnectionLike + Send>(
    piece: std::sync::Arc<redis::Pipeline>,
    mut conn: C,
) -> redis::RedisResult<Vec<redis::RedisResult<Value>>> {
    piece.query_async(&mut conn).await
}

/// The sum of a pipeline's counting replies (`EXISTS` in batches).
pub(super) fn sum(replies: Vec<redis::RedisResult<Value>>) -> Result<usize, PresenceError> {
    replies
        .into_iter()
        .map(|reply| parse_result::<usize>(Some(reply)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    // SPEC §2.5: the legacy join set is read up to the larger of the registry's size and 1 024
    // names, and past it the copy is judged by "over", not by a size that keeps moving.
    #[test]
    fn the_join_set_is_read_up_to_its_bound() {
        assert_eq!(Joined::of(0, 0), Joined::Empty);
        assert_eq!(Joined::of(1_024, 0), Joined::Read(1_024));
        assert_eq!(Joined::of(1_025, 0), Joined::Over);
        assert_eq!(Joined::of(5_000, 5_000), Joined::Read(5_000));
        assert_eq!(Joined::of(5_001, 5_000), Joined::Over);
        assert_eq!(Joined::of(3_000_000, 5_000), Joined::of(3_000_001, 5_000));
    }
}
