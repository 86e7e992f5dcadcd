//! Running fleet's Lua scripts: each one is sent whole with `EVAL`, after a shared prelude; and
//! reading the server's clock from a `TIME` reply.
//!
//! EVAL rather than EVALSHA: every call is then exactly one round trip, with no NOSCRIPT retry
//! after a Redis restart; the server still caches the compiled script by its hash, and the
//! scripts are small next to what they carry. The prelude (`lua/prelude.lua`) makes a command
//! that meets a key of a foreign type fail naming the key (SPEC §2.7).
//!
//! A script that only reads is sent with `EVAL_RO`: Redis asks `EVAL` for write permission on
//! every key the script declares, even a script flagged `no-writes`, so a user that may only
//! read (`fleet acl`'s viewer, SPEC §2.11) can run a read script only that way. Redis refuses a
//! write inside it, so a read script cannot write by mistake either.

use chrono::{DateTime, TimeDelta, Utc};

/// The server's clock from a `TIME` reply (seconds and microseconds, as text): the one clock
/// fleet judges by.
pub(crate) fn server_time(secs: &str, micros: &str) -> Option<DateTime<Utc>> {
    let secs: i64 = secs.parse().ok()?;
    let micros: i64 = micros.parse().ok()?;
    DateTime::from_timestamp(secs, 0)?.checked_add_signed(TimeDelta::microseconds(micros))
}

/// A script of `src/store/lua/`, with the prelude before it.
macro_rules! script {
    ($file:literal) => {
        concat!(
            include_str!("lua/prelude.lua"),
            include_str!(concat!("lua/", $file))
        )
    };
}
pub(crate) use script;

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
pub(crate) fn eval(source: &str, keys: &[String]) -> redis::Cmd {
    debug_assert!(one_slot(keys), "a script's keys span hash slots: {keys:?}");
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(source).arg(keys.len()).arg(keys);
    cmd
}

/// `EVAL_RO` of a script that only reads, over its keys: a user that may only read them runs it.
pub(crate) fn eval_ro(source: &str, keys: &[String]) -> redis::Cmd {
    debug_assert!(one_slot(keys), "a script's keys span hash slots: {keys:?}");
    let mut cmd = redis::cmd("EVAL_RO");
    cmd.arg(source).arg(keys.len()).arg(keys);
    cmd
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
