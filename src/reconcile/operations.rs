//! Operations (SPEC §4.2): each runs in its wrapper process as a task of this controller; its
//! outcome comes back through a channel and the next pass (or `operation_ended`) takes it. What
//! an outcome means for its claim is the planner's (`domain::slot`).

use redis::aio::ConnectionLike;
use tracing::warn;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use std::sync::Arc;

use crate::config::Config;
use crate::domain::claim::OperationKind;
use crate::domain::name::BenchName;
use crate::domain::slot::Done;
use crate::lifecycle::Runner;

use super::{Controller, Map, Nodes};

/// The operations this process runs (one per slot at most), the outcomes that came back and no
/// pass has taken yet, and the tasks that run them.
pub(super) struct Flight {
    pub running: Map<BenchName, OperationKind>,
    pub finished: Map<BenchName, Done>,
    pub done_tx: mpsc::UnboundedSender<(BenchName, Done)>,
    pub done_rx: mpsc::UnboundedReceiver<(BenchName, Done)>,
    pub tasks: TaskTracker,
    /// The configuration the secret variables were read from, and their names (SPEC §4.2):
    /// read again only when the configuration changes, not for every operation.
    secrets: Option<(Arc<Config>, Vec<String>)>,
}

impl Flight {
    pub fn new() -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Flight {
            running: Map::default(),
            finished: Map::default(),
            done_tx,
            done_rx,
            tasks: TaskTracker::new(),
            secrets: None,
        }
    }

    /// The variables `config` reads a secret from, every operation's request carries them.
    pub(super) fn secret_env(&mut self, config: &Arc<Config>) -> Vec<String> {
        match &self.secrets {
            Some((read, names)) if Arc::ptr_eq(read, config) => names.clone(),
            _ => {
                let names = config.secret_env();
                self.secrets = Some((config.clone(), names.clone()));
                names
            }
        }
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Takes the outcomes of the operations that ended since the last pass.
    pub(super) fn take_ended(&mut self) {
        while let Ok((slot, done)) = self.flight.done_rx.try_recv() {
            self.flight.running.remove(&slot);
            self.flight.finished.insert(slot, done);
        }
    }

    /// Stops taking operations and waits up to `grace` for those in flight.
    pub(super) async fn finish(&mut self, grace: Duration) {
        self.flight.tasks.close();
        if tokio::time::timeout(grace, self.flight.tasks.wait())
            .await
            .is_err()
        {
            let running: Vec<String> = self
                .flight
                .running
                .iter()
                .map(|(slot, kind)| format!("{slot} ({})", kind.as_str()))
                .collect();
            warn!(
                ?running,
                "operations still running at shutdown; they are recorded on their claims"
            );
        }
    }

    /// Whether an operation is running for `slot` in this process.
    pub fn running(&self, slot: &BenchName) -> bool {
        self.flight.running.contains_key(slot)
    }

    /// Waits for the next operation to end (for callers that drive passes themselves).
    pub async fn operation_ended(&mut self) -> Option<BenchName> {
        let (slot, done) = self.flight.done_rx.recv().await?;
        self.flight.running.remove(&slot);
        self.flight.finished.insert(slot.clone(), done);
        Some(slot)
    }
}
