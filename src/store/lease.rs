//! The leader lease and the store's generation marker (SPEC §5.1, §5.2).
//!
//! One `fleet serve` acts: the holder of a lease key with a TTL it renews well inside. Each new
//! leadership takes a fencing token from the epoch; the leader raises every group's fence to it,
//! and the claim scripts refuse a controller write whose token is not the fence's, so a paused or
//! partitioned former leader can never overwrite its successor.

use std::time::Duration;

use redis::aio::ConnectionLike;
use tokio::sync::watch;

use super::keys::Keys;
use super::script::{Script, eval, script};

const ACQUIRE: Script = script!("lease_acquire.lua");
const RELEASE: Script = script!("lease_release.lua");
const GENERATION: Script = script!("generation.lua");
const WRITTEN: Script = script!("written_mark.lua");

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("taking or renewing the leader lease")]
    Acquire(#[source] redis::RedisError),
    #[error("releasing the leader lease")]
    Release(#[source] redis::RedisError),
    #[error("reading the store's generation marker")]
    Generation(#[source] redis::RedisError),
    #[error("setting the leader's written mark")]
    Written(#[source] redis::RedisError),
}

/// Who leads, as one call saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This process leads, with this fencing token.
    Leader(String),
    /// Another process leads (`<holder> <token>`).
    Follower(String),
}

/// The leadership this process acts under, as one signal (SPEC §5.1): the controller announces
/// its fencing token when it becomes the leader and `None` when it stops, and the provider and its
/// gRPC server follow the receivers. Nothing else carries it, so the provider never changes a group
/// under a leadership the controller has given up.
#[derive(Debug)]
pub struct Signal(watch::Sender<Option<String>>);

impl Signal {
    /// A signal that says "not leading", and the first of its receivers.
    pub fn new() -> (Self, watch::Receiver<Option<String>>) {
        let (tx, rx) = watch::channel(None);
        (Signal(tx), rx)
    }

    /// Announces the leadership: the fencing token while leading, `None` otherwise.
    pub fn announce(&self, token: Option<&str>) {
        self.0.send_if_modified(|held| {
            let changed = held.as_deref() != token;
            if changed {
                *held = token.map(ToOwned::to_owned);
            }
            changed
        });
    }

    /// Another receiver, for one more follower.
    pub fn follow(&self) -> watch::Receiver<Option<String>> {
        self.0.subscribe()
    }
}

/// The lease of one would-be leader.
#[derive(Clone)]
pub struct Lease<C> {
    conn: C,
    keys: Keys,
    id: String,
    ttl: Duration,
}

/// What the generation script found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    /// The store's generation marker (the fresh one when it had none).
    pub marker: String,
    /// The wipe record, `(blind until ms, adopt until ms)`, while it lasts.
    pub wiped: Option<(i64, i64)>,
    /// Whether the catalog is published.
    pub catalog: bool,
    /// The store lost writes this leader made (its written mark is not the one it set): the
    /// wipe record now stands for it too (SPEC §5.3).
    pub rolled_back: bool,
}

impl<C: ConnectionLike + Clone + Send> Lease<C> {
    /// `id` names this process in the lease (host and pid); `ttl` is the lease's length.
    pub fn new(conn: C, keys: Keys, id: String, ttl: Duration) -> Self {
        Self {
            conn,
            keys,
            id,
            ttl,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Takes the lease if it is free, renews it if `held` is this process's token.
    pub async fn acquire(&self, held: Option<&str>) -> Result<Leadership, LeaseError> {
        let mut conn = self.conn.clone();
        let (won, value): (i64, String) =
            eval(ACQUIRE, &[self.keys.leader(), self.keys.leader_epoch()])
                .arg(&self.id)
                .arg(
                    u64::try_from(self.ttl.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1),
                )
                .arg(held.unwrap_or(""))
                .query_async(&mut conn)
                .await
                .map_err(LeaseError::Acquire)?;
        Ok(if won == 1 {
            Leadership::Leader(value)
        } else {
            Leadership::Follower(value)
        })
    }

    /// Gives the lease up (a clean stop), so a follower takes over at once.
    pub async fn release(&self, token: &str) -> Result<bool, LeaseError> {
        let mut conn = self.conn.clone();
        let released: i64 = eval(RELEASE, &[self.keys.leader()])
            .arg(format!("{} {token}", self.id))
            .query_async(&mut conn)
            .await
            .map_err(LeaseError::Release)?;
        Ok(released == 1)
    }

    /// The store's generation marker, set to `fresh` (with a wipe record: blind for `grace`,
    /// then adopting for `adopt`) if it is missing; the same record when the written mark is not
    /// `written`, the one this leader set after its last pass (the store lost that pass's
    /// writes). Returns the marker and the wipe record as server times in ms, if one stands.
    pub async fn generation(
        &self,
        fresh: &str,
        grace: Duration,
        adopt: Duration,
        written: Option<&str>,
    ) -> Result<Generation, LeaseError> {
        let mut conn = self.conn.clone();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (marker, wiped, catalog, rolled): (String, String, i64, i64) = eval(
            GENERATION,
            &[
                self.keys.generation(),
                self.keys.wiped(),
                self.keys.config(),
                self.keys.written(),
            ],
        )
        .arg(fresh)
        .arg(ms(grace))
        .arg(ms(adopt))
        .arg(written.unwrap_or(""))
        .query_async(&mut conn)
        .await
        .map_err(LeaseError::Generation)?;
        let wiped = wiped
            .split_once(' ')
            .and_then(|(b, a)| Some((b.parse().ok()?, a.parse().ok()?)));
        Ok(Generation {
            marker,
            wiped,
            catalog: catalog == 1,
            rolled_back: rolled == 1,
        })
    }

    /// Sets the written mark `mark` after a pass's writes, if this process still holds the lease
    /// with `token`. Returns whether it was set. One round trip.
    pub async fn mark_written(&self, token: &str, mark: &str) -> Result<bool, LeaseError> {
        let mut conn = self.conn.clone();
        let set: i64 = eval(WRITTEN, &[self.keys.leader(), self.keys.written()])
            .arg(format!("{} {token}", self.id))
            .arg(mark)
            .query_async(&mut conn)
            .await
            .map_err(LeaseError::Written)?;
        Ok(set == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::Signal;

    #[test]
    fn the_signal_wakes_followers_only_when_the_leadership_changes() {
        let (signal, mut rx) = Signal::new();
        let mut other = signal.follow();
        assert_eq!(*rx.borrow_and_update(), None);
        signal.announce(Some("7"));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().as_deref(), Some("7"));
        assert_eq!(other.borrow_and_update().as_deref(), Some("7"));
        // A renewal announces the same token: nobody is woken.
        signal.announce(Some("7"));
        assert!(!rx.has_changed().unwrap());
        signal.announce(None);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), None);
        signal.announce(Some("8"));
        assert_eq!(other.borrow_and_update().as_deref(), Some("8"));
    }
}
