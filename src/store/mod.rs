//! Redis: connecting, the key schema, and the presence store (SPEC §2.3 to §2.7).
//!
//! Every key is named in [`keys`]; every store method is one round trip, but for the large calls
//! SPEC §1.4 lets go in pieces (the fleet read, a new leader's statuses, a group's energy). How
//! fleet reaches Redis (URLs, TLS, Sentinel, Cluster) is the crate `fleet_redis`, below this.
//!
//! - [`keys`]: every key fleet reads or writes, named once.
//! - [`script`]: running fleet's Lua scripts after their shared prelude; the server's clock.
//! - [`presence`]: beats, the fleet read, hold requests and the registry (SPEC §2.3 to §2.5).
//! - [`claims`]: the claim store (SPEC §4.3): claims, timelines, per group; `claims_read`, a
//!   group's claims as they stood at one moment, and `held`, a large group's copy between reads.
//! - [`slots`]: each slot's published status and last-claim digest; [`operations`] and
//!   [`operation_record`]: each slot's operation record, written and read back.
//! - [`groups`]: which groups may hold claims, and forgetting one; [`catalog`]: the groups and
//!   slots `fleet serve` publishes for the views, and the controller's status.
//! - [`fenced`]: the shell of every fenced store (its writes carry the leader's token);
//!   [`lease`]: the leader lease and the store's generation (SPEC §5.1, §5.2).
//! - [`energy`]: the energy ledgers (SPEC §4.12); [`bmc`]: each slot's last BMC reading.
//! - [`power_off`]: the agent's power-off request and its answer (SPEC §4.10).
//! - [`replicas`]: waiting for replicas before a power action (SPEC §5.6).
//! - [`acl`]: the Redis users fleet runs as, and their rules (SPEC §2.11, §7).

/// The most keys (or records) one command of fleet's names, however large a group (SPEC §5.7):
/// a pipeline sends as many commands as it needs, in the same round trip, so a read or write of
/// 100 000 slots never holds Redis for one long command while beats wait behind it.
pub const KEYS_PER_COMMAND: usize = 250;

pub use script::PIECE_BYTES;

/// Adds to `pipe` the `MGET`s of `keys`, `KEYS_PER_COMMAND` at most each; none for no key.
pub(crate) fn mget_chunked(pipe: &mut redis::Pipeline, keys: &[String]) {
    for chunk in keys.chunks(KEYS_PER_COMMAND) {
        pipe.cmd("MGET").arg(chunk);
    }
}

/// The values of `n` keys read by `mget_chunked`, taken from `replies` in order.
pub(crate) fn mget_joined(
    replies: &mut impl Iterator<Item = redis::Value>,
    n: usize,
) -> Result<Vec<Option<String>>, redis::RedisError> {
    let mut values = Vec::with_capacity(n);
    for _ in 0..n.div_ceil(KEYS_PER_COMMAND) {
        let reply = replies.next().ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Parse,
                "a reply is missing from the pipeline",
            ))
        })?;
        let chunk: Vec<Option<String>> = redis::from_redis_value(reply)?;
        values.extend(chunk);
    }
    if values.len() != n {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "an MGET answered another number of values than it asked for",
        )));
    }
    Ok(values)
}

/// The values of `keys`, in order, in one round trip of `MGET`s of `KEYS_PER_COMMAND` keys.
pub(crate) async fn mget(
    conn: &mut impl redis::aio::ConnectionLike,
    keys: &[String],
) -> Result<Vec<Option<String>>, redis::RedisError> {
    let mut pipe = redis::pipe();
    mget_chunked(&mut pipe, keys);
    let replies: Vec<redis::Value> = pipe.query_async(conn).await?;
    mget_joined(&mut replies.into_iter(), keys.len())
}

pub mod acl;
pub mod bmc;
pub mod catalog;
pub mod claims;
mod claims_read;
pub mod energy;
pub mod fenced;
pub mod groups;
mod held;
pub mod keys;
pub mod lease;
pub mod operation_record;
pub mod operations;
pub mod power_off;
pub mod presence;
pub mod replicas;
pub mod script;
pub mod slots;
