//! Kubernetes Events for claim moves (SPEC §3.12 8): one Event per move the store accepted,
//! about the slot's Node when it is bound to one, else about the operation's Job, else about the
//! claim as a `NodeClaim`, published
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

use crate::domain::claim::{OperationKind, Phase, Reason};
use crate::reconcile::{ClaimMove, NodeWarning};

use super::CALL_TIMEOUT;
use super::jobs::spec;

/// How many moves wait for publication before new ones are dropped.
pub const QUEUE: usize = 256;

/// The Event's reason for a move (SPEC §3.12 8): what happened to the claim, in the words of
/// its timeline (§4.4).
pub fn reason_of(m: &ClaimMove) -> &'static str {
    let cancelled = matches!(
        m.reason,
        Some(Reason::DeletedByHand | Reason::CancelledByDecreaseTargetSize)
    );
    match (m.from, m.to) {
        _ if m.deleted => "ClaimCancelled",
        (None, _) => "ClaimCreated",
        (_, Phase::Failed | Phase::Completed) if m.reason == Some(Reason::Superseded) => {
            "ClaimSuperseded"
        }
        (_, Phase::Failed | Phase::Completed) if cancelled => "ClaimCancelled",
        (_, Phase::Pending) => "ClaimPending",
        (_, Phase::Booting) => "ClaimBooting",
        (_, Phase::Ready) => "ClaimReady",
        (_, Phase::Failed) => "ClaimFailed",
        (_, Phase::Completed) => "ClaimCompleted",
    }
}

/// The Event a move is told as: type, reason, action, and a note with the attempt, the
/// operation or its Job, the deadline and how long the claim and its operation took.
pub fn event(m: &ClaimMove) -> Event {
    let reason = reason_of(m);
    let type_ = if reason == "ClaimFailed" {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let why = m
        .reason
        .map(|r| format!(" ({})", r.as_str()))
        .unwrap_or_default();
    let what = match (m.from, m.deleted) {
        (_, true) => "was cancelled while pending (deleted)".to_owned(),
        (None, false) => format!("was made, {}{why}", m.to),
        (Some(from), false) => format!("moved {from} -> {}{why}", m.to),
    };
    let mut note = format!(
        "claim {} of slot {} (group {}, attempt {}) {what}; {} since requested",
        m.claim,
        m.slot,
        m.group,
        m.attempt,
        span((m.at - m.requested_at).to_std().unwrap_or_default()),
    );
    if let Some((kind, started_at)) = m.operation {
        let run = if m.job {
            format!("Job {}", job_name(m, kind, started_at))
        } else {
            "the operation wrapper".to_owned()
        };
        let took = m
            .operation_took
            .map_or_else(|| "running".to_owned(), |d| format!("took {}", span(d)));
        note.push_str(&format!("; {} ({run}) {took}", kind.as_str()));
    }
    if let Some(deadline) = m.deadline_at {
        note.push_str(&format!(
            "; deadline {}",
            deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    }
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "ClaimMove".to_owned(),
        secondary: None,
    }
}

/// A span for a note: whole seconds, `41s`, `2m10s`.
fn span(d: std::time::Duration) -> String {
    humantime::format_duration(std::time::Duration::from_secs(d.as_secs()))
        .to_string()
        .replace(' ', "")
}

/// What the Event is about: the Node when bound, else the claim's Job when its operation is
/// one, else the claim itself as a `NodeClaim` of `fleet.dev/v1` in fleet's namespace (SPEC
/// §3.12 8): the seed's object, which lives in Redis rather than the API, named so that
/// `kubectl get events --field-selector involvedObject.kind=NodeClaim` finds every claim's.
pub fn regarding(m: &ClaimMove, namespace: &str) -> ObjectReference {
    if let Some((name, uid)) = &m.node {
        return ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(name.clone()),
            uid: Some(uid.clone()),
            ..ObjectReference::default()
        };
    }
    if let Some((kind, started_at)) = m.operation.filter(|_| m.job && !m.deleted) {
        return ObjectReference {
            api_version: Some("batch/v1".to_owned()),
            kind: Some("Job".to_owned()),
            name: Some(job_name(m, kind, started_at)),
            namespace: Some(namespace.to_owned()),
            ..ObjectReference::default()
        };
    }
    ObjectReference {
        api_version: Some("fleet.dev/v1".to_owned()),
        kind: Some("NodeClaim".to_owned()),
        name: Some(m.claim.to_string()),
        namespace: Some(namespace.to_owned()),
        ..ObjectReference::default()
    }
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
            Told::Move(m) => Some((event(m), regarding(m, namespace))),
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
