//! The presence store: beats, the one-round-trip fleet read, hold requests and the registry
//! (SPEC §2.3 to §2.5).
//!
//! Every method is one round trip: a script, or one atomic pipeline. The store never decides a
//! state; it turns what Redis holds into `domain::state` readings, judged later on the server's
//! clock that the same round trip read.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use redis::aio::ConnectionLike;
use serde::{Deserialize, Serialize};

use crate::domain::name::{BenchName, Reason};
use crate::domain::state::{Bench, Key, Reading};

use super::keys::Keys;

/// The longest TTL one beat may promise. A long promise hides a crash for its whole length
/// (reference §1.7), and a month is already far past the longest planned sleep.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

static BEAT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/beat.lua")));
static READ: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/read.lua")));

/// A failed store operation; each variant names the operation and the bench or key it was for.
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
}

/// The fleet as one read saw it: every bench, sorted by name, and the server's time of the read.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub now: DateTime<Utc>,
    pub benches: Vec<Bench>,
    /// Registry members that are not valid bench names (written by something other than fleet).
    /// They are reported, never read as benches.
    pub foreign: Vec<String>,
}

/// The heartbeat value as it lies in Redis (SPEC §2.3). The beat script writes it with cjson.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    v: u32,
    at: i64,
    ttl: u64,
    #[serde(default)]
    hold: Option<String>,
    #[serde(default)]
    load: Option<f64>,
    #[serde(default)]
    cores: Option<u32>,
}

/// The presence store over one connection (a multiplexed connection or a connection manager).
#[derive(Clone)]
pub struct Presence<C> {
    conn: C,
    keys: Keys,
}

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        Self { conn, keys }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Writes one beat and registers the bench, in one round trip (the beat script).
    pub async fn beat(&self, beat: &Beat) -> Result<Receipt, PresenceError> {
        let ttl_ms = u64::try_from(beat.ttl.min(MAX_TTL).as_millis()).unwrap_or(u64::MAX);
        let mut conn = self.conn.clone();
        let (at_ms, hold): (i64, Option<String>) = BEAT
            .key(self.keys.heartbeat(&beat.name))
            .key(self.keys.hold_request(&beat.name))
            .key(self.keys.registry())
            .arg(beat.name.as_str())
            .arg(ttl_ms)
            .arg(beat.hold.as_ref().map_or("", |h| h.as_str()))
            .arg(beat.load.map_or(String::new(), |l| l.to_string()))
            .arg(beat.cores.map_or(String::new(), |c| c.to_string()))
            .invoke_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Beat {
                name: beat.name.clone(),
                source,
            })?;
        Ok(Receipt {
            at: DateTime::from_timestamp_millis(at_ms).unwrap_or_default(),
            hold,
        })
    }

    /// Reads every registered bench, or the named ones, in one round trip whatever the fleet's
    /// size. Named benches that never beat come back as `Reading::Missing`.
    pub async fn read(&self, names: &[BenchName]) -> Result<Snapshot, PresenceError> {
        let mut conn = self.conn.clone();
        let mut invocation = READ.key(self.keys.registry());
        invocation
            .arg(self.keys.heartbeat_prefix())
            .arg(self.keys.hold_request_prefix());
        for name in names {
            invocation.arg(name.as_str());
        }
        let reply: ReadReply = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        decode_read(reply)
    }

    /// Asks a bench to hold: the bench carries the request on its own next beat. With `ttl`, the
    /// request lapses by itself. Registers the bench, so it shows in `fleet state`.
    pub async fn request_hold(
        &self,
        name: &BenchName,
        reason: &Reason,
        ttl: Option<Duration>,
    ) -> Result<(), PresenceError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        let set = pipe
            .cmd("SET")
            .arg(self.keys.hold_request(name))
            .arg(reason.as_str());
        if let Some(ttl) = ttl {
            set.arg("PX").arg(ttl.as_millis().max(1) as u64);
        }
        set.ignore();
        pipe.sadd(self.keys.registry(), name.as_str()).ignore();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|source| PresenceError::RequestHold {
                name: name.clone(),
                source,
            })
    }

    /// Withdraws a hold request; the bench drops the hold on its next beat. Returns whether a
    /// request was there.
    pub async fn release(&self, name: &BenchName) -> Result<bool, PresenceError> {
        let mut conn = self.conn.clone();
        let removed: i64 = redis::cmd("DEL")
            .arg(self.keys.hold_request(name))
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Release {
                name: name.clone(),
                source,
            })?;
        Ok(removed > 0)
    }

    /// Removes benches from the registry, with their hold requests. Returns, per name, whether
    /// it was registered. A bench that beats again registers itself again.
    pub async fn forget(&self, names: &[BenchName]) -> Result<Vec<bool>, PresenceError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.atomic();
        for name in names {
            pipe.srem(self.keys.registry(), name.as_str());
            pipe.del(self.keys.hold_request(name)).ignore();
        }
        let removed: Vec<i64> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Forget { source })?;
        Ok(removed.into_iter().map(|n| n > 0).collect())
    }
}

type ReadReply = (
    String,
    String,
    Vec<Vec<u8>>,
    Vec<Option<Vec<u8>>>,
    Vec<i64>,
    Vec<Option<Vec<u8>>>,
);

fn decode_read(reply: ReadReply) -> Result<Snapshot, PresenceError> {
    let (secs, micros, names, beats, pttls, holds) = reply;
    let now = server_time(&secs, &micros)
        .ok_or_else(|| PresenceError::ReadReply(format!("TIME was {secs:?} {micros:?}")))?;
    if beats.len() != names.len() || pttls.len() != names.len() || holds.len() != names.len() {
        return Err(PresenceError::ReadReply(format!(
            "{} names but {} values, {} TTLs and {} hold requests",
            names.len(),
            beats.len(),
            pttls.len(),
            holds.len()
        )));
    }
    let mut benches = Vec::with_capacity(names.len());
    let mut foreign = Vec::new();
    let rows = names.into_iter().zip(beats).zip(pttls).zip(holds);
    for (((raw, beat), pttl), hold) in rows {
        let Some(name) = std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| BenchName::parse(s).ok())
        else {
            foreign.push(String::from_utf8_lossy(&raw).into_owned());
            continue;
        };
        let (reading, load, cores) = match beat {
            None => (Reading::Missing, None, None),
            Some(bytes) => decode_beat(&bytes, pttl, now),
        };
        // A request that is not a valid reason (a foreign write) is shown as nothing rather
        // than trusted: it is an operator's ask, not the bench's word.
        let requested_hold = hold
            .and_then(|h| String::from_utf8(h).ok())
            .and_then(|h| Reason::parse(&h).ok());
        benches.push(Bench {
            name,
            load,
            cores,
            reading,
            requested_hold,
        });
    }
    benches.sort_by(|a, b| a.name.cmp(&b.name));
    benches.dedup_by(|a, b| a.name == b.name);
    foreign.sort();
    Ok(Snapshot {
        now,
        benches,
        foreign,
    })
}

/// Decodes one heartbeat value and its remaining TTL into a reading and the load facts.
fn decode_beat(bytes: &[u8], pttl: i64, now: DateTime<Utc>) -> (Reading, Option<f64>, Option<u32>) {
    let wire: Wire = match serde_json::from_slice(bytes) {
        Ok(wire) => wire,
        Err(e) => {
            return (
                Reading::Unreadable(format!("not a heartbeat ({e})")),
                None,
                None,
            );
        }
    };
    if wire.v != 1 {
        return (
            Reading::Unreadable(format!(
                "heartbeat version {} is not known to this fleet",
                wire.v
            )),
            None,
            None,
        );
    }
    let hold = match wire.hold.as_deref().map(Reason::parse).transpose() {
        Ok(hold) => hold,
        Err(e) => return (Reading::Unreadable(format!("bad hold ({e})")), None, None),
    };
    let Some(written_at) = DateTime::from_timestamp_millis(wire.at) else {
        return (
            Reading::Unreadable(format!("bad write time {}", wire.at)),
            None,
            None,
        );
    };
    let load = wire.load.filter(|l| l.is_finite() && *l >= 0.0);
    let expires_at = match pttl {
        // -1: the key exists and has no TTL. The read saw the key, so -2 cannot follow a value;
        // if it did, the key expired and the reading is as missing.
        -1 => None,
        ms if ms < 0 => return (Reading::Missing, None, None),
        ms => Some(now + TimeDelta::milliseconds(ms)),
    };
    let key = Key {
        written_at,
        ttl: Duration::from_millis(wire.ttl),
        hold,
        expires_at,
    };
    (Reading::Beat(key), load, wire.cores)
}

fn server_time(secs: &str, micros: &str) -> Option<DateTime<Utc>> {
    let secs: i64 = secs.parse().ok()?;
    let micros: u32 = micros.parse().ok()?;
    DateTime::from_timestamp(secs, micros.checked_mul(1000)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000).unwrap()
    }

    #[test]
    fn a_well_formed_value_decodes_with_its_expiry_from_pttl() {
        let v = br#"{"v":1,"at":1799999990000,"ttl":30000,"hold":"upgrade","load":21,"cores":16}"#;
        let (reading, load, cores) = decode_beat(v, 20_000, now());
        let Reading::Beat(key) = reading else {
            panic!("{reading:?}")
        };
        assert_eq!(key.ttl, Duration::from_secs(30));
        assert_eq!(key.hold.unwrap().as_str(), "upgrade");
        assert_eq!(key.expires_at, Some(now() + TimeDelta::seconds(20)));
        assert_eq!((load, cores), (Some(21.0), Some(16)));
    }

    #[test]
    fn garbage_values_are_unreadable_not_errors() {
        for (value, want) in [
            (&b"hello"[..], "not a heartbeat"),
            (br#"{"v":2,"at":1,"ttl":1}"#, "version 2"),
            (br#"{"v":1,"ttl":1}"#, "not a heartbeat"),
            (br#"{"v":1,"at":1,"ttl":-5}"#, "not a heartbeat"),
            (br#"{"v":1,"at":1,"ttl":1,"hold":"a\tb"}"#, "bad hold"),
            (br#"{"v":1,"at":1,"ttl":1,"hold":""}"#, "bad hold"),
            (&[0xff, 0xfe][..], "not a heartbeat"),
        ] {
            let (reading, _, _) = decode_beat(value, 1000, now());
            match reading {
                Reading::Unreadable(why) => assert!(why.contains(want), "{why}"),
                other => panic!("{value:?} read as {other:?}"),
            }
        }
    }

    #[test]
    fn a_key_without_ttl_has_no_expiry() {
        let v = br#"{"v":1,"at":1,"ttl":30000}"#;
        let (Reading::Beat(key), _, _) = decode_beat(v, -1, now()) else {
            panic!()
        };
        assert_eq!(key.expires_at, None);
    }

    #[test]
    fn a_bad_load_is_dropped_not_trusted() {
        let v = br#"{"v":1,"at":1,"ttl":30000,"load":-1}"#;
        assert_eq!(decode_beat(v, 5, now()).1, None);
    }
}
