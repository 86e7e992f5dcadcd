//! fleet's connection to Redis, whatever the URL (SPEC §2.7): one server, the primary a
//! Sentinel URL names, followed across failovers (`sentinel`), or a Redis Cluster
//! (`cluster`).
//!
//! A [`Conn`] is cheap to clone (every clone shares one connection) and implements
//! `redis::aio::ConnectionLike`, so every store takes it. It never runs a command twice: a call
//! that fails returns its error, and the caller's own retry decides (the agent's next beat, the
//! controller's next pass, `fleet state`'s one retry). The one call sent again is a Cluster's
//! that a node refused with `MOVED`, once: the node ran none of it (Redis redirects before it
//! executes), and the driver has read the slot map again (SPEC §2.7, "Cluster").

use std::sync::Arc;

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use crate::connect::{ConnectError, Endpoint, cause};
use crate::current::Current;
use crate::sentinel::Followed;
use crate::url::Target;

pub use crate::sentinel::is_failover;

/// A connection to Redis's primary, of any URL form fleet takes.
#[derive(Clone)]
pub struct Conn {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    /// A verb's one connection to one server.
    Multiplexed(MultiplexedConnection),
    /// A long-running process's connection to one server, made again after it fails.
    Lasting(Arc<Lasting>),
    /// The primary of a Sentinel URL, found again after a failed call.
    Sentinel(Arc<Followed>),
    /// A Redis Cluster: each call goes to the node of its keys' hash slot.
    Cluster(ClusterConnection),
}

/// One server's connection for a long-running process, shared by every clone of a `Conn`. A
/// call whose error leaves the connection unusable (redis-rs's `is_unrecoverable_error`: it
/// dropped, or the server went away) gives it up, and the next call connects again; the failed
/// call's error goes back to its caller, as every call's does (SPEC §2.7). Each connection it
/// makes is set up by `Endpoint::set_up`.
pub struct Lasting {
    pub(crate) endpoint: Endpoint,
    pub(crate) client: redis::Client,
    pub(crate) current: Current,
}

impl Lasting {
    /// The connection, made when there is none.
    pub(crate) async fn connection(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.endpoint.timeout))
            .set_response_timeout(Some(self.endpoint.timeout));
        let connect = || async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // A server that wants a password only says so at the first command.
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            self.endpoint.set_up(&mut conn).await?;
            Ok((conn, ()))
        };
        let (conn, generation, _) = self.current.connection(connect).await?;
        Ok((conn, generation))
    }

    async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (mut conn, generation) = self.connection().await?;
        let reply = conn.req_packed_command(cmd).await;
        self.judge(generation, reply.as_ref().err());
        reply
    }

    async fn commands(
        &self,
        pipeline: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (mut conn, generation) = self.connection().await?;
        let reply = conn.req_packed_commands(pipeline, offset, count).await;
        self.judge(generation, reply.as_ref().err());
        reply
    }

    fn judge(&self, generation: u64, failed: Option<&RedisError>) {
        if failed.is_some_and(RedisError::is_unrecoverable_error) && self.current.forget(generation)
        {
            tracing::debug!("the Redis connection failed; connecting again at the next call");
        }
    }
}

/// Whether the parts of [`query_by_tag`] may run in any order, or must run in the order
/// written (a write whose effect the next part's read must see).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Any,
    AsWritten,
}

impl Endpoint {
    /// A connection for a command-line verb, bounded by the call timeout: one multiplexed
    /// connection to one server (checked with a `PING`), the primary a Sentinel URL names
    /// (checked with `ROLE`), or a Cluster (every node it reached checked with a `PING`).
    pub async fn open(&self) -> Result<Conn, ConnectError> {
        let inner = match self.target()? {
            Target::Single => Inner::Multiplexed(self.connect().await?),
            Target::Sentinel(url) => Inner::Sentinel(Arc::new(Followed::open(self, url).await?)),
            Target::Cluster(url) => Inner::Cluster(self.cluster(&url, None).await?),
        };
        Ok(Conn { inner })
    }

    /// A connection for a long-running process (`fleet serve`, `fleet agent`): after a failed
    /// call it reconnects, to the same server or to the primary the sentinels name then, and
    /// the caller retries on its own schedule. A Cluster connection reconnects each node on its
    /// own and reads the slot map again after a MOVED.
    pub async fn open_lasting(&self) -> Result<Conn, ConnectError> {
        let inner = match self.target()? {
            Target::Single => Inner::Lasting(Arc::new(self.lasting().await?)),
            Target::Sentinel(url) => Inner::Sentinel(Arc::new(Followed::open(self, url).await?)),
            Target::Cluster(url) => Inner::Cluster(self.cluster(&url, None).await?),
        };
        Ok(Conn { inner })
    }
}

impl Endpoint {
    /// The lasting connection of one server, for a long-running process: a call that finds the
    /// connection lost makes it again at the next call, and the caller retries on its own
    /// schedule. One connection attempt here, bounded by the timeout.
    pub async fn lasting(&self) -> Result<Lasting, ConnectError> {
        let lasting = Lasting {
            endpoint: self.clone(),
            client: self.client()?,
            current: Current::new(),
        };
        match tokio::time::timeout(self.timeout * 2, lasting.connection()).await {
            Ok(Ok(_)) => Ok(lasting),
            Ok(Err(source)) => Err(self.unreachable(source)),
            Err(_) => Err(
                self.unreachable(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))),
            ),
        }
    }

    /// What every lasting connection runs once made: with `unevicted`, `CLIENT NO-EVICT ON`, so
    /// Redis's client eviction (`maxmemory-clients`) cuts off the clients that hog its memory and
    /// never this one. A server that refuses it (a user without `+client|no-evict`, as the
    /// previous release's `fleet acl` made, or a Redis before 7.0) leaves the connection as it
    /// was, said once at WARN: fleet works on, evictable.
    pub async fn set_up(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        if !self.unevicted {
            return Ok(());
        }
        match redis::cmd("CLIENT")
            .arg("NO-EVICT")
            .arg("ON")
            .query_async::<()>(conn)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.code(), Some("NOPERM" | "ERR")) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::warn!(
                        error = cause(&e),
                        user = self.user(),
                        "Redis refused CLIENT NO-EVICT: it may evict fleet serve's connections when its clients' memory passes maxmemory-clients; grant the user +client|no-evict (fleet acl does) on Redis 7 or later"
                    );
                });
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl Conn {
    /// For a Sentinel URL, a client for the primary the sentinels name now (a listener's
    /// connection of its own follows the primary through it); `None` for one server's URL.
    pub async fn primary_client(&self) -> Option<redis::RedisResult<redis::Client>> {
        match &self.inner {
            Inner::Sentinel(followed) => Some(followed.primary_client().await),
            Inner::Multiplexed(_) | Inner::Lasting(_) | Inner::Cluster(_) => None,
        }
    }

    /// Whether this is a Redis Cluster's connection: a pipeline stays in one hash slot, and the
    /// replicas of each slot's node are waited for on their own (`store::replicas`).
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }
}

/// Runs `parts` and returns their replies in order, as one pipeline of all their commands would.
/// Each part's keys share one hash tag (a group's, say), and no part ignores a reply.
///
/// The parts go as one pipeline: one round trip. A Cluster's connection refuses a pipeline across
/// hash slots before sending anything (CROSSSLOT, redis-rs's own check): then each part goes as a
/// pipeline of its own, all sent together (`Order::Any`: still one round trip's wait) or one
/// after another (`Order::AsWritten`). So the stores take any connection, and a read across
/// groups costs a single Redis one round trip and a Cluster one per group.
pub async fn query_by_tag<C, T>(conn: &C, parts: &[redis::Pipeline], order: Order) -> RedisResult<T>
where
    C: ConnectionLike + Clone + Send,
    T: FromRedisValue,
{
    let mut all = redis::pipe();
    for cmd in parts.iter().flat_map(redis::Pipeline::cmd_iter) {
        all.add_command(cmd.clone());
    }
    let replies: Vec<Value> = match all.query_async(&mut conn.clone()).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot) => {
            let run = |part: &redis::Pipeline| {
                let mut conn = conn.clone();
                let part = part.clone();
                async move { part.query_async::<Vec<Value>>(&mut conn).await }
            };
            let each = match order {
                Order::Any => futures::future::try_join_all(parts.iter().map(run)).await?,
                Order::AsWritten => {
                    let mut each = Vec::with_capacity(parts.len());
                    for part in parts {
                        each.push(run(part).await?);
                    }
                    each
                }
            };
            each.into_iter().flatten().collect()
        }
        other => other?,
    };
    Ok(redis::from_redis_value(Value::Array(replies))?)
}

/// Whether a node refused a call because another owns its hash slot (`MOVED`). Redis checks
/// where a command's keys live before it runs anything, a script or a transaction's queued
/// commands included, so the call did nothing there; the driver reads the slot map again on
/// it. Sent once more, the call reaches the owner at once: after a slot moved or a replica was
/// promoted, the first call lands, rather than failing and leaving it to the caller's next
/// round (a leader's lease renewal failed so, and its leadership was lost for a whole lease,
/// found by `tests/process/cluster.rs`). `ASK` (a slot still moving) is not followed.
fn is_moved(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::Moved)
}

impl From<ClusterConnection> for Conn {
    fn from(conn: ClusterConnection) -> Self {
        Conn {
            inner: Inner::Cluster(conn),
        }
    }
}

impl From<MultiplexedConnection> for Conn {
    fn from(conn: MultiplexedConnection) -> Self {
        Conn {
            inner: Inner::Multiplexed(conn),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Multiplexed(c) => c.req_packed_command(cmd),
            Inner::Lasting(l) => Box::pin(async move { l.command(cmd).await }),
            Inner::Sentinel(s) => Box::pin(async move { s.command(cmd).await }),
            Inner::Cluster(c) => Box::pin(async move {
                match c.req_packed_command(cmd).await {
                    Err(e) if is_moved(&e) => c.req_packed_command(cmd).await,
                    reply => reply,
                }
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.inner {
            Inner::Multiplexed(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Lasting(l) => Box::pin(async move { l.commands(pipeline, offset, count).await }),
            Inner::Sentinel(s) => {
                Box::pin(async move { s.commands(pipeline, offset, count).await })
            }
            Inner::Cluster(c) => Box::pin(async move {
                match c.req_packed_commands(pipeline, offset, count).await {
                    Err(e) if is_moved(&e) => c.req_packed_commands(pipeline, offset, count).await,
                    reply => reply,
                }
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Multiplexed(c) => c.get_db(),
            Inner::Lasting(l) => l.client.get_connection_info().redis_settings().db(),
            Inner::Sentinel(s) => s.db(),
            Inner::Cluster(c) => c.get_db(),
        }
    }
}
