//! Who wants the live page's reads (SPEC §4.13 item 2), so that its feed reads the store only
//! while a page is open.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Published;

/// How long after the last page load the feed keeps reading with no stream open: a page without
/// script, or one navigated from view to view, finds its next view read.
pub(super) const LINGER: Duration = Duration::from_secs(30);

/// How long a page loaded while the feed was idle waits for its fresh read before it is served
/// what the feed last read.
const FRESH_WAIT: Duration = Duration::from_secs(5);

/// Who wants the page's reads (SPEC §4.13): the open streams, and a page loaded within `LINGER`.
/// The feed reads the store only while someone does: at 100 000 slots a read is a third of a
/// second of a core and some 100 MB for a moment, and `fleet serve` made two a second for nobody
/// when no page was open.
#[derive(Clone, Default)]
pub struct Demand(Arc<DemandState>);

#[derive(Default)]
struct DemandState {
    streams: std::sync::atomic::AtomicUsize,
    loaded: Mutex<Option<tokio::time::Instant>>,
    wake: tokio::sync::Notify,
}

/// An open stream's share of the demand, given back when the stream ends.
pub(super) struct Watching(Demand);

impl Drop for Watching {
    fn drop(&mut self) {
        (self.0)
            .0
            .streams
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Demand {
    /// Whether anyone wants reads now.
    pub(super) fn wanted(&self) -> bool {
        let loaded = *self.0.loaded.lock().unwrap_or_else(|e| e.into_inner());
        self.0.streams.load(std::sync::atomic::Ordering::Relaxed) > 0
            || loaded.is_some_and(|at| at.elapsed() < LINGER)
    }

    /// A page loaded: the feed reads, from now on for `LINGER`. Whether it was idle, so that
    /// what it last published is older than a read.
    pub(super) fn load(&self) -> bool {
        let idle = !self.wanted();
        *self.0.loaded.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(tokio::time::Instant::now());
        self.0.wake.notify_one();
        idle
    }

    /// A stream opened: the feed reads while it is open. Whether the feed was idle.
    pub(super) fn watch(&self) -> (Watching, bool) {
        let idle = !self.wanted();
        self.0
            .streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.wake.notify_one();
        (Watching(self.clone()), idle)
    }

    /// Until someone wants reads, or `stop`.
    pub(super) async fn wanted_or(&self, stop: &CancellationToken) {
        while !self.wanted() {
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.0.wake.notified() => {}
                // A load's `LINGER` runs out on its own: look again at its end.
                () = tokio::time::sleep(LINGER) => {}
            }
        }
    }
}

/// `frames`' next value, after a page or stream found the feed idle: the read it woke, or what
/// the feed holds once `FRESH_WAIT` has passed.
pub(super) async fn fresh(frames: &mut watch::Receiver<Arc<Published>>) {
    let _ = tokio::time::timeout(FRESH_WAIT, frames.changed()).await;
}
