//! The presence store: beats, the fleet read, hold requests and the registry (SPEC §2.3 to §2.5).
//!
//! Every method is one round trip: a script (the controller's verbs: hold, forget, register), or
//! one pipeline; the fleet read of a reader that holds no registry yet, and the first beat of a
//! bench in a process, are the exceptions, two (and one more for a read that finds keys of
//! another type, to name their type). The store never decides a state; it turns what
//! Redis holds into `domain::state` readings, judged later on the server's clock that the round
//! trip of the keys read.
//!
//! No bench's or viewer's call runs a script (SPEC §7 S1): the beat (`beat`) is plain commands on
//! the bench's own keys, and the reads are pipelines that read every value a bench wrote to a
//! bound (`GETRANGE`, S3). The fleet read has two plans (SPEC §2.5). A reader that holds a current
//! copy of the registry, or names its benches, sends one pipeline: the registry's version and
//! sizes, `HGETALL` of the hold requests, a bounded `GETRANGE` of every heartbeat key, `TIME`. A
//! reader without one, or whose copy the version shows out of date, lists the registry first and
//! then sends that pipeline over it.
//!
//! The registry (SPEC §2.3) is written by fleet's own users only; the join set, which the
//! previous release's beats added their names to, is read up to a bound, and a name in it counts
//! only while one of the bench's own keys exists (its join key or its heartbeat). So a bench's
//! Redis user, confined to its own keys by `fleet acl` (SPEC §2.11), can neither register nor
//! remove a bench, nor make a read longer.
//!
//! The warm read plan is in `read`, the cold one in `cold`; what the replies hold is decoded in
//! `decode`, pure. This file makes the writes and the small reads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;

use crate::domain::name::{BenchName, Reason};
use crate::domain::state::Bench;

use super::keys::Keys;
use super::power_off::OffRequest;
use super::script::{Script, eval, script};

mod beat;
mod cold;
mod decode;
mod read;

pub use beat::STAMP_TOLERANCE;
#[cfg(test)]
pub(crate) use beat::commands as beat_commands;

pub use crate::domain::heartbeat::{MAX_TTL, decode_request};
pub use decode::MAX_VALUE;
use read::Registry;
pub use read::{Named, PIECE};

const HOLD: Script = script!("hold.lua");
const FORGET: Script = script!("forget.lua");
const REGISTER: Script = script!("register.lua");

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
    /// The user may not read a heartbeat key as this release does (`GETRANGE`, SPEC §7 S3): its
    /// ACL file is older than this fleet (README, the upgrade order).
    #[error(
        "this Redis user may not read the heartbeat keys with GETRANGE, as this release of fleet \
         does: its ACL file is older than this fleet. Load the file `fleet acl` prints, or, while \
         agents of the previous release still beat, add the command to the previous file's users \
         (README, \"Upgrading\")"
    )]
    Outdated(#[source] redis::RedisError),
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
    #[error("registering benches")]
    Register {
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
    /// The power-off request the bench has not answered yet (SPEC §4.10).
    pub off_request: Option<OffRequest>,
    /// Why the power-off request could not be read (a user whose ACL predates it, a foreign
    /// write), with the repair: the beat landed all the same.
    pub off_problem: Option<String>,
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

/// When benches last beat, as `Presence::last_seen` read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LastSeen {
    /// Each bench's time, in the order asked; `None` where the store does not know it.
    pub at: Vec<Option<DateTime<Utc>>>,
    /// The keys of another type the read left out, each with its repair.
    pub problems: Vec<String>,
}

/// A reply of the last-seen read: its value, or `None` when its key holds another type than
/// fleet writes there (Redis's WRONGTYPE). Any other error fails the read (SPEC §2.5).
fn other_type(
    reply: Option<redis::RedisResult<redis::Value>>,
    key: &str,
) -> Result<Option<redis::Value>, PresenceError> {
    match reply {
        Some(Ok(value)) => Ok(Some(value)),
        Some(Err(e)) if e.code() == Some("WRONGTYPE") => Ok(None),
        Some(Err(source)) => Err(PresenceError::Read { source }),
        None => Err(PresenceError::ReadReply(format!(
            "no reply for {key} in the last-seen read"
        ))),
    }
}

/// The presence store over one connection (a verb's, or a long-running process's lasting one).
#[derive(Clone)]
pub struct Presence<C> {
    conn: C,
    keys: Keys,
    registry: Arc<Mutex<Option<Arc<Registry>>>>,
    /// What the beats of this process know between them (`beat`).
    beating: Arc<Mutex<beat::Beating>>,
}

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            registry: Arc::default(),
            beating: Arc::default(),
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Why the bench's power-off keys could not be read, with the repair.
    fn off_problem(&self, name: &BenchName, error: &str) -> String {
        // Redis says a refusal inside a script in its own words, not as NOPERM.
        if ["NOPERM", "permission", "can't run this command"]
            .iter()
            .any(|w| error.contains(w))
        {
            format!(
                "this bench's Redis user may not read its power-off request ({error}); write the \
                 ACL file again with `fleet acl` (SPEC §2.11) and load it, or no power-off asked \
                 of {name} is ever seen"
            )
        } else {
            format!(
                "the power-off keys of {name} cannot be read ({error}); delete them (redis-cli \
                 DEL {} {})",
                self.keys.off_request(name),
                self.keys.off_ack(name)
            )
        }
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
            self.keys.heartbeat(name),
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
    ///
    /// A key of another type than fleet writes there (a join key that is no string, a last-seen
    /// record that is no hash: a foreign write) costs only what it held: that time is unknown,
    /// the key is named in `LastSeen::problems` with its repair, and every other time is read, as
    /// a heartbeat of another type costs only its own bench (SPEC §2.3 item 3, §2.5).
    pub async fn last_seen(&self, names: &[BenchName]) -> Result<LastSeen, PresenceError> {
        if names.is_empty() {
            return Ok(LastSeen::default());
        }
        // The join keys hold it; the last-seen hash holds what beats wrote before them. The later
        // of the two counts (0 in a join key: the bench has not beat with a TTL since it joined).
        // A join key is the bench's own, so it is read bounded, as every value a bench writes
        // (SPEC §7): a number of ms is 13 digits. Errors stay per command, so a key of another
        // type spoils only its own reply.
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for name in names {
            pipe.cmd("GETRANGE")
                .arg(self.keys.joined_key(name))
                .arg(0)
                .arg(31);
        }
        pipe.cmd("HMGET")
            .arg(self.keys.last_seen())
            .arg(names.iter().map(BenchName::as_str).collect::<Vec<_>>());
        let mut replies: Vec<redis::RedisResult<redis::Value>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        let mut problems = Vec::new();
        let seen_key = self.keys.last_seen();
        // A time that is not a number of ms (a foreign write) is no time, as in a join key.
        let ms = |value: redis::Value| match value {
            redis::Value::BulkString(b) => std::str::from_utf8(&b).ok()?.parse::<i64>().ok(),
            _ => None,
        };
        let seen: Vec<Option<i64>> = match other_type(replies.pop(), &seen_key)? {
            Some(redis::Value::Array(values)) => values.into_iter().map(ms).collect(),
            Some(other) => {
                return Err(PresenceError::ReadReply(format!(
                    "HMGET of {seen_key} returned {other:?}"
                )));
            }
            None => {
                problems.push(format!(
                    "{seen_key} is not a hash of last-seen times (something else wrote it): \
                     LAST SEEN leaves it out until it is repaired (`redis-cli DEL '{seen_key}'`)"
                ));
                Vec::new()
            }
        };
        let mut joined = Vec::with_capacity(names.len());
        for (name, reply) in names.iter().zip(replies) {
            let key = self.keys.joined_key(name);
            joined.push(match other_type(Some(reply), &key)? {
                Some(value) => ms(value),
                None => {
                    problems.push(format!(
                        "{key} is not the join key of {name} (it holds another type than a \
                         string: something else wrote it): its LAST SEEN is unknown until it is \
                         repaired (`redis-cli DEL '{key}'`; the bench's next beat writes it again)"
                    ));
                    None
                }
            });
        }
        let at = joined
            .into_iter()
            .zip(seen.into_iter().chain(std::iter::repeat(None)))
            .map(|(joined, seen)| {
                joined
                    .max(seen)
                    .filter(|ms| *ms > 0)
                    .and_then(DateTime::from_timestamp_millis)
            })
            .collect();
        Ok(LastSeen { at, problems })
    }

    /// Registers benches (SPEC §2.3): every reader lists them, DOWN until they beat. Returns, per
    /// name, whether it was new. One round trip, by a user that may write the registry (fleet's
    /// own: a bench's may not).
    pub async fn register(&self, names: &[BenchName]) -> Result<Vec<bool>, PresenceError> {
        let keys = [self.keys.registry(), self.keys.registry_version()];
        let mut cmd = eval(REGISTER, &keys);
        for name in names {
            cmd.arg(name.as_str());
        }
        let mut conn = self.conn.clone();
        let added: Vec<i64> = cmd
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Register { source })?;
        Ok(added.into_iter().map(|n| n > 0).collect())
    }

    /// Removes benches from the registry and the join set, with their join keys, heartbeat keys
    /// and hold requests. Returns, per name, whether it was registered. A bench that beats again
    /// registers itself again.
    pub async fn forget(&self, names: &[BenchName]) -> Result<Vec<bool>, PresenceError> {
        let mut keys = vec![
            self.keys.registry(),
            self.keys.registry_version(),
            self.keys.hold_requests(),
            self.keys.last_seen(),
            self.keys.joined(),
        ];
        keys.extend(names.iter().map(|n| self.keys.joined_key(n)));
        keys.extend(names.iter().map(|n| self.keys.heartbeat(n)));
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
