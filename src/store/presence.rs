//! The presence store: beats, the fleet read, hold requests and the registry (SPEC §2.3 to §2.5).
//!
//! Every method is one round trip: a script, or one pipeline. The store never decides a state;
//! it turns what Redis holds into `domain::state` readings, judged later on the server's clock
//! that the same round trip read.
//!
//! The fleet read has two plans (SPEC §2.5). A reader that holds a current copy of the registry
//! sends one pipeline: the registry's version and sizes, `TIME`, `MGET` of every heartbeat key,
//! and `HGETALL` of the hold requests. A reader without one, or whose copy the version shows out
//! of date, runs the read script, which resolves the registry on the server and returns it with
//! its version. Both are one round trip; the pipeline costs Redis a fraction of the script.
//!
//! The registry is two sets (SPEC §2.3): the registry proper, which only fleet's own users write,
//! and the join set, which every bench's beat adds its name to; a name in the join set counts only
//! while the bench's own join key exists. So a bench's Redis user, confined to its own keys by
//! `fleet acl` (SPEC §2.11), can neither register nor remove another bench.
//!
//! What the replies hold is decoded in `decode`, pure: this file makes the round trips.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;

use crate::domain::name::{BenchName, Reason};
use crate::domain::state::Bench;

use super::keys::Keys;
use super::script::{eval, eval_ro, script};

mod decode;

pub use decode::decode_request;
use decode::{HoldPairs, assemble, mark_wrong_types, parse_result};

/// The longest TTL one beat may promise. A long promise hides a crash for its whole length
/// (reference §1.7), and a month is already far past the longest planned sleep.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

const BEAT: &str = script!("beat.lua");
const READ: &str = script!("read.lua");
const HOLD: &str = script!("hold.lua");
const FORGET: &str = script!("forget.lua");

/// The most keys one MGET of the warm read asks for. A larger fleet is read with several MGETs in
/// the same pipeline, still one round trip, so that no single command holds Redis for long.
const MGET_BATCH: usize = 50_000;

/// A failed store operation; each variant names the operation and the bench it was for.
#[derive(Debug, thiserror::Error)]
pub enum PresenceError {
    #[error("writing the beat of {name}")]
    Beat {
        name: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the fleet's heartbeat keys")]
    Read {
        #[source]
        source: redis::RedisError,
    },
    #[error("the fleet read returned an unexpected reply: {0}")]
    ReadReply(String),
    #[error("requesting a hold of {name}")]
    RequestHold {
        name: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("releasing the hold request of {name}")]
    Release {
        name: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("removing benches from the registry")]
    Forget {
        #[source]
        source: redis::RedisError,
    },
}

/// One beat, as a bench writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Beat {
    pub name: BenchName,
    /// How long this write counts. Zero expires the key at once.
    pub ttl: Duration,
    /// An explicit hold. With none, the beat carries the operator's hold request, if any.
    pub hold: Option<Reason>,
    pub load: Option<f64>,
    pub cores: Option<u32>,
}

/// What a beat wrote, as the server saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Receipt {
    /// The server's time of the write.
    pub at: DateTime<Utc>,
    /// The hold the beat carried (explicit, or the operator's request).
    pub hold: Option<String>,
    /// Why the bench's hold request was not carried: it breaks the rule the reader holds it to
    /// (SPEC §2.4), so carrying it would make the bench read DOWN. `None` when there was none to
    /// refuse.
    pub refused_request: Option<String>,
    /// A store problem the beat went past (the hold-request key holds another type), with its
    /// repair: the beat landed, but no request can be carried until it is repaired.
    pub problem: Option<String>,
}

/// The fleet as one read saw it: every bench, sorted by name, and the server's time of the read.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub now: DateTime<Utc>,
    pub benches: Vec<Bench>,
    /// Registry members that are not valid bench names (written by something other than fleet).
    /// They are reported, never read as benches.
    pub foreign: Vec<String>,
    /// What the read could not use, named by key (a hold-request hash of another type): every
    /// bench is still read, and this says what was left out.
    pub problems: Vec<String>,
}

/// A reader's copy of the registry, valid while the registry's version and the sizes of both its
/// sets are unchanged, and no name of the join set without its join key got one: the benches
/// sorted by name, each with its heartbeat key, so a warm read builds nothing.
#[derive(Debug, Default)]
struct Registry {
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

impl Registry {
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

/// The presence store over one connection (a multiplexed connection or a connection manager).
#[derive(Clone)]
pub struct Presence<C> {
    conn: C,
    keys: Keys,
    registry: Arc<Mutex<Option<Arc<Registry>>>>,
}

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            registry: Arc::default(),
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Writes one beat and registers the bench, in one round trip (the beat script).
    pub async fn beat(&self, beat: &Beat) -> Result<Receipt, PresenceError> {
        let ttl_ms = u64::try_from(beat.ttl.min(MAX_TTL).as_millis()).unwrap_or(u64::MAX);
        // Only the bench's own keys are declared: EVAL asks for write permission on every declared
        // key, and a bench's user may only read the hold requests and add to the join set.
        let keys = [
            self.keys.heartbeat(&beat.name),
            self.keys.joined_key(&beat.name),
        ];
        let mut conn = self.conn.clone();
        let (at_ms, hold, refused, problem): (i64, Option<String>, String, String) =
            eval(BEAT, &keys)
                .arg(beat.name.as_str())
                .arg(ttl_ms)
                .arg(beat.hold.as_ref().map_or("", |h| h.as_str()))
                .arg(beat.load.map_or(String::new(), |l| l.to_string()))
                .arg(beat.cores.map_or(String::new(), |c| c.to_string()))
                .arg(self.keys.hold_requests())
                .arg(self.keys.joined())
                .query_async(&mut conn)
                .await
                .map_err(|source| PresenceError::Beat {
                    name: beat.name.clone(),
                    source,
                })?;
        Ok(Receipt {
            at: DateTime::from_timestamp_millis(at_ms).unwrap_or_default(),
            hold,
            refused_request: (!refused.is_empty()).then_some(refused),
            problem: (!problem.is_empty()).then(|| self.holds_problem()),
        })
    }

    /// Reads every registered bench (with `names` empty), or the named ones, in one round trip
    /// whatever the fleet's size. A named bench that never beat comes back `Reading::Missing`.
    pub async fn read(&self, names: &[BenchName]) -> Result<Snapshot, PresenceError> {
        if !names.is_empty() {
            let (_, _, snapshot) = self
                .read_registered(&Registry::of(names, &self.keys))
                .await?;
            return Ok(snapshot);
        }
        let held = self.registry.lock().expect("registry lock").clone();
        if let Some(registry) = held {
            let (version, size, snapshot) = self.read_registered(&registry).await?;
            if version == registry.version && size == registry.size {
                return Ok(snapshot);
            }
            // The copy is out of date (or a name of the join set got its join key since).
        }
        self.read_cold().await
    }

    /// The warm plan: one pipeline over a registry the reader holds. Returns the registry's
    /// version and the sizes of its sets alongside, so the caller can tell whether its copy was
    /// current; a name of the join set that got its join key since shows as a size that cannot
    /// be, so the copy reads as out of date.
    async fn read_registered(
        &self,
        registry: &Registry,
    ) -> Result<(String, (usize, usize), Snapshot), PresenceError> {
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
        let batches = registry.keys.chunks(MGET_BATCH).len();
        for batch in registry.keys.chunks(MGET_BATCH) {
            pipe.cmd("MGET").arg(batch);
        }
        for batch in registry.keys.chunks(MGET_BATCH) {
            pipe.cmd("EXISTS").arg(batch);
        }
        // Whether a name of the join set that had no join key got one: then it is a bench now.
        let proving = registry.unproven.chunks(MGET_BATCH).len();
        for batch in registry.unproven.chunks(MGET_BATCH) {
            pipe.cmd("EXISTS").arg(batch);
        }
        pipe.cmd("TIME");
        let mut conn = self.conn.clone();
        let mut replies: Vec<redis::RedisResult<redis::Value>> = pipe
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
        let registered: usize = parse_result(head.next())?;
        let mut joined: usize = parse_result(head.next())?;
        for batch in proved {
            let n: usize = parse_result(Some(batch))?;
            if n > 0 {
                // No set has this size: the caller's copy reads as out of date.
                joined = usize::MAX;
            }
        }
        let mut problems = Vec::new();
        let holds = self.holds_or_problem(head.next(), &mut problems)?;
        let mut values = Vec::with_capacity(registry.names.len());
        for batch in mget {
            let part: Vec<Option<Vec<u8>>> = parse_result(Some(batch))?;
            values.extend(part);
        }
        let mut existing = 0usize;
        for batch in exists {
            let n: usize = parse_result(Some(batch))?;
            existing += n;
        }
        let types = if existing > values.iter().filter(|v| v.is_some()).count() {
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
        Ok((version.unwrap_or_default(), (registered, joined), snapshot))
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

    fn holds_problem(&self) -> String {
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
        let mut benches = Vec::with_capacity(members.len());
        let mut foreign = Vec::new();
        let mut utf8 = true;
        // The script names (1-based) the members whose key holds another type.
        let wrong: std::collections::HashMap<usize, String> = types.into_iter().collect();
        let mut wrong_names: Vec<(BenchName, String)> = Vec::new();
        for (i, (raw, value)) in members.into_iter().zip(values).enumerate() {
            match String::from_utf8(raw) {
                Ok(text) => match BenchName::parse(&text) {
                    Ok(name) => {
                        if let Some(t) = wrong.get(&(i + 1)) {
                            wrong_names.push((name.clone(), t.clone()));
                        }
                        benches.push((name, value))
                    }
                    Err(_) => foreign.push(text),
                },
                Err(e) => {
                    utf8 = false;
                    foreign.push(String::from_utf8_lossy(e.as_bytes()).into_owned());
                }
            }
        }
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
        // A member that is not UTF-8 has no name to build a key from: with one in the registry
        // nothing is kept, and every read is cold, so it is still reported.
        // A name of the join set that is not a bench name has no join key fleet writes: only the
        // bench names among them are watched.
        let unproven = unproven
            .iter()
            .filter_map(|raw| std::str::from_utf8(raw).ok())
            .filter_map(|text| BenchName::parse(text).ok())
            .map(|name| self.keys.joined_key(&name))
            .collect();
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

    /// Asks a bench to hold: the bench carries the request on its own next beat. With `ttl`, the
    /// request lapses by itself on the server's clock. Registers the bench, so it shows in
    /// `fleet state` before its first beat.
    pub async fn request_hold(
        &self,
        name: &BenchName,
        reason: &Reason,
        ttl: Option<Duration>,
    ) -> Result<(), PresenceError> {
        self.hold(name, reason, ttl, false).await.map(drop)
    }

    /// `request_hold` for a bench that is registered (it beat, or was asked to hold before):
    /// returns false, writing nothing, for a name fleet has never heard of (a typo, most
    /// likely).
    pub async fn request_hold_known(
        &self,
        name: &BenchName,
        reason: &Reason,
        ttl: Option<Duration>,
    ) -> Result<bool, PresenceError> {
        self.hold(name, reason, ttl, true).await
    }

    async fn hold(
        &self,
        name: &BenchName,
        reason: &Reason,
        ttl: Option<Duration>,
        known_only: bool,
    ) -> Result<bool, PresenceError> {
        let keys = [
            self.keys.hold_requests(),
            self.keys.registry(),
            self.keys.registry_version(),
            self.keys.joined(),
            self.keys.joined_key(name),
        ];
        let ms = ttl.map_or(0, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        let mut conn = self.conn.clone();
        eval(HOLD, &keys)
            .arg(name.as_str())
            .arg(reason.as_str())
            .arg(ms)
            .arg(if known_only { "1" } else { "0" })
            .query_async::<i64>(&mut conn)
            .await
            .map(|at| at >= 0)
            .map_err(|source| PresenceError::RequestHold {
                name: name.clone(),
                source,
            })
    }

    /// Withdraws a hold request; the bench drops the hold on its next beat. Returns whether a
    /// request was there.
    pub async fn release(&self, name: &BenchName) -> Result<bool, PresenceError> {
        let mut conn = self.conn.clone();
        let removed: i64 = redis::cmd("HDEL")
            .arg(self.keys.hold_requests())
            .arg(name.as_str())
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Release {
                name: name.clone(),
                source,
            })?;
        Ok(removed > 0)
    }

    /// When each of `names` last beat (server time), where the store still knows. One round
    /// trip. For the views only: a DOWN bench's last word, never a decision.
    pub async fn last_seen(
        &self,
        names: &[BenchName],
    ) -> Result<Vec<Option<DateTime<Utc>>>, PresenceError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        // The join keys hold it; the last-seen hash holds what beats wrote before them. The later
        // of the two counts (0 in a join key: the bench has not beat with a TTL since it joined).
        let mut conn = self.conn.clone();
        let (joined, seen): (Vec<Option<i64>>, Vec<Option<i64>>) = redis::pipe()
            .cmd("MGET")
            .arg(
                names
                    .iter()
                    .map(|n| self.keys.joined_key(n))
                    .collect::<Vec<_>>(),
            )
            .cmd("HMGET")
            .arg(self.keys.last_seen())
            .arg(names.iter().map(BenchName::as_str).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await
            .map_err(|e| {
                PresenceError::ReadReply(format!("reading when benches were last seen: {e}"))
            })?;
        Ok(joined
            .into_iter()
            .zip(seen)
            .map(|(joined, seen)| {
                joined
                    .max(seen)
                    .filter(|ms| *ms > 0)
                    .and_then(DateTime::from_timestamp_millis)
            })
            .collect())
    }

    /// Removes benches from the registry and the join set, with their join keys and hold
    /// requests. Returns, per name, whether it was registered. A bench that beats again registers
    /// itself again.
    pub async fn forget(&self, names: &[BenchName]) -> Result<Vec<bool>, PresenceError> {
        let mut keys = vec![
            self.keys.registry(),
            self.keys.registry_version(),
            self.keys.hold_requests(),
            self.keys.last_seen(),
            self.keys.joined(),
        ];
        keys.extend(names.iter().map(|n| self.keys.joined_key(n)));
        let mut cmd = eval(FORGET, &keys);
        for name in names {
            cmd.arg(name.as_str());
        }
        let mut conn = self.conn.clone();
        let removed: Vec<i64> = cmd
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Forget { source })?;
        Ok(removed.into_iter().map(|n| n > 0).collect())
    }
}
