//! Waiting for replicas before a power action (SPEC §5.6).
//!
//! Redis replicates asynchronously: a write a primary acknowledged can be lost when it dies and a
//! replica is promoted, and with it the record of an operation, the lease or a fence. So before
//! the controller fires an operation it proves that its writes reached the replicas: it
//! increments the replication counter and sends `WAIT n timeout` in the same pipeline, on a
//! connection of its own (WAIT blocks every command behind it on its connection). The primary
//! replicates in the order it executes, so a replica that acknowledged the counter has every
//! write the primary executed before it: the operation's record, the lease, the fences, whatever
//! connection wrote them. `WAIT` is refused inside scripts, which is why it follows one rather
//! than being in it.
//!
//! How many acknowledgements: `--min-replica-acks N`, or by default one when the primary has a
//! replica connected (`ROLE`; a count above zero kept a minute, none asked again each time),
//! none when it has none (a single Redis has nothing to wait for). Right after a failover the
//! new primary has no replica until one joins: meanwhile the default waits for nothing, and
//! `--min-replica-acks 1` waits (and holds every power action) until one has.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tokio::sync::Mutex;

use super::keys::Keys;
use crate::domain::name::GroupName;

/// How many replicas must acknowledge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// One when the primary has a replica connected, none otherwise.
    Auto,
    /// Exactly this many (0: never wait).
    Exactly(u32),
}

/// What a confirmation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// Nothing to wait for: no replica is wanted.
    NotWanted,
    /// `acked` replicas acknowledged, at least the `wanted` ones.
    Confirmed { acked: u32, wanted: u32 },
    /// Fewer than wanted acknowledged within the timeout: do not act on the writes.
    Short { acked: u32, wanted: u32 },
}

#[derive(Debug, thiserror::Error)]
pub enum ReplicasError {
    #[error("asking the primary for its replicas (ROLE)")]
    Role(#[source] redis::RedisError),
    #[error("waiting for the replicas to acknowledge (WAIT)")]
    Wait(#[source] redis::RedisError),
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
}

/// How often the replica count of `Wanted::Auto` is read again.
const ROLE_EVERY: Duration = Duration::from_secs(60);

/// The replication gate, over a connection of its own.
#[derive(Clone)]
pub struct Replicas<C> {
    conn: C,
    keys: Keys,
    wanted: Wanted,
    /// The bound of one WAIT: below the call timeout, so the call never times out first.
    wait: Duration,
    /// The bound of one call, the driver's own timeout aside: a gate that never answers must not
    /// hold the pass (and every slot after it) with it.
    call: Duration,
    /// `Wanted::Auto`'s replica count, and when it was read.
    known: Arc<Mutex<Option<(u32, Instant)>>>,
    /// The last shortfall, its acknowledgements and when: within one WAIT's bound of it the
    /// answer is the same without asking, so a pass with several held-back actions blocks for
    /// one WAIT, not one each (the leader must still renew its lease in time).
    short: Arc<Mutex<Option<(u32, Instant)>>>,
    /// On a Redis Cluster: a group's writes are on its own slot's node, so its counter is
    /// waited for too.
    per_slot: bool,
}

impl<C: ConnectionLike + Clone + Send> Replicas<C> {
    /// `conn` must be a connection no other part of fleet uses: WAIT blocks it. `call_timeout`
    /// is the bound of one call on it (`--timeout`, or less: `fleet serve` gives the lesser of it
    /// and half its lease, so a leader waiting for replicas still renews its lease in time);
    /// each WAIT waits at most three quarters of it.
    pub fn new(conn: C, keys: Keys, wanted: Wanted, call_timeout: Duration) -> Self {
        Replicas {
            conn,
            keys,
            wanted,
            wait: (call_timeout * 3 / 4).max(Duration::from_millis(1)),
            call: call_timeout.max(Duration::from_millis(1)),
            known: Arc::new(Mutex::new(None)),
            short: Arc::new(Mutex::new(None)),
            per_slot: false,
        }
    }

    /// For a Redis Cluster's connection: `WAIT` covers only the node it runs on, and a group's
    /// records and fences are on its own slot's node, the lease and the written mark on the
    /// prefix's. So each is proven on its node, one after the other, each WAIT given half the
    /// bound. The replica count of `Wanted::Auto` is the prefix's node's.
    pub fn per_slot(mut self, per_slot: bool) -> Self {
        self.per_slot = per_slot;
        self
    }

    /// Proves that every write the primary executed so far, `group`'s included, reached the
    /// wanted replicas. One round trip (two when the replica count is read again; one more on a
    /// Cluster, for the group's node).
    pub async fn confirm(&self, group: &GroupName) -> Result<Acks, ReplicasError> {
        let wanted = match self.wanted {
            Wanted::Exactly(n) => n,
            Wanted::Auto => self.connected().await?.min(1),
        };
        if wanted == 0 {
            return Ok(Acks::NotWanted);
        }
        if let Some((acked, at)) = *self.short.lock().await
            && at.elapsed() < self.wait
        {
            return Ok(Acks::Short { acked, wanted });
        }
        let mut counters = vec![self.keys.replicated()];
        if self.per_slot {
            counters.push(self.keys.group(group).replicated());
        }
        let wait = self.wait / u32::try_from(counters.len()).unwrap_or(1);
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut acked = u32::MAX;
        for counter in counters {
            let mut conn = self.conn.clone();
            let mut pipe = redis::pipe();
            pipe.cmd("INCR")
                .arg(counter)
                .cmd("WAIT")
                .arg(wanted)
                .arg(ms);
            let waiting = pipe.query_async::<(i64, i64)>(&mut conn);
            let (_, on_node) = bounded(self.call, waiting)
                .await
                .map_err(ReplicasError::Wait)?;
            acked = acked.min(u32::try_from(on_node.max(0)).unwrap_or(u32::MAX));
            if acked < wanted {
                break;
            }
        }
        if acked >= wanted {
            *self.short.lock().await = None;
            Ok(Acks::Confirmed { acked, wanted })
        } else {
            // The count may have changed (a replica gone): read it again next time.
            *self.known.lock().await = None;
            *self.short.lock().await = Some((acked, Instant::now()));
            Ok(Acks::Short { acked, wanted })
        }
    }

    /// The replicas connected to the primary, as `ROLE` says. A count above zero is kept for a
    /// minute (a shortfall drops it); none is asked again every time, since a replica may join
    /// at any moment (a failed primary back as the new one's replica): a cached zero would let
    /// the controller act unconfirmed for a minute after it joined (found by the lossy failover
    /// chaos test, seed 15).
    async fn connected(&self) -> Result<u32, ReplicasError> {
        let mut known = self.known.lock().await;
        if let Some((n, at)) = *known
            && n > 0
            && at.elapsed() < ROLE_EVERY
        {
            return Ok(n);
        }
        // The `EXISTS` of the counter routes the pipeline on a Cluster: the role asked is that of
        // the node holding the prefix's keys, not a random node's.
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("EXISTS").arg(self.keys.replicated()).cmd("ROLE");
        let asking = pipe.query_async::<(i64, redis::Value)>(&mut conn);
        let (_, role) = bounded(self.call, asking)
            .await
            .map_err(ReplicasError::Role)?;
        let n = replicas_of(&role)?;
        *known = Some((n, Instant::now()));
        Ok(n)
    }
}

/// `call`'s answer, or a timeout error once `bound` passed without one.
async fn bounded<T>(
    bound: Duration,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match tokio::time::timeout(bound, call).await {
        Ok(answer) => answer,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {bound:?}"),
        ))),
    }
}

/// The number of replicas in a `ROLE` reply: `["master", offset, [[ip, port, offset], …]]`.
fn replicas_of(role: &redis::Value) -> Result<u32, ReplicasError> {
    use redis::Value;
    let Value::Array(parts) = role else {
        return Err(ReplicasError::Reply(format!("ROLE answered {role:?}")));
    };
    let kind = match parts.first() {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        other => return Err(ReplicasError::Reply(format!("ROLE began with {other:?}"))),
    };
    if kind != "master" {
        return Err(ReplicasError::Reply(format!(
            "the server is a {kind}, not the primary: a failover is under way"
        )));
    }
    match parts.get(2) {
        Some(Value::Array(replicas)) => Ok(u32::try_from(replicas.len()).unwrap_or(u32::MAX)),
        other => Err(ReplicasError::Reply(format!(
            "ROLE listed no replicas: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn role_replies_are_read_and_garbage_is_an_error() {
        let replica = Value::Array(vec![bulk("127.0.0.1"), bulk("6380"), bulk("42")]);
        let master = |replicas: Vec<Value>| {
            Value::Array(vec![bulk("master"), Value::Int(42), Value::Array(replicas)])
        };
        assert_eq!(replicas_of(&master(vec![])).unwrap(), 0);
        assert_eq!(
            replicas_of(&master(vec![replica.clone(), replica])).unwrap(),
            2
        );
        let slave = Value::Array(vec![bulk("slave"), bulk("127.0.0.1"), Value::Int(6379)]);
        assert!(
            replicas_of(&slave)
                .unwrap_err()
                .to_string()
                .contains("a slave, not the primary")
        );
        assert!(replicas_of(&Value::Nil).is_err());
        assert!(replicas_of(&Value::Array(vec![bulk("master")])).is_err());
    }
}
