//! Running fleet's Lua scripts, each after a shared prelude; and reading the server's clock from a
//! `TIME` reply.
//!
//! Only the controller's user runs scripts (SPEC §7): the claim moves, the lease, the hold and
//! forget verbs, the energy steps, the group read. A bench's beat and every view are plain
//! commands, since a user that may run one script may run any, and one script that never ends
//! freezes Redis for everyone.
//!
//! Scripts are sent whole with `EVAL`: every such call is exactly one round trip, with no
//! NOSCRIPT retry after a Redis restart. A pipeline of many calls of one script (a pass's energy
//! steps, one a slot) sends the first whole and the rest by hash ([`pipelined`]); the hashes are
//! computed by `build.rs`, so no binary hashes anything. The prelude (`lua/prelude.lua`) makes a
//! command that meets a key of a foreign type fail naming the key (SPEC §2.7).
//!
//! A script that only reads is sent with `EVAL_RO`, so Redis refuses a write inside it: a read
//! script cannot write by mistake.

use chrono::{DateTime, TimeDelta, Utc};
use redis::aio::ConnectionLike;

/// The server's clock from a `TIME` reply (seconds and microseconds, as text): the one clock
/// fleet judges by. A decision counts it in whole ms, its microseconds dropped (docs/protocol.md
/// §3; `state::decide`).
pub fn server_time(secs: &str, micros: &str) -> Option<DateTime<Utc>> {
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
/// in one hash slot. Every script call is checked in debug builds, so the whole test
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

/// `EVALSHA` of a script over its keys (its arguments are added by the caller), for
/// [`pipelined`].
pub(crate) fn by_hash(script: Script, keys: &[String]) -> redis::Cmd {
    debug_assert!(one_slot(keys), "a script's keys span hash slots: {keys:?}");
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha).arg(keys.len()).arg(keys);
    cmd
}

/// How a pipelined call of a script starts: [`eval`] or [`by_hash`].
pub(crate) type Start = fn(Script, &[String]) -> redis::Cmd;

/// The most bytes of arguments one piece of a [`pipelined`] call carries. A connection's write
/// buffer grows to the largest message sent on it and keeps that size (redis-rs's codec appends
/// each message whole): the first pass over 100 000 slots sent its statuses as one 40 MB message,
/// and the buffer held 41 MB for the rest of the process's life.
pub const PIECE_BYTES: usize = 1 << 20;

/// How many pieces of one call are in flight at once: enough that Redis always has the next to
/// run while a reply comes back, few enough that the pieces built and buffered stay small.
const IN_FLIGHT: usize = 4;

/// `calls` calls of one script, the answers in their order: the first whole (`EVAL`), which
/// leaves the script in the server's cache, the rest by hash behind it, since Redis runs a
/// connection's commands in order. `call(i, start)` builds the `i`-th call from
/// `start(script, keys)`. A call answered NOSCRIPT (the cache flushed between) or refused
/// `EVALSHA` by the user's ACL ran nothing, and those calls go again whole, in a second round
/// trip. Any other error answer is the whole call's error, as a pipeline's first error is.
/// Why: a 100 000-slot pass's energy steps went whole, 2.3 kB of script each; building,
/// encoding and buffering them took 1.4 GB at the peak (SPEC §5.7).
///
/// The calls go in pieces of at most [`PIECE_BYTES`] of arguments (a call larger than that is a
/// piece of its own), built as they are sent, [`IN_FLIGHT`] at once: a call under a megabyte is
/// one pipeline, one round trip, and a larger one never holds more than a few megabytes in
/// commands and buffers (SPEC §1.4).
pub(crate) async fn pipelined<C: ConnectionLike + Clone + Send>(
    conn: &C,
    calls: usize,
    call: impl Fn(usize, Start) -> redis::Cmd,
) -> redis::RedisResult<Vec<redis::Value>> {
    let start_of = |i: usize| if i == 0 { eval } else { by_hash } as Start;
    let mut answers = in_pieces(conn, calls, |i| call(i, start_of(i))).await?;
    let again: Vec<usize> = (answers.iter().enumerate())
        .filter(|(_, a)| a.as_ref().is_err_and(ran_nothing))
        .map(|(i, _)| i)
        .collect();
    if !again.is_empty() {
        let retried = in_pieces(conn, again.len(), |n| call(again[n], eval)).await?;
        for (i, answer) in again.into_iter().zip(retried) {
            if let Some(slot) = answers.get_mut(i) {
                *slot = answer;
            }
        }
    }
    answers.into_iter().collect()
}

/// `calls` commands, `command(i)` the `i`-th, sent in pieces of at most [`PIECE_BYTES`] of
/// arguments, [`IN_FLIGHT`] at once and in order on the connection; every command's own answer,
/// in order.
async fn in_pieces<C: ConnectionLike + Clone + Send>(
    conn: &C,
    calls: usize,
    command: impl Fn(usize) -> redis::Cmd,
) -> redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> {
    use futures::{StreamExt, TryStreamExt};
    let mut next = 0;
    let pieces = std::iter::from_fn(|| {
        if next >= calls {
            return None;
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut bytes = 0;
        while next < calls && (pipe.is_empty() || bytes < PIECE_BYTES) {
            let cmd = command(next);
            bytes += cmd.args_iter().map(|a| arg_len(&a)).sum::<usize>();
            pipe.add_command(cmd);
            next += 1;
        }
        Some(pipe)
    });
    let answers: Vec<Vec<redis::RedisResult<redis::Value>>> = futures::stream::iter(pieces)
        .map(|pipe| {
            let mut conn = conn.clone();
            async move { pipe.query_async(&mut conn).await }
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(answers.into_iter().flatten().collect())
}

fn arg_len(arg: &redis::Arg<&[u8]>) -> usize {
    match arg {
        redis::Arg::Simple(bytes) => bytes.len(),
        // A cursor or anything a newer redis-rs adds: a few bytes.
        _ => 20,
    }
}

/// Whether an error answer to `EVALSHA` says the call ran nothing: NOSCRIPT, or the user's
/// refusal of `EVALSHA` itself.
fn ran_nothing(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) || refuses_evalsha(e)
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
