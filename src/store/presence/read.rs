//! The warm fleet read (SPEC §2.5): a reader that holds a current copy of the registry sends one
//! pipeline (the registry's version and sizes, `HGETALL` of the hold requests, `MGET` of every
//! heartbeat key, `EXISTS` of those its last read found none in, `TIME`). A reader without one,
//! or whose copy the pipeline shows out of date, reads cold (`cold`): it lists the registry and
//! sends the same pipeline over the listing.

use std::sync::Mutex;

use redis::aio::ConnectionLike;

use crate::domain::name::BenchName;
use crate::domain::state::Reading;
use crate::store::keys::Keys;

use super::decode::{HoldPairs, assemble, mark_wrong_types, parse_result};
use super::{Presence, PresenceError, Snapshot};

/// The most keys one `MGET` or `EXISTS` of a read asks for. A larger fleet is read with several in
/// the same pipeline, still one round trip. Redis reads a client's pipeline 16 kB at a time and
/// answers the other clients between those reads, so a command of 250 keys (about 8 kB, 0.1 ms
/// of Redis's thread quiet, 0.4 ms under load) lets a beat in between, where one of 50 000 kept
/// every beat waiting for its whole length. Beside a 100 000-slot pass, batches of 1 000 (1.8 ms
/// each under load) and a script per group of claims left the beats' p99 at 23.6 ms; batches of
/// 250 here and in the claims read, 14.4 ms (SPEC §2.5, §5.7).
const MGET_BATCH: usize = 250;

/// A reader's copy of the registry, valid while the registry's version and the sizes of both its
/// sets are unchanged, and no name of the join set without its keys got a join key: the benches
/// sorted by name, each with its heartbeat key, so a warm read builds nothing.
#[derive(Debug, Default)]
pub(super) struct Registry {
    pub(super) version: String,
    /// The sizes of the registry proper and of the join set.
    pub(super) size: (usize, usize),
    /// The join keys of the join set's members that had none (a name another bench added, or
    /// one left by a bench that removed its own key): the bench that owns one may write it.
    /// Bytes, as the members are: a member need not be a bench name, or even UTF-8.
    pub(super) unproven: Vec<Vec<u8>>,
    pub(super) names: Vec<BenchName>,
    /// The heartbeat key of each name, in the same order.
    pub(super) keys: Vec<String>,
    /// Members that are not bench names, reported with every snapshot.
    pub(super) foreign: Vec<String>,
    /// The indices of the keys the last read of this copy found no heartbeat in, sorted; `None`
    /// before any (then a read counts every key). Only a key among them can be of another type
    /// without the read's `MGET` missing it for the first time, so a read counts these with
    /// `EXISTS` and asks the `TYPE` of a key newly missed: counting all 100 000 keys cost Redis
    /// as much again as a third of the `MGET` (SPEC §2.5). A hint, never a verdict: a count of
    /// the wrong keys costs a round trip, not a wrong row.
    pub(super) absent: Mutex<Option<Vec<usize>>>,
}

/// What a read over a registry says of it, to check the registry by: its version, the sizes of
/// its two sets, and how many of the join keys it was asked to count exist (a warm read counts
/// those the registry waits for, the cold read those of its candidates).
#[derive(Debug, PartialEq)]
pub(super) struct Stamp {
    version: String,
    size: (usize, usize),
    proved: usize,
}

impl Registry {
    /// Whether a warm read's stamp shows this copy still current: nothing changed, and no name
    /// of the join set that had no join key got one since.
    pub(super) fn is_current(&self, stamp: &Stamp) -> bool {
        stamp.version == self.version && stamp.size == self.size && stamp.proved == 0
    }

    /// A copy whose next read counts the keys `snapshot`, read over it, found no heartbeat in.
    pub(super) fn counting_absent(self, snapshot: &Snapshot) -> Self {
        let absent = (snapshot.benches.iter().enumerate())
            .filter(|(_, b)| !matches!(b.reading, Reading::Beat(_)))
            .map(|(i, _)| i)
            .collect();
        Registry {
            absent: Mutex::new(Some(absent)),
            ..self
        }
    }

    /// A registry of `names` alone (a named read), sorted and without repeats.
    fn of(names: &[BenchName], keys: &Keys) -> Self {
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

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    /// Reads every registered bench (with `names` empty), or the named ones, whatever the
    /// fleet's size: one round trip for the named ones and for a reader holding a current copy
    /// of the registry, two for a reader without one (SPEC §2.5). A named bench that never beat
    /// comes back `Reading::Missing`.
    pub async fn read(&self, names: &[BenchName]) -> Result<Snapshot, PresenceError> {
        if !names.is_empty() {
            let (_, snapshot) = self
                .read_registered(&Registry::of(names, &self.keys), Typing::Counted)
                .await?;
            return Ok(snapshot);
        }
        let held = self.registry.lock().expect("registry lock").clone();
        if let Some(registry) = held {
            let (stamp, snapshot) = self.read_registered(&registry, Typing::Counted).await?;
            if registry.is_current(&stamp) {
                return Ok(snapshot);
            }
        }
        self.read_cold().await
    }

    /// The warm plan: one pipeline over a registry the reader holds. Returns the registry's stamp
    /// alongside, so the caller can tell whether its copy was current. With `Typing::Counted` the
    /// pipeline counts the keys the copy's last read found no heartbeat in (every key, for a
    /// copy never read), and a second round trip asks the types of the keys missed when the count
    /// or a key newly missed says one may hold another type; with `Typing::Later` it counts
    /// nothing and the keys of another type are left to the caller.
    pub(super) async fn read_registered(
        &self,
        registry: &Registry,
        typing: Typing,
    ) -> Result<(Stamp, Snapshot), PresenceError> {
        let batches = registry.keys.chunks(MGET_BATCH).len();
        // The keys counted, and whether they are the copy's hint rather than every key.
        let (counted, hinted): (Vec<usize>, bool) = match typing {
            Typing::Counted => match registry.absent.lock().expect("absent lock").clone() {
                Some(absent) => (absent, true),
                None => ((0..registry.keys.len()).collect(), false),
            },
            Typing::Later => (Vec::new(), false),
        };
        let (counting, proving) = match typing {
            Typing::Counted => (
                counted.chunks(MGET_BATCH).len(),
                registry.unproven.chunks(MGET_BATCH).len(),
            ),
            Typing::Later => (0, 0),
        };
        let mut conn = self.conn.clone();
        let mut replies: Vec<redis::RedisResult<redis::Value>> = self
            .warm_pipeline(registry, &counted, typing)
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        if replies.len() != 5 + batches + counting + proving {
            return Err(PresenceError::ReadReply(format!(
                "{} replies to the read pipeline",
                replies.len()
            )));
        }
        let time: (String, String) = parse_result(replies.pop())?;
        let proved = replies.split_off(4 + batches + counting);
        let exists = replies.split_off(4 + batches);
        let mget = replies.split_off(4);
        let mut head = replies.into_iter();
        let version: Option<String> = parse_result(head.next())?;
        let size = (parse_result(head.next())?, parse_result(head.next())?);
        let proved = sum(proved)?;
        let mut problems = Vec::new();
        let holds = self.holds_or_problem(head.next(), &mut problems)?;
        let mut values = Vec::with_capacity(registry.names.len());
        for batch in mget {
            let part: Vec<Option<Vec<u8>>> = parse_result(Some(batch))?;
            values.extend(part);
        }
        let stamp = Stamp {
            version: version.unwrap_or_default(),
            size,
            proved,
        };
        let types = match typing {
            Typing::Counted => {
                let counts = (counted.as_slice(), sum(exists)?, hinted);
                self.types_counted(registry, counts, &stamp, &values)
                    .await?
            }
            Typing::Later => Vec::new(),
        };
        let mut snapshot = assemble(
            time,
            &registry.names,
            values,
            holds,
            registry.foreign.clone(),
        )?;
        mark_wrong_types(&mut snapshot, &registry.names, &types);
        snapshot.problems = problems;
        Ok((stamp, snapshot))
    }

    /// The types of the keys a counted read missed, when one may hold another type: a key the
    /// count covers that exists where `MGET` found nothing, or a key missed that the count did
    /// not cover. Keeps the keys missed as the copy's next count (`Registry::absent`).
    async fn types_counted(
        &self,
        registry: &Registry,
        (counted, existing, hinted): (&[usize], usize, bool),
        stamp: &Stamp,
        values: &[Option<Vec<u8>>],
    ) -> Result<Vec<(usize, String)>, PresenceError> {
        let absent: Vec<usize> = (0..values.len()).filter(|&i| values[i].is_none()).collect();
        let found = (counted.iter()).filter(|&&i| values.get(i).is_some_and(Option::is_some));
        let other =
            existing > found.count() || absent.iter().any(|i| counted.binary_search(i).is_err());
        *registry.absent.lock().expect("absent lock") = Some(absent);
        // A held copy the stamp shows out of date is discarded by the caller, which reads cold:
        // its keys' types would be asked for nothing.
        let discarded = hinted && !registry.is_current(stamp);
        if other && !discarded {
            self.types_of_missing(&registry.keys, values).await
        } else {
            Ok(Vec::new())
        }
    }

    /// The warm plan's pipeline: version, sizes, requests, then `MGET` of the heartbeat keys and
    /// `EXISTS` of the `counted` ones in batches, `EXISTS` of the join keys the registry waits
    /// for, `TIME`.
    fn warm_pipeline(
        &self,
        registry: &Registry,
        counted: &[usize],
        typing: Typing,
    ) -> redis::Pipeline {
        // TIME goes last: Redis runs the pipeline's commands in order, so `now` is never before
        // the instant the keys were read. A key the MGET missed then expired at or before `now`,
        // and a key it saw is judged against `now` by its deadline; a pause of the server
        // between the two can never make a bench read DOWN before its deadline.
        // EXISTS after MGET: a key MGET returns nothing for and EXISTS counts holds another type
        // than a heartbeat (something else wrote it), which only then costs a second round trip
        // to name; so does a key MGET missed that was not counted (it had a heartbeat at the
        // last read). Errors stay per command: a corrupted hold-request hash spoils no bench.
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.get(self.keys.registry_version())
            .scard(self.keys.registry())
            .scard(self.keys.joined())
            .hgetall(self.keys.hold_requests());
        for batch in registry.keys.chunks(MGET_BATCH) {
            pipe.cmd("MGET").arg(batch);
        }
        if typing == Typing::Counted {
            for batch in counted.chunks(MGET_BATCH) {
                let keys = batch.iter().filter_map(|&i| registry.keys.get(i));
                pipe.cmd("EXISTS")
                    .arg(keys.map(String::as_str).collect::<Vec<_>>());
            }
            // Whether a name of the join set that had no join key got one: then it is a bench
            // now.
            for batch in registry.unproven.chunks(MGET_BATCH) {
                pipe.cmd("EXISTS").arg(batch);
            }
        }
        pipe.cmd("TIME");
        pipe
    }

    /// The hold requests a read returned, or none and a problem that names the key when it holds
    /// another type (a foreign write): the benches are read all the same.
    fn holds_or_problem(
        &self,
        reply: Option<redis::RedisResult<redis::Value>>,
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

    /// The types of the keys a read found nothing for: each one that exists holds another type
    /// than a heartbeat. One round trip, made only when a read counted such keys.
    async fn types_of_missing(
        &self,
        keys: &[String],
        values: &[Option<Vec<u8>>],
    ) -> Result<Vec<(usize, String)>, PresenceError> {
        let missing: Vec<usize> = (0..keys.len()).filter(|i| values[*i].is_none()).collect();
        let mut pipe = redis::pipe();
        for i in &missing {
            pipe.cmd("TYPE").arg(&keys[*i]);
        }
        let mut conn = self.conn.clone();
        let types: Vec<String> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        Ok(missing
            .into_iter()
            .zip(types)
            .filter(|(_, t)| other_type(t))
            .collect())
    }
}

/// The sum of a pipeline's counting replies (`EXISTS` in batches).
fn sum(replies: Vec<redis::RedisResult<redis::Value>>) -> Result<usize, PresenceError> {
    replies
        .into_iter()
        .map(|reply| parse_result::<usize>(Some(reply)))
        .sum()
}

/// Whether a read's pipeline counts the heartbeat keys, to find those of another type (`EXISTS`
/// beside `MGET`), or leaves them to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Typing {
    Counted,
    Later,
}

/// Whether a `TYPE` names another type than a heartbeat's. A string is a heartbeat written
/// since the read's `MGET` missed it, and `none` no key at all.
pub(super) fn other_type(kind: &str) -> bool {
    kind != "none" && kind != "string"
}
