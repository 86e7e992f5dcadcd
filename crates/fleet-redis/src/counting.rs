//! A connection that counts its round trips, so a test or a benchmark can hold the store to
//! "every store call is one round trip" by measurement rather than by reading the code.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Wraps a connection; every command or pipeline sent is one round trip.
#[derive(Clone)]
pub struct Counting<C> {
    inner: C,
    trips: Arc<AtomicU64>,
}

impl<C> Counting<C> {
    pub fn new(inner: C) -> Self {
        Self {
            inner,
            trips: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Round trips sent so far, by this handle and every clone of it.
    pub fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Counting<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
