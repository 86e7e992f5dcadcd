//! Kubernetes Events for claim moves (SPEC §3.12 8): one Event per move the store accepted,
//! about the slot's Node when it is bound to one, else about the operation's Job, published
//! through kube's `Recorder` (a repeat within its cache window becomes a series patch).
//!
//! The pass never waits for the API server: a move is queued (bounded), and one task publishes
//! the queue in order. A full queue drops the move and counts it
//! (`fleet_kubernetes_events_dropped`): the claim's timeline in Redis is the record; an Event is
//! only a view of it.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::domain::claim::{OperationKind, Phase};
use crate::lifecycle::Request;
use crate::reconcile::ClaimMove;

use super::CALL_TIMEOUT;
use super::jobs::spec;

/// How many moves wait for publication before new ones are dropped.
pub const QUEUE: usize = 256;

/// The Event a move is told as: type, reason, action, note.
pub fn event(m: &ClaimMove) -> Event {
    let (reason, type_) = match m.to {
        Phase::Pending => ("ClaimPending", EventType::Normal),
        Phase::Booting => ("ClaimBooting", EventType::Normal),
        Phase::Ready => ("ClaimReady", EventType::Normal),
        Phase::Failed => ("ClaimFailed", EventType::Warning),
        Phase::Completed => ("ClaimCompleted", EventType::Normal),
    };
    let why = m
        .reason
        .map(|r| format!(" ({})", r.as_str()))
        .unwrap_or_default();
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(format!(
            "claim {} of slot {} (group {}, attempt {}) is {}{why}",
            m.claim, m.slot, m.group, m.attempt, m.to
        )),
        action: "ClaimMove".to_owned(),
        secondary: None,
    }
}

/// What the Event is about: the Node when bound, else the claim's Job when its operation is
/// one; `None` when it is about neither (no Event: nothing in the cluster shows the claim).
pub fn regarding(m: &ClaimMove, namespace: &str) -> Option<ObjectReference> {
    if let Some((name, uid)) = &m.node {
        return Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(name.clone()),
            uid: Some(uid.clone()),
            ..ObjectReference::default()
        });
    }
    let (kind, started_at) = m.operation.filter(|_| m.job)?;
    Some(ObjectReference {
        api_version: Some("batch/v1".to_owned()),
        kind: Some("Job".to_owned()),
        name: Some(job_name(m, kind, started_at)),
        namespace: Some(namespace.to_owned()),
        ..ObjectReference::default()
    })
}

/// The name the Job runner gave the claim's operation's Job (the same deterministic name).
fn job_name(m: &ClaimMove, kind: OperationKind, started_at: DateTime<Utc>) -> String {
    spec::name(&Request {
        kind,
        slot: m.slot.clone(),
        group: m.group.clone(),
        claim: Some(m.claim.clone()),
        attempt: m.attempt,
        provider_id: String::new(),
        command: Vec::new(),
        env: Default::default(),
        dir: None,
        timeout: Default::default(),
        controller: String::new(),
        started_at,
        job: None,
        fence: None,
    })
}

/// The queue of moves to publish.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<ClaimMove>,
    dropped: Counter,
}

impl Events {
    /// Starts the publisher; it runs until `stop`. `instance` names this replica (its pod).
    pub fn start(
        client: Client,
        namespace: String,
        instance: String,
        dropped: Counter,
        stop: CancellationToken,
    ) -> Self {
        let (queue, moves) = mpsc::channel(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "fleet".to_owned(),
                instance: Some(instance),
            },
        );
        tokio::spawn(publish(recorder, namespace, moves, stop));
        Events { queue, dropped }
    }

    /// Queues a move; a full queue drops it, counted.
    pub fn tell(&self, m: ClaimMove) {
        if self.queue.try_send(m).is_err() {
            self.dropped.inc();
        }
    }
}

async fn publish(
    recorder: Recorder,
    namespace: String,
    mut moves: mpsc::Receiver<ClaimMove>,
    stop: CancellationToken,
) {
    loop {
        let m = tokio::select! {
            () = stop.cancelled() => return,
            m = moves.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        let Some(about) = regarding(&m, &namespace) else {
            continue;
        };
        let published =
            tokio::time::timeout(CALL_TIMEOUT, recorder.publish(&event(&m), &about)).await;
        match published {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(claim = %m.claim, error = %e, "cannot publish the claim's Event; its timeline in Redis has it")
            }
            Err(_) => {
                warn!(claim = %m.claim, "the API server did not take the claim's Event in time; its timeline in Redis has it")
            }
        }
    }
}
