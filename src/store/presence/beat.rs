//! The beat (SPEC §2.4): a bench's own word that it is there, written with plain commands that
//! key patterns confine, in one pipeline. No script: a user that may run a script may run any
//! (Redis's ACLs cannot tell one script from another), and one `while true do end` freezes Redis
//! for every other bench (SPEC §7).
//!
//! The pipeline: `SADD` of the name to the registry (only while this user may: a bench's own user
//! may not, and is registered by `fleet serve` as a slot, SPEC §2.3), `TIME`, `GET` of the key as
//! it was, the `SET` of the heartbeat with `PXAT` its deadline (or `DEL` for a TTL of 0), the
//! `SET` of the join key (when it last beat), `HGET` of its hold request, `GET` of its power-off
//! request and of its own answer, and `SPUBLISH` of its name on the wake channel when the beat
//! changes its state. Every command is one the previous release's ACL file already granted a
//! bench (but the `SADD`), so an agent of this release beats under either file (README, the
//! upgrade order).
//!
//! A script stamped the beat with the server's `TIME` and wrote the expiry from it. Without one,
//! the value's `at` is the server's time as this process last read it (every beat's reply holds a
//! `TIME`), moved on by the local monotonic clock: it is never later than the write (the `TIME`
//! was read before the beat was sent), so the promise `at + ttl` is never longer than the one a
//! script would have made. The key is written with `PXAT at + ttl`, so Redis expires it exactly at
//! the deadline its value states, on the server's clock, as before. The reply's own `TIME`, run
//! just before the `SET`, checks the stamp: one more than `STAMP_TOLERANCE` behind (a process that
//! was suspended, a failover to a host whose clock differs) or ahead is written again at once.
//!
//! What a script decided from the key as it found it, the process decides from what it knows:
//! the hold it carries is the request its last beat read (the first beat of a bench in this
//! process reads the key, the request and `TIME` first: one round trip more, once), and whether
//! to announce a change from the beat it wrote last. The reply says whether it knew right: a
//! request that changed is carried by a beat sent at once, a change it did not foresee (the key
//! expired while the process stalled, or was deleted) is announced at once. A bench's state is
//! therefore what it was with the script within one round trip.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::DateTime;
use redis::Value;
use redis::aio::ConnectionLike;
use serde::Serialize;

use crate::domain::beat::{STAMP_TOLERANCE_MS, again, carried, changes};
use crate::domain::heartbeat::decode_request;
use crate::domain::name::BenchName;
use crate::domain::state::HoldRequest;

use super::{Beat, MAX_TTL, Presence, PresenceError, Receipt};
use crate::store::keys::Keys;
use crate::store::power_off::pending;

/// How far the stamp of a beat may be from the server's `TIME` run just before its `SET`, either
/// way, before the beat is written again with the server's time: a second, the tolerance the
/// reader allows a beat from the server's future (SPEC §2.2 row 2b; `domain::beat::again`).
pub const STAMP_TOLERANCE: Duration = Duration::from_millis(STAMP_TOLERANCE_MS as u64);

/// How many benches one process remembers the last beat of. A bench it forgot costs its next beat
/// one round trip more; the bound keeps a process that beats for many benches (a load test, `fleet
/// up`) from growing without end.
const REMEMBERED: usize = 200_000;

/// What one process knows between its beats: the server's clock as it last read it, whether its
/// user may register a bench, and per bench the request its last beat read and what it wrote.
#[derive(Debug, Default)]
pub(super) struct Beating {
    clock: Option<Clock>,
    /// Set when the server refused this user the registry's `SADD` (a bench's own user, SPEC
    /// §7): it is not sent again.
    may_not_register: bool,
    benches: HashMap<BenchName, Known>,
}

/// The server's time, as a `TIME` reply said it, at the local instant the reply arrived.
#[derive(Clone, Copy, Debug)]
struct Clock {
    server_ms: i64,
    at: Instant,
}

impl Clock {
    /// The server's time now, as far as this process can tell: never later than the server's
    /// own, since the `TIME` ran before its reply arrived.
    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.server_ms.saturating_add(elapsed)
    }
}

/// What a process knows of one bench since its last beat.
#[derive(Clone, Debug)]
struct Known {
    /// The bench's hold request as the last reply read it.
    request: Request,
    /// The key as this process last wrote it: its hold and deadline, `None` when it deleted it.
    written: Option<Written>,
}

#[derive(Clone, Debug, PartialEq)]
struct Written {
    hold: Option<String>,
    deadline_ms: i64,
    /// The value, to judge the next beat's announcement by.
    value: Vec<u8>,
}

/// A hold request as a beat read it.
#[derive(Clone, Debug, PartialEq)]
enum Request {
    None,
    Valid(HoldRequest),
    /// One the reader refuses (a foreign write): never carried (SPEC §2.4), and said why.
    Refused(String),
    /// The hold-request key holds another type than a hash.
    WrongType,
}

impl Request {
    fn of(reply: Result<Option<Vec<u8>>, redis::RedisError>) -> Request {
        match reply {
            Ok(None) => Request::None,
            Ok(Some(raw)) => match decode_request(&raw) {
                Some(request) => Request::Valid(request),
                None => Request::Refused(
                    "the request is not one the readers accept (a reason of 1 to 256 printable \
                     characters, a lapse in whole ms)"
                        .to_owned(),
                ),
            },
            Err(_) => Request::WrongType,
        }
    }

    /// The request, when it is one the reader accepts.
    fn valid(&self) -> Option<&HoldRequest> {
        match self {
            Request::Valid(r) => Some(r),
            Request::None | Request::Refused(_) | Request::WrongType => None,
        }
    }
}

/// The heartbeat value (SPEC §2.3), as the reader decodes it.
#[derive(Serialize)]
struct Value1<'a> {
    v: u32,
    at: i64,
    ttl: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    load: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cores: Option<u32>,
}

/// One beat as it will be sent.
struct Plan {
    at_ms: i64,
    hold: Option<String>,
    /// The value and deadline, `None` for a TTL of 0 (the key is deleted).
    written: Option<Written>,
    announce: bool,
    register: bool,
}

/// What the pipeline's reply said.
struct Reply {
    time_ms: i64,
    arrived: Instant,
    before: Option<Vec<u8>>,
    request: Request,
    registry: Option<redis::RedisError>,
    off: Result<Option<String>, String>,
    ack: Result<Option<String>, String>,
}

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    /// Writes one beat (SPEC §2.4): one round trip; two for a bench this process has not beat
    /// for yet, or when the reply shows the beat carried a request that changed, was stamped off
    /// the server's clock, or changed the bench's state unannounced.
    pub async fn beat(&self, beat: &Beat) -> Result<Receipt, PresenceError> {
        let failed = |source| PresenceError::Beat {
            name: beat.name.clone(),
            source,
        };
        let (clock, known, may_not_register) = {
            let beating = self.beating.lock().expect("beating lock");
            (
                beating.clock,
                beating.benches.get(&beat.name).cloned(),
                beating.may_not_register,
            )
        };
        // What the key holds before this beat, when read just now (exact), else as this process
        // last wrote it (foreseen).
        let (mut clock, mut known, mut before) = match (clock, known) {
            (Some(clock), Some(known)) => {
                let before = known.written.as_ref().map(|w| w.value.clone());
                (clock, known, before)
            }
            _ => {
                let (clock, before, request) = self.learn(&beat.name).await.map_err(failed)?;
                (
                    clock,
                    Known {
                        request,
                        written: None,
                    },
                    before,
                )
            }
        };
        let mut register = !may_not_register;
        let mut once = true;
        // A change of state a beat made and did not announce, owed until one does.
        let mut owed = false;
        loop {
            let plan = plan(beat, &clock, &known.request, before.as_deref(), register);
            let reply = self.send(beat, &plan).await.map_err(failed)?;
            clock = Clock {
                server_ms: reply.time_ms,
                at: reply.arrived,
            };
            if let Some(e) = &reply.registry {
                // A bench's own user may not write the registry (SPEC §7): it is registered as a
                // slot by `fleet serve`, and the process stops asking.
                if e.code() == Some("NOPERM") {
                    register = false;
                }
            }
            // docs/protocol.md §5.4, "at once".
            let (unannounced, wrong) = judged(beat, &plan, &reply);
            owed = !plan.announce && (owed || unannounced);
            known = Known {
                request: reply.request.clone(),
                written: plan.written.clone(),
            };
            self.remember(&beat.name, clock, &known, register);
            if once && wrong {
                // Written again at once: the request changed (or lapsed) since the last beat
                // read it, or the stamp was off the server's clock by more than the tolerance.
                once = false;
                before = plan.written.map(|w| w.value);
                continue;
            }
            if owed {
                self.announce(&beat.name).await;
            }
            return Ok(self.receipt(beat, &plan, reply));
        }
    }

    /// The first beat of a bench in this process learns what a script would have read: the
    /// server's time, the key as it is, the bench's hold request. One round trip.
    async fn learn(
        &self,
        name: &BenchName,
    ) -> Result<(Clock, Option<Vec<u8>>, Request), redis::RedisError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("TIME")
            .get(self.keys.heartbeat(name))
            .hget(self.keys.hold_requests(), name.as_str());
        let mut conn = self.conn.clone();
        let replies: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut conn).await?;
        let arrived = Instant::now();
        let mut replies = replies.into_iter();
        let time_ms = time_ms(replies.next())?;
        let before = replies.next().and_then(|r| r.ok()).and_then(bytes);
        let request = Request::of(reply_bytes(replies.next()));
        Ok((
            Clock {
                server_ms: time_ms,
                at: arrived,
            },
            before,
            request,
        ))
    }

    /// The beat's pipeline, sent: one round trip.
    async fn send(&self, beat: &Beat, plan: &Plan) -> Result<Reply, redis::RedisError> {
        let pipe = pipeline(&self.keys, &beat.name, plan);
        let mut conn = self.conn.clone();
        let replies: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut conn).await?;
        let arrived = Instant::now();
        let mut replies = replies.into_iter();
        let registry = if plan.register {
            replies.next().and_then(Result::err)
        } else {
            None
        };
        let time_ms = time_ms(replies.next())?;
        let before = replies.next().and_then(|r| r.ok()).and_then(bytes);
        // The writes: a refusal or another failure fails the beat.
        for _ in 0..2 {
            match replies.next() {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Err(short()),
            }
        }
        let request = Request::of(reply_bytes(replies.next()));
        let text = |reply: Option<redis::RedisResult<Value>>| match reply {
            Some(Ok(v)) => Ok(bytes(v).map(|b| String::from_utf8_lossy(&b).into_owned())),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("no reply".to_owned()),
        };
        let off = text(replies.next());
        let ack = text(replies.next());
        Ok(Reply {
            time_ms,
            arrived,
            before,
            request,
            registry,
            off,
            ack,
        })
    }

    /// Announces a change the beat did not foresee: one round trip more. A user that may not
    /// publish costs the wake (the controller's next tick sees the change), never the beat.
    async fn announce(&self, name: &BenchName) {
        let mut conn = self.conn.clone();
        let _ = redis::cmd("SPUBLISH")
            .arg(self.keys.wake_channel())
            .arg(name.as_str())
            .query_async::<Value>(&mut conn)
            .await;
    }

    fn remember(&self, name: &BenchName, clock: Clock, known: &Known, register: bool) {
        let mut beating = self.beating.lock().expect("beating lock");
        beating.clock = Some(clock);
        beating.may_not_register |= !register;
        if beating.benches.len() >= REMEMBERED && !beating.benches.contains_key(name) {
            beating.benches.clear();
        }
        beating.benches.insert(name.clone(), known.clone());
    }

    /// The receipt of a beat whose reply arrived.
    fn receipt(&self, beat: &Beat, plan: &Plan, reply: Reply) -> Receipt {
        let (refused, mut problems) = match (&beat.hold, &reply.request) {
            (None, Request::Refused(why)) => (Some(why.clone()), Vec::new()),
            (_, Request::WrongType) => (None, vec![self.holds_problem()]),
            _ => (None, Vec::new()),
        };
        // A registry of another type (a foreign write) costs the registration, never the beat.
        if reply
            .registry
            .as_ref()
            .is_some_and(|e| e.code() == Some("WRONGTYPE"))
        {
            let key = self.keys.registry();
            problems.push(format!(
                "{key} is not the set of registered benches (something else wrote it): this \
                 bench is not registered until it is repaired (`redis-cli DEL '{key}'`, then \
                 `fleet register` or a restart of fleet serve, which registers its slots)"
            ));
        }
        let problem = (!problems.is_empty()).then(|| problems.join("\n"));
        let (off_request, off_problem) = match (reply.off, reply.ack) {
            (Err(e), _) | (_, Err(e)) => (None, Some(self.off_problem(&beat.name, &e))),
            (Ok(off), Ok(ack)) => match pending(off.as_deref(), ack.as_deref()) {
                Ok(request) => (request, None),
                Err(why) => (
                    None,
                    Some(format!(
                        "{} holds no request fleet wrote ({why}); delete it (redis-cli DEL {})",
                        self.keys.off_request(&beat.name),
                        self.keys.off_request(&beat.name)
                    )),
                ),
            },
        };
        Receipt {
            at: DateTime::from_timestamp_millis(plan.at_ms).unwrap_or_default(),
            hold: plan.hold.clone(),
            refused_request: refused,
            problem,
            off_request,
            off_problem,
        }
    }
}

/// What a beat's reply says of it (docs/protocol.md §5.4): whether it changed the bench's state
/// unannounced (the key was deleted or expired behind this process, so the change is announced at
/// once), and whether it must be sent again at once (its stamp off the server's clock, or the hold
/// it carried not the one the reply's request gives).
fn judged(beat: &Beat, plan: &Plan, reply: &Reply) -> (bool, bool) {
    let after = (plan.written.as_ref()).map(|w| (w.hold.as_deref(), w.deadline_ms));
    let unannounced = !plan.announce && changes(reply.before.as_deref(), after, reply.time_ms);
    let due = carried(beat.hold.as_ref(), reply.request.valid(), reply.time_ms);
    let due = due.as_ref().map(|h| h.as_str());
    let wrong = again(plan.at_ms, reply.time_ms, plan.hold.as_deref(), due);
    (unannounced, wrong)
}

/// The commands of one beat (SPEC §2.4): the registry's `SADD` (while the user may), `TIME`, the
/// key as it was, its write and the join key's, the hold request, the power-off request and
/// answer, and the announcement of a change.
fn pipeline(keys: &Keys, name: &BenchName, plan: &Plan) -> redis::Pipeline {
    let key = keys.heartbeat(name);
    let mut pipe = redis::pipe();
    // Each command's error is its own: a refused SADD, a foreign hold-request key or a power-off
    // key the user may not read costs what it costs and no more.
    pipe.ignore_errors();
    if plan.register {
        pipe.sadd(keys.registry(), name.as_str());
    }
    // TIME first: the check of the stamp, run just before the SET.
    pipe.cmd("TIME").get(&key);
    match &plan.written {
        Some(w) => {
            pipe.cmd("SET")
                .arg(&key)
                .arg(&w.value)
                .arg("PXAT")
                .arg(w.deadline_ms);
            pipe.set(keys.joined_key(name), plan.at_ms.to_string());
        }
        None => {
            pipe.del(&key);
            pipe.cmd("SET")
                .arg(keys.joined_key(name))
                .arg("0")
                .arg("NX");
        }
    }
    pipe.hget(keys.hold_requests(), name.as_str())
        .get(keys.off_request(name))
        .get(keys.off_ack(name));
    if plan.announce {
        pipe.cmd("SPUBLISH")
            .arg(keys.wake_channel())
            .arg(name.as_str());
    }
    pipe
}

/// The commands a beat may send, each with the key it names (`None` for `TIME`), over every
/// shape of beat: for `store::acl`'s test that a bench's user may run them all.
#[cfg(test)]
pub(crate) fn commands(keys: &Keys, name: &BenchName) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    for (ttl, announce) in [(30_000, true), (0, true)] {
        let plan = Plan {
            at_ms: 1,
            hold: None,
            written: (ttl > 0).then(|| Written {
                hold: None,
                deadline_ms: 1 + ttl,
                value: Vec::new(),
            }),
            announce,
            register: false,
        };
        for cmd in pipeline(keys, name, &plan).cmd_iter() {
            let args: Vec<String> = cmd
                .args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                })
                .collect();
            let command = args[0].to_ascii_lowercase();
            let key = (command != "time").then(|| args[1].clone());
            found.push((command, key));
        }
    }
    found
}

/// The beat to send: stamped with the server's time as the process knows it, carrying the
/// explicit hold or the standing request, announced when it changes the key as it was.
fn plan(
    beat: &Beat,
    clock: &Clock,
    request: &Request,
    before: Option<&[u8]>,
    register: bool,
) -> Plan {
    let at_ms = clock.now_ms();
    let hold = carried(beat.hold.as_ref(), request.valid(), at_ms).map(|h| h.as_str().to_owned());
    let ttl_ms = u64::try_from(beat.ttl.min(MAX_TTL).as_millis()).unwrap_or(u64::MAX);
    let written = (ttl_ms > 0).then(|| {
        let value = serde_json::to_vec(&Value1 {
            v: 1,
            at: at_ms,
            ttl: ttl_ms,
            hold: hold.as_deref(),
            load: beat.load.filter(|l| l.is_finite()),
            cores: beat.cores,
        })
        .expect("a heartbeat value always encodes");
        Written {
            hold: hold.clone(),
            deadline_ms: at_ms.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
            value,
        }
    });
    let after = written.as_ref().map(|w| (w.hold.as_deref(), w.deadline_ms));
    Plan {
        at_ms,
        announce: changes(before, after, at_ms),
        hold,
        written,
        register,
    }
}

/// A `TIME` reply in ms.
fn time_ms(reply: Option<redis::RedisResult<Value>>) -> Result<i64, redis::RedisError> {
    let (secs, micros): (String, String) = match reply {
        Some(Ok(v)) => redis::from_redis_value(v)?,
        Some(Err(e)) => return Err(e),
        None => return Err(short()),
    };
    crate::store::script::server_time(&secs, &micros)
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "TIME",
                format!("{secs:?} {micros:?}"),
            ))
        })
}

fn reply_bytes(
    reply: Option<redis::RedisResult<Value>>,
) -> Result<Option<Vec<u8>>, redis::RedisError> {
    match reply {
        Some(Ok(v)) => Ok(bytes(v)),
        Some(Err(e)) => Err(e),
        None => Err(short()),
    }
}

fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

fn short() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "the beat's pipeline",
        "a reply is missing".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_800_000_000_000;

    #[test]
    fn the_stamp_is_the_servers_time_moved_on_by_the_monotonic_clock() {
        let clock = Clock {
            server_ms: T,
            at: Instant::now(),
        };
        let now = clock.now_ms();
        assert!((T..T + 1_000).contains(&now), "{now}");
        let beat = Beat {
            name: BenchName::parse("bench-01").unwrap(),
            ttl: Duration::from_secs(30),
            hold: None,
            load: Some(1.5),
            cores: Some(4),
        };
        let plan = plan(&beat, &clock, &Request::None, None, true);
        let w = plan.written.unwrap();
        assert_eq!(w.deadline_ms, plan.at_ms + 30_000);
        let text = String::from_utf8(w.value).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"v":1,"at":{},"ttl":30000,"load":1.5,"cores":4}}"#,
                plan.at_ms
            )
        );
        assert!(plan.announce, "a first beat announces");
    }

    // docs/protocol.md §2: what the beat writes is a value the reader reads back as written.
    #[test]
    fn the_value_a_beat_writes_reads_back_as_written() {
        let clock = Clock {
            server_ms: T,
            at: Instant::now(),
        };
        let beat = Beat {
            name: BenchName::parse("bench-01").unwrap(),
            ttl: Duration::from_secs(60),
            hold: Some(crate::domain::name::Reason::parse("a/\"b\" 😀").unwrap()),
            load: Some(21.0),
            cores: Some(16),
        };
        let plan = plan(&beat, &clock, &Request::None, None, false);
        let read = crate::domain::heartbeat::decode_beat(&plan.written.unwrap().value);
        let crate::domain::state::Reading::Beat(key) = read.reading else {
            panic!("{read:?}");
        };
        assert_eq!(key.written_at.timestamp_millis(), plan.at_ms);
        assert_eq!(key.ttl, Duration::from_secs(60));
        assert_eq!(key.hold.unwrap().as_str(), "a/\"b\" 😀");
        assert_eq!((read.load, read.cores), (Some(21.0), Some(16)));
    }
}
