//! The fleet read (SPEC §2.5): its two plans, one round trip each. A reader that holds a current
//! copy of the registry sends one pipeline (the registry's version and sizes, `HGETALL` of the
//! hold requests, `MGET` and `EXISTS` of every heartbeat key, `TIME`); a reader without one, or
//! whose copy the pipeline shows out of date, runs the read script (`EVAL_RO`), which resolves
//! the registry proper and the join set on the server and returns them.

use std::sync::Arc;

use redis::aio::ConnectionLike;

use crate::domain::name::BenchName;
use crate::store::keys::Keys;
use crate::store::script::eval_ro;

use super::decode::{HoldPairs, assemble, mark_wrong_types, parse_result};
use super::{Presence, PresenceError, READ, Snapshot};

/// The most keys one MGET of the warm read asks for. A larger fleet is read with several MGETs in
/// the same pipeline, still one round trip, so that no single command holds Redis for long.
const MGET_BATCH: usize = 50_000;

/// A reader's copy of the registry, valid while the registry's version and the sizes of both its
/// sets are unchanged, and no name of the join set without its join key got one: the benches
/// sorted by name, each with its heartbeat key, so a warm read builds nothing.
#[derive(Debug, Default)]
pub(super) struct Registry {
    version: String,
    /// The sizes of the registry proper and of the join set.
    size: (usize, usize),
    /// The join keys of the join set's members that had none (a name another bench added, or
    /// one left by a bench that removed its own key): the bench that owns one may write it.
    unproven: Vec<String>,
    names: Vec<BenchName>,
    /// The heartbeat key of each name, in the same order.
    keys: Vec<String>,
    /// Members that are not bench names, reported with every snapshot.
    foreign: Vec<String>,
}

/// What a warm read says of the registry, to check a held copy by: its version, the sizes of its
/// two sets, and whether a name of the join set that had no join key got one since.
#[derive(Debug, PartialEq)]
struct Stamp {
    version: String,
    size: (usize, usize),
    joined_since: bool,
}

impl Registry {
    /// Whether a warm read's stamp shows this copy still current.
    fn is_current(&self, stamp: &Stamp) -> bool {
        stamp.version == self.version && stamp.size == self.size && !stamp.joined_since
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
    /// Reads every registered bench (with `names` empty), or the named ones, in one round trip
    /// whatever the fleet's size. A named bench that never beat comes back `Reading::Missing`.
    pub async fn read(&self, names: &[BenchName]) -> Result<Snapshot, PresenceError> {
        if !names.is_empty() {
            let (_, snapshot) = self
                .read_registered(&Registry::of(names, &self.keys))
                .await?;
            return Ok(snapshot);
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

    /// The warm plan: one pipeline over a registry the reader holds. Returns the registry's stamp
    /// alongside, so the caller can tell whether its copy was current.
    async fn read_registered(
        &self,
        registry: &Registry,
    ) -> Result<(Stamp, Snapshot), PresenceError> {
        let batches = registry.keys.chunks(MGET_BATCH).len();
        let proving = registry.unproven.chunks(MGET_BATCH).len();
        let mut conn = self.conn.clone();
        let mut replies: Vec<redis::RedisResult<redis::Value>> = self
            .warm_pipeline(registry)
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        if replies.len() != 5 + 2 * batches + proving {
            return Err(PresenceError::ReadReply(format!(
                "{} replies to the read pipeline",
                replies.len()
            )));
        }
        let time: (String, String) = parse_result(replies.pop())?;
        let proved = replies.split_off(4 + 2 * batches);
        let exists = replies.split_off(4 + batches);
        let mget = replies.split_off(4);
        let mut head = replies.into_iter();
        let version: Option<String> = parse_result(head.next())?;
        let size = (parse_result(head.next())?, parse_result(head.next())?);
        let joined_since = counted(proved)? > 0;
        let mut problems = Vec::new();
        let holds = self.holds_or_problem(head.next(), &mut problems)?;
        let mut values = Vec::with_capacity(registry.names.len());
        for batch in mget {
            let part: Vec<Option<Vec<u8>>> = parse_result(Some(batch))?;
            values.extend(part);
        }
        let types = if counted(exists)? > values.iter().filter(|v| v.is_some()).count() {
            self.types_of_missing(&registry.keys, &values).await?
        } else {
            Vec::new()
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
        let stamp = Stamp {
            version: version.unwrap_or_default(),
            size,
            joined_since,
        };
        Ok((stamp, snapshot))
    }

    /// The warm plan's pipeline: version, sizes, requests, then `MGET` and `EXISTS` of the
    /// heartbeat keys in batches, `EXISTS` of the join keys the registry waits for, `TIME`.
    fn warm_pipeline(&self, registry: &Registry) -> redis::Pipeline {
        // TIME goes last: Redis runs the pipeline's commands in order, so `now` is never before
        // the instant the keys were read. A key the MGET missed then expired at or before `now`,
        // and a key it saw is judged against `now` by its deadline; a pause of the server
        // between the two can never make a bench read DOWN before its deadline.
        // EXISTS after MGET: a key MGET returns nothing for and EXISTS counts holds another type
        // than a heartbeat (something else wrote it), which only then costs a second round trip
        // to name. Errors stay per command: a corrupted hold-request hash spoils no bench.
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.get(self.keys.registry_version())
            .scard(self.keys.registry())
            .scard(self.keys.joined())
            .hgetall(self.keys.hold_requests());
        for batch in registry.keys.chunks(MGET_BATCH) {
            pipe.cmd("MGET").arg(batch);
        }
        for batch in registry.keys.chunks(MGET_BATCH) {
            pipe.cmd("EXISTS").arg(batch);
        }
        // Whether a name of the join set that had no join key got one: then it is a bench now.
        for batch in registry.unproven.chunks(MGET_BATCH) {
            pipe.cmd("EXISTS").arg(batch);
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
            .filter(|(_, t)| t != "none")
            .collect())
    }

    /// The cold plan: the read script resolves the registry on the server. The registry it
    /// returns is kept for the next read.
    async fn read_cold(&self) -> Result<Snapshot, PresenceError> {
        let keys = [
            self.keys.registry(),
            self.keys.registry_version(),
            self.keys.hold_requests(),
            self.keys.joined(),
        ];
        // What the script returns, in its order.
        type ColdReply = (
            String,
            (String, String),
            Vec<Vec<u8>>,
            Vec<Option<Vec<u8>>>,
            Vec<(Vec<u8>, Vec<u8>)>,
            Vec<(usize, String)>,
            i64,
            usize,
            usize,
            Vec<Vec<u8>>,
        );
        let mut conn = self.conn.clone();
        let reply: ColdReply = eval_ro(READ, &keys)
            .arg(self.keys.heartbeat_prefix())
            .arg(self.keys.joined_key_prefix())
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        let (version, time, members, values, holds, types, holds_ok, registered, joined, unproven) =
            reply;
        if values.len() != members.len() {
            return Err(PresenceError::ReadReply(format!(
                "{} members but {} values",
                members.len(),
                values.len()
            )));
        }
        let Members {
            mut benches,
            mut foreign,
            utf8,
            wrong_names,
        } = Members::of(members, values, types);
        benches.sort_by(|a, b| a.0.cmp(&b.0));
        foreign.sort();
        let (names, values): (Vec<BenchName>, Vec<Option<Vec<u8>>>) = benches.into_iter().unzip();
        let mut snapshot = assemble(time, &names, values, holds, foreign.clone())?;
        let types: Vec<(usize, String)> = wrong_names
            .into_iter()
            .filter_map(|(name, t)| Some((names.binary_search(&name).ok()?, t)))
            .collect();
        mark_wrong_types(&mut snapshot, &names, &types);
        if holds_ok == 0 {
            snapshot.problems = vec![self.holds_problem()];
        }
        // A name of the join set that is not a bench name has no join key fleet writes: only the
        // bench names among them are watched.
        let unproven = unproven
            .iter()
            .filter_map(|raw| std::str::from_utf8(raw).ok())
            .filter_map(|text| BenchName::parse(text).ok())
            .map(|name| self.keys.joined_key(&name))
            .collect();
        // A member that is not UTF-8 has no name to build a key from: with one in the registry
        // nothing is kept, and every read is cold, so it is still reported.
        let registry = utf8.then(|| {
            Arc::new(Registry {
                version,
                size: (registered, joined),
                unproven,
                keys: names.iter().map(|n| self.keys.heartbeat(n)).collect(),
                names,
                foreign,
            })
        });
        *self.registry.lock().expect("registry lock") = registry;
        Ok(snapshot)
    }
}

/// The sum of a pipeline's counting replies (`EXISTS` in batches).
fn counted(replies: Vec<redis::RedisResult<redis::Value>>) -> Result<usize, PresenceError> {
    replies
        .into_iter()
        .map(|reply| parse_result::<usize>(Some(reply)))
        .sum()
}

/// The members the read script returned, told apart: the bench names with their values, the
/// foreign ones (reported, never read), whether every member was UTF-8, and the benches whose key
/// holds another type.
struct Members {
    benches: Vec<(BenchName, Option<Vec<u8>>)>,
    foreign: Vec<String>,
    utf8: bool,
    wrong_names: Vec<(BenchName, String)>,
}

impl Members {
    /// `types` names (1-based) the members whose key holds another type.
    fn of(
        members: Vec<Vec<u8>>,
        values: Vec<Option<Vec<u8>>>,
        types: Vec<(usize, String)>,
    ) -> Members {
        let wrong: std::collections::HashMap<usize, String> = types.into_iter().collect();
        let mut out = Members {
            benches: Vec::with_capacity(members.len()),
            foreign: Vec::new(),
            utf8: true,
            wrong_names: Vec::new(),
        };
        for (i, (raw, value)) in members.into_iter().zip(values).enumerate() {
            match String::from_utf8(raw) {
                Ok(text) => match BenchName::parse(&text) {
                    Ok(name) => {
                        if let Some(t) = wrong.get(&(i + 1)) {
                            out.wrong_names.push((name.clone(), t.clone()));
                        }
                        out.benches.push((name, value))
                    }
                    Err(_) => out.foreign.push(text),
                },
                Err(e) => {
                    out.utf8 = false;
                    out.foreign
                        .push(String::from_utf8_lossy(e.as_bytes()).into_owned());
                }
            }
        }
        out
    }
}
