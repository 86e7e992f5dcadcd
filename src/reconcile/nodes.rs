//! The Nodes port (SPEC §3.1): the Kubernetes Nodes the slots are bound to, read once a pass.
//! The Kubernetes client plugs in here; everything above it is tested through the same trait.

use std::collections::HashMap;

use redis::aio::ConnectionLike;

use crate::config::Slot;
use crate::domain::node::{Binding, NodeView};
use crate::lifecycle::Runner;

use super::Controller;

/// The Kubernetes Nodes of the slots bound to one (SPEC §3.1 usability). The Kubernetes client
/// plugs in here; everything above it is tested through the same trait.
pub trait Nodes: Send + Sync + 'static {
    /// Reads the named Nodes once per pass; a Node that does not exist is absent from the map.
    fn read(
        &self,
        names: &[String],
    ) -> impl std::future::Future<Output = Result<HashMap<String, NodeView>, String>> + Send;

    /// Whether Nodes are observed at all. Without Kubernetes a bound slot is judged by its bench
    /// alone.
    fn observed(&self) -> bool;
}

/// No Kubernetes: usability is the bench's presence alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNodes;

impl Nodes for NoNodes {
    async fn read(&self, _names: &[String]) -> Result<HashMap<String, NodeView>, String> {
        Ok(HashMap::new())
    }

    fn observed(&self) -> bool {
        false
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// How a slot is bound to Kubernetes this pass.
    pub(super) fn binding(&self, slot: &Slot) -> Binding<'_> {
        match (&slot.kubernetes_node, self.nodes.observed()) {
            (Some(name), true) => match &self.node_views {
                Some(views) if !self.seeing.nodes_blind => Binding::Bound(views.get(name)),
                _ => Binding::Unseen,
            },
            (Some(_), false) | (None, _) => Binding::Unbound,
        }
    }
}
