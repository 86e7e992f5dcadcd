//! The one connection a long-running process shares, made again after it fails: the holder
//! behind one server's lasting connection (`conn::Lasting`) and a Sentinel's followed primary
//! (`sentinel::Followed`). Each says how to find a connection and when one is lost; this keeps
//! the connection, its generation and the one search under way.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::RedisError;
use redis::aio::MultiplexedConnection;

/// The current connection and its generation, and the searches that find it.
pub(crate) struct Current {
    /// `None` until found, and after a failure.
    current: Mutex<Option<(MultiplexedConnection, u64)>>,
    /// One search at a time: callers that find no connection wait for the one search, and share
    /// its failure rather than each searching again for a whole timeout.
    searching: tokio::sync::Mutex<Search>,
    /// How many searches have begun (`Search::begun`, readable without waiting).
    begun: AtomicU64,
}

/// The searches' own record.
#[derive(Default)]
struct Search {
    begun: u64,
    /// The generation of the last connection found.
    generation: u64,
    failed: Option<RedisError>,
}

impl Current {
    pub(crate) fn new() -> Current {
        Current {
            current: Mutex::new(None),
            searching: tokio::sync::Mutex::new(Search::default()),
            begun: AtomicU64::new(0),
        }
    }

    fn held(&self) -> Option<(MultiplexedConnection, u64)> {
        self.current
            .lock()
            .expect("never poisoned: no panic inside")
            .clone()
    }

    /// The connection and its generation, found by `search` when there is none; the third part
    /// is what a search that ran here found beside the connection (`None` when none ran).
    pub(crate) async fn connection<F, Fut, T>(
        &self,
        search: F,
    ) -> Result<(MultiplexedConnection, u64, Option<T>), RedisError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(MultiplexedConnection, T), RedisError>>,
    {
        if let Some((conn, generation)) = self.held() {
            return Ok((conn, generation, None));
        }
        let seen = self.begun.load(Ordering::Acquire);
        let mut record = self.searching.lock().await;
        if let Some((conn, generation)) = self.held() {
            return Ok((conn, generation, None));
        }
        // Another caller searched while this one waited, and found nothing: its answer is this
        // one's too.
        if let (true, Some(failed)) = (record.begun != seen, &record.failed) {
            return Err(failed.clone());
        }
        record.begun += 1;
        self.begun.store(record.begun, Ordering::Release);
        let (conn, found) = match search().await {
            Ok(found) => found,
            Err(e) => {
                record.failed = Some(e.clone());
                return Err(e);
            }
        };
        record.failed = None;
        record.generation += 1;
        let generation = record.generation;
        *self
            .current
            .lock()
            .expect("never poisoned: no panic inside") = Some((conn.clone(), generation));
        Ok((conn, generation, Some(found)))
    }

    /// Gives up the connection of `generation`, if it is still the current one; returns
    /// whether it was.
    pub(crate) fn forget(&self, generation: u64) -> bool {
        let mut current = self
            .current
            .lock()
            .expect("never poisoned: no panic inside");
        if current.as_ref().is_some_and(|(_, g)| *g == generation) {
            *current = None;
            return true;
        }
        false
    }
}
