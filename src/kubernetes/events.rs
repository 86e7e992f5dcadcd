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
use crate::reconcile::{ClaimMove, NodeWarning};

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
    spec::name_of(&spec::Identity {
        group: m.group.clone(),
        slot: m.slot.clone(),
        claim: Some(m.claim.clone()),
        kind,
        attempt: m.attempt,
        started_at,
    })
}

/// What waits to be published.
#[derive(Debug)]
enum Told {
    Move(ClaimMove),
    Warning(NodeWarning),
}

impl Told {
    /// The Event and its object; `None` when it is about no object.
    fn event(&self, namespace: &str) -> Option<(Event, ObjectReference)> {
        match self {
            Told::Move(m) => Some((event(m), regarding(m, namespace)?)),
            Told::Warning(w) => Some((
                Event {
                    type_: EventType::Warning,
                    reason: w.reason.to_owned(),
                    note: Some(w.note.clone()),
                    action: "NodeCheck".to_owned(),
                    secondary: None,
                },
                ObjectReference {
                    api_version: Some("v1".to_owned()),
                    kind: Some("Node".to_owned()),
                    name: Some(w.node.clone()),
                    uid: Some(w.uid.clone()),
                    ..ObjectReference::default()
                },
            )),
        }
    }
}

/// The queue of moves and warnings to publish.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<Told>,
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
        let (queue, told) = mpsc::channel(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "fleet".to_owned(),
                instance: Some(instance),
            },
        );
        tokio::spawn(publish(recorder, namespace, told, stop));
        Events { queue, dropped }
    }

    /// Queues a move; a full queue drops it, counted.
    pub fn tell(&self, m: ClaimMove) {
        self.queue_up(Told::Move(m));
    }

    /// Queues a warning about a Node; a full queue drops it, counted.
    pub fn warn(&self, w: NodeWarning) {
        self.queue_up(Told::Warning(w));
    }

    fn queue_up(&self, told: Told) {
        if self.queue.try_send(told).is_err() {
            self.dropped.inc();
        }
    }
}

async fn publish(
    recorder: Recorder,
    namespace: String,
    mut queue: mpsc::Receiver<Told>,
    stop: CancellationToken,
) {
    loop {
        let told = tokio::select! {
            () = stop.cancelled() => return,
            told = queue.recv() => match told {
                Some(told) => told,
                None => return,
            },
        };
        let Some((event, about)) = told.event(&namespace) else {
            continue;
        };
        let published = tokio::time::timeout(CALL_TIMEOUT, recorder.publish(&event, &about)).await;
        match published {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(reason = event.reason, error = %e, "cannot publish an Event; the log and the claim's timeline have it")
            }
            Err(_) => {
                warn!(
                    reason = event.reason,
                    "the API server did not take an Event in time; the log and the claim's timeline have it"
                )
            }
        }
    }
}
