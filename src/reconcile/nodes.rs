//! The Nodes port (SPEC §3.1, §3.12): the Kubernetes Nodes the slots are bound to, read once a
//! pass, and fleet's writes to them. The Kubernetes client plugs in here; everything above it is
//! tested through the same trait.

use std::collections::HashMap;
use std::future::Future;

use redis::aio::ConnectionLike;

use chrono::{DateTime, Utc};

use crate::config::Slot;
use crate::domain::claim::{OperationKind, Phase, Reason};
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::domain::node::{Binding, NodeView};
use crate::domain::slot::NodeWrite;
use crate::lifecycle::Runner;

use super::Controller;

/// Why a Node write did not land.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeWriteError {
    /// The Node changed since the pass read it, or is gone: the next pass judges it again.
    #[error("the Node changed since it was read: {0}")]
    Conflict(String),
    #[error("{0}")]
    Failed(String),
}

/// The Kubernetes Nodes (SPEC §3.1 usability, §3.12 writes).
pub trait Nodes: Send + Sync + 'static {
    /// Every Node, as last seen; an error while they cannot be seen (the watch is broken and
    /// has not listed them again since).
    fn read(&self) -> impl Future<Output = Result<Vec<NodeView>, String>> + Send;

    /// Whether Nodes are observed at all. Without Kubernetes a slot is judged by its bench
    /// alone.
    fn observed(&self) -> bool;

    /// One write to one Node, carrying the uid and resourceVersion it was judged at.
    fn write(&self, write: &NodeWrite) -> impl Future<Output = Result<(), NodeWriteError>> + Send;

    /// A claim move the store accepted, to be told as a Kubernetes Event. Never waits: the
    /// Event is queued off the pass, and dropped (and counted) when the queue is full.
    fn moved(&self, _move: ClaimMove) {}

    /// Something about a Node fleet leaves alone and wants seen (a provider ID that is not the
    /// slot's), told as a Warning Event about the Node; queued like `moved`.
    fn warned(&self, _warning: NodeWarning) {}
}

/// A warning about a Node (SPEC §3.12 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeWarning {
    pub node: String,
    pub uid: String,
    /// PascalCase, like `ProviderIDMismatch`.
    pub reason: &'static str,
    pub note: String,
}

/// A claim move the store accepted (SPEC §3.12 8): what an Event about it says.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimMove {
    pub group: GroupName,
    pub slot: BenchName,
    pub claim: ClaimName,
    pub attempt: u32,
    pub to: Phase,
    pub reason: Option<Reason>,
    /// The claim's operation, when it has one: the Job an Event is about when no Node is.
    pub operation: Option<(OperationKind, DateTime<Utc>)>,
    /// The slot's Node (name, uid), when it is bound to one that exists.
    pub node: Option<(String, String)>,
    /// The claim's operation runs as a Kubernetes Job.
    pub job: bool,
    /// The phase it moved from; `None` for a claim made since the controller's last pass (made
    /// by `fleet claim`, the provider, or adopted).
    pub from: Option<Phase>,
    /// A pending claim deleted (cancelled): `to` is the phase it had.
    pub deleted: bool,
    /// When the move was seen to land: the pass's server time.
    pub at: DateTime<Utc>,
    pub requested_at: DateTime<Utc>,
    /// The end of the claim's boot window, while it has one.
    pub deadline_at: Option<DateTime<Utc>>,
    /// How long the claim's operation ran, once it ended.
    pub operation_took: Option<std::time::Duration>,
}

/// No Kubernetes: usability is the bench's presence alone, and no slot is bound.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNodes;

impl Nodes for NoNodes {
    async fn read(&self) -> Result<Vec<NodeView>, String> {
        Ok(Vec::new())
    }

    fn observed(&self) -> bool {
        false
    }

    async fn write(&self, write: &NodeWrite) -> Result<(), NodeWriteError> {
        Err(NodeWriteError::Failed(format!(
            "no Kubernetes client: cannot write Node {}",
            write.node
        )))
    }
}

/// The Nodes of one pass, by name and by provider ID.
#[derive(Debug, Default)]
pub(super) struct NodeViews {
    by_name: HashMap<String, NodeView>,
    by_provider_id: HashMap<String, String>,
}

impl NodeViews {
    pub(super) fn new(nodes: Vec<NodeView>) -> Self {
        let mut views = NodeViews::default();
        for n in nodes {
            if let Some(id) = &n.provider_id {
                views.by_provider_id.insert(id.clone(), n.name.clone());
            }
            views.by_name.insert(n.name.clone(), n);
        }
        views
    }

    /// The slot's Node: the one named `kubernetes_node`, else the one whose `spec.providerID`
    /// is the slot's provider ID.
    fn of(&self, slot: &Slot) -> Option<&NodeView> {
        match &slot.kubernetes_node {
            Some(name) => self.by_name.get(name),
            None => self
                .by_provider_id
                .get(&slot.provider_id)
                .and_then(|name| self.by_name.get(name)),
        }
    }
}

/// How the slots are bound to Kubernetes this pass: with Kubernetes on, every slot's machine is
/// meant to join as a Node.
#[derive(Clone, Copy)]
pub(super) enum Bindings<'v> {
    /// Kubernetes is off: no slot is bound.
    Unbound,
    /// The Nodes could not be read, or cannot be trusted (SPEC §5.2).
    Unseen,
    /// The Nodes as read this pass.
    Seen(&'v NodeViews),
}

impl<'v> Bindings<'v> {
    /// The bindings the Nodes port and this pass's read of the Nodes give.
    pub(super) fn new(nodes: &impl Nodes, views: Option<&'v NodeViews>, nodes_blind: bool) -> Self {
        if !nodes.observed() {
            return Bindings::Unbound;
        }
        match views {
            Some(views) if !nodes_blind => Bindings::Seen(views),
            _ => Bindings::Unseen,
        }
    }

    pub(super) fn of(self, slot: &Slot) -> Binding<'v> {
        match self {
            Bindings::Unbound => Binding::Unbound,
            Bindings::Unseen => Binding::Unseen,
            Bindings::Seen(views) => Binding::Bound(views.of(slot)),
        }
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// How the slots are bound this pass.
    pub(super) fn bindings(&self) -> Bindings<'_> {
        Bindings::new(
            &self.nodes,
            self.node_views.as_ref(),
            self.seeing.nodes_blind,
        )
    }
}
