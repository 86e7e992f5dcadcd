//! fleet's connection to Redis, whatever the URL (SPEC §2.7): one server, or the primary a
//! Sentinel URL names, followed across failovers (`store::sentinel`).
//!
//! A [`Conn`] is cheap to clone (every clone shares one connection) and implements
//! `redis::aio::ConnectionLike`, so every store takes it. It never runs a command twice: a call
//! that fails returns its error, and the caller's own retry decides (the agent's next beat, the
//! controller's next pass, `fleet state`'s one retry).

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, RedisFuture, Value};

use super::connect::{ConnectError, Endpoint};
use super::sentinel::Followed;
use super::url::Target;

pub use super::sentinel::is_failover;

/// A connection to Redis's primary, of any URL form fleet takes.
#[derive(Clone)]
pub struct Conn {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    /// A verb's one connection to one server.
    Multiplexed(MultiplexedConnection),
    /// A long-running process's connection to one server, reconnected in the background.
    Manager(ConnectionManager),
    /// The primary of a Sentinel URL, found again after a failed call.
    Sentinel(Arc<Followed>),
}

impl Endpoint {
    /// A connection for a command-line verb, bounded by the call timeout: one multiplexed
    /// connection to one server (checked with a `PING`), or the primary a Sentinel URL names
    /// (checked with `ROLE`). A Cluster URL is refused as not supported yet (exit 2).
    pub async fn open(&self) -> Result<Conn, ConnectError> {
        let inner = match self.target()? {
            Target::Single => Inner::Multiplexed(self.connect().await?),
            Target::Sentinel(url) => Inner::Sentinel(Arc::new(Followed::open(self, url).await?)),
            Target::Cluster(_) => {
                return Err(ConnectError::ClusterUnsupported {
                    url: self.redacted(),
                });
            }
        };
        Ok(Conn { inner })
    }

    /// A connection for a long-running process (`fleet serve`, `fleet agent`): after a failed
    /// call it reconnects, to the same server or to the primary the sentinels name then, and
    /// the caller retries on its own schedule.
    pub async fn open_lasting(&self) -> Result<Conn, ConnectError> {
        let inner = match self.target()? {
            Target::Single => Inner::Manager(self.manager().await?),
            Target::Sentinel(url) => Inner::Sentinel(Arc::new(Followed::open(self, url).await?)),
            Target::Cluster(_) => {
                return Err(ConnectError::ClusterUnsupported {
                    url: self.redacted(),
                });
            }
        };
        Ok(Conn { inner })
    }
}

impl Conn {
    /// For a Sentinel URL, a client for the primary the sentinels name now (a listener's
    /// connection of its own follows the primary through it); `None` for one server's URL.
    pub async fn primary_client(&self) -> Option<redis::RedisResult<redis::Client>> {
        match &self.inner {
            Inner::Sentinel(followed) => Some(followed.primary_client().await),
            Inner::Multiplexed(_) | Inner::Manager(_) => None,
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

impl From<ConnectionManager> for Conn {
    fn from(conn: ConnectionManager) -> Self {
        Conn {
            inner: Inner::Manager(conn),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Multiplexed(c) => c.req_packed_command(cmd),
            Inner::Manager(c) => c.req_packed_command(cmd),
            Inner::Sentinel(s) => Box::pin(async move { s.command(cmd).await }),
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
            Inner::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Sentinel(s) => {
                Box::pin(async move { s.commands(pipeline, offset, count).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Multiplexed(c) => c.get_db(),
            Inner::Manager(c) => c.get_db(),
            Inner::Sentinel(s) => s.db(),
        }
    }
}
