//! Running fleet's Lua scripts, each after a shared prelude; and reading the server's clock from a
//! `TIME` reply.
//!
//! Most scripts are sent whole with `EVAL`: every such call is exactly one round trip, with no
//! NOSCRIPT retry after a Redis restart, and they are called seldom. The few called all the time
//! go by their hash ([`invoke`]): the beat, which every bench sends every few seconds, is 10 kB of
//! script around 100 bytes of arguments, and Redis reading and hashing it whole halved the beats
//! it could take (measured with redis-benchmark on Redis 7.0.15: 16 500 beats/s with `EVAL`,
//! 33 000 with `EVALSHA`). Such a call sends `EVALSHA`, and the whole script only when the server
//! answers NOSCRIPT (it ran nothing): one round trip, two the first time after the server lost its
//! script cache (a restart, a failover, `SCRIPT FLUSH`). The hashes are computed by `build.rs`, so
//! no binary hashes anything. The prelude (`lua/prelude.lua`) makes a command that meets a key of
//! a foreign type fail naming the key (SPEC §2.7).
//!
//! A script that only reads is sent with `EVAL_RO`: Redis asks `EVAL` for write permission on
//! every key the script declares, even a script flagged `no-writes`, so a user that may only
//! read (`fleet acl`'s viewer, SPEC §2.11) can run a read script only that way. Redis refuses a
//! write inside it, so a read script cannot write by mistake either.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, TimeDelta, Utc};
use redis::aio::ConnectionLike;
use redis::{FromRedisValue, ToRedisArgs};

/// The server's clock from a `TIME` reply (seconds and microseconds, as text): the one clock
/// fleet judges by.
pub(crate) fn server_time(secs: &str, micros: &str) -> Option<DateTime<Utc>> {
    let secs: i64 = secs.parse().ok()?;
    let micros: i64 = micros.parse().ok()?;
    DateTime::from_timestamp(secs, 0)?.checked_add_signed(TimeDelta::microseconds(micros))
}

/// A script of `src/store/lua/`, with the prelude before it, and its SHA-1 as Redis names it.
macro_rules! script {
    ($file:literal) => {
        $crate::store::script::Script {
            text: concat!(
                include_str!("lua/prelude.lua"),
                include_str!(concat!("lua/", $file))
            ),
            sha: include_str!(concat!(env!("OUT_DIR"), "/lua/", $file, ".sha1")),
        }
    };
}
pub(crate) use script;

/// One of fleet's scripts: its text and the hex SHA-1 of it (`build.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Script {
    pub(crate) text: &'static str,
    pub(crate) sha: &'static str,
}

/// The hash tag of a key as Redis Cluster takes it: the text between its first `{` and the next
/// `}` when that is not empty, else the whole key. Keys with one tag are in one hash slot.
pub(crate) fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// Whether `keys` share one hash tag, so a script over them runs on one Redis Cluster node and
/// in one hash slot (issue 15). Every script call is checked in debug builds, so the whole test
/// suite holds it.
pub(crate) fn one_slot(keys: &[String]) -> bool {
    keys.windows(2)
        .all(|pair| hash_tag(&pair[0]) == hash_tag(&pair[1]))
}

/// `EVAL` of a script over its keys (its arguments are added by the caller).
pub(crate) fn eval(script: Script, keys: &[String]) -> redis::Cmd {
    whole("EVAL", script, keys)
}

/// `EVAL_RO` of a script that only reads, over its keys: a user that may only read them runs it.
pub(crate) fn eval_ro(script: Script, keys: &[String]) -> redis::Cmd {
    whole("EVAL_RO", script, keys)
}

fn whole(command: &str, script: Script, keys: &[String]) -> redis::Cmd {
    debug_assert!(one_slot(keys), "a script's keys span hash slots: {keys:?}");
    let mut cmd = redis::cmd(command);
    cmd.arg(script.text).arg(keys.len()).arg(keys);
    cmd
}

/// A call of a script by its hash (`EVALSHA`), over its keys, sending the script whole only when
/// the server does not hold it; the caller adds the arguments.
pub(crate) fn invoke(script: Script, keys: &[String]) -> Invocation {
    Invocation::new(script, keys)
}

/// A script call by hash, with the same call whole beside it.
pub(crate) struct Invocation {
    by_hash: redis::Cmd,
    whole: redis::Cmd,
}

impl Invocation {
    fn new(script: Script, keys: &[String]) -> Invocation {
        debug_assert!(one_slot(keys), "a script's keys span hash slots: {keys:?}");
        let mut by_hash = redis::cmd("EVALSHA");
        by_hash.arg(script.sha).arg(keys.len()).arg(keys);
        Invocation {
            by_hash,
            whole: eval(script, keys),
        }
    }

    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Invocation {
        self.by_hash.arg(&arg);
        self.whole.arg(arg);
        self
    }

    /// Runs the call. The whole script follows only an answer that says the hashed call ran
    /// nothing: NOSCRIPT, or the user's refusal of `EVALSHA` itself (not a refusal inside the
    /// script, which may have run in part). `refused` is set at such a refusal (an ACL file
    /// written before fleet granted `EVALSHA`), and while it is set the call goes whole at once,
    /// one round trip again: the caller keeps it for the connection's user.
    pub(crate) async fn query_async<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        refused: &AtomicBool,
    ) -> redis::RedisResult<T> {
        if refused.load(Ordering::Relaxed) {
            return self.whole.query_async(conn).await;
        }
        match self.by_hash.query_async(conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.whole.query_async(conn).await
            }
            Err(e) if refuses_evalsha(&e) => {
                refused.store(true, Ordering::Relaxed);
                self.whole.query_async(conn).await
            }
            other => other,
        }
    }
}

/// Whether an error is an ACL's refusal of the `EVALSHA` command itself, which runs nothing.
fn refuses_evalsha(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    e.code() == Some("NOPERM") && text.contains("'evalsha'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_in_the_slot_of_its_hash_tag() {
        assert_eq!(hash_tag("{fleet}:bench:a"), "fleet");
        assert_eq!(hash_tag("{fleet:rack}:claim:c"), "fleet:rack");
        assert_eq!(hash_tag("x{a}{b}"), "a");
        assert_eq!(hash_tag("{}:x"), "{}:x", "an empty tag is no tag");
        assert_eq!(hash_tag("no-tag"), "no-tag");
        assert_eq!(hash_tag("{open"), "{open");
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert!(one_slot(&keys(&["{fleet:rack}:a", "{fleet:rack}:fence"])));
        assert!(one_slot(&keys(&[])));
        assert!(!one_slot(&keys(&["{fleet:rack}:a", "{fleet}:groups"])));
    }
}
