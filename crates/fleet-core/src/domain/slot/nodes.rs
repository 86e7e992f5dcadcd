//! The planner's Kubernetes Node steps (SPEC §3.12): fleet's cordon taint around a shutdown, the
//! readiness gate's release, the provider ID, and the deletion of a Node a powered-off machine
//! left behind. At most one Node write per slot per pass: each carries the resourceVersion the
//! pass read, so a second one would be refused by the first one's own change.

use super::{Binding, NodeAction, NodeView, NodeWrite, Planner, Power, Step, TaintEdit, add, node};

impl<'a> Planner<'a> {
    /// The slot's Node, when it is bound to one that exists and is seen.
    pub(super) fn node(&self) -> Option<&'a NodeView> {
        match self.v.binding {
            Binding::Bound(Some(n)) => Some(n),
            _ => None,
        }
    }

    fn node_written(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Node(_)))
    }

    /// Queues a write to the slot's Node; false when there is no Node or one is queued already.
    fn node_write(&mut self, action: NodeAction, must_land: bool) -> bool {
        let Some(n) = self.node() else { return false };
        if self.node_written() || !self.v.acting {
            return false;
        }
        self.steps.push(Step::Node(Box::new(NodeWrite {
            node: n.name.clone(),
            uid: n.uid.clone(),
            resource_version: n.resource_version.clone(),
            action,
            must_land,
        })));
        true
    }

    /// The gate's end: fleet's cordon and cluster-autoscaler's leftovers off, the group's taints
    /// on, before the claim moves to ready. False when the release cannot be queued this pass
    /// (another Node write is first): the claim waits a pass.
    pub(super) fn release_node(&mut self) -> bool {
        let Some(edit) = self
            .node()
            .and_then(|n| node::release_edit(n, self.v.node_taints))
        else {
            self.usable = self.gate_usable;
            return true;
        };
        let queued = self.node_write(NodeAction::Taints(edit), true);
        if queued {
            self.usable = self.gate_usable;
        }
        queued
    }

    /// A taint edit that later steps do not wait for.
    pub(super) fn node_taints_best_effort(&mut self, edit: fn(&NodeView) -> Option<TaintEdit>) {
        if let Some(e) = self.node().and_then(edit) {
            self.node_write(NodeAction::Taints(e), false);
        }
    }

    /// fleet's cordon on the Node: on while a shutdown is on its way (the shutdown's own pass
    /// queues it after the recording write; a refused one is retried here), and off for a claim
    /// that holds the machine ready (an adopted machine, say): a claim in its boot window has the
    /// gate's release instead.
    pub(super) fn node_cordons(&mut self, wanted: bool) {
        if self.shutting_down() {
            self.node_taints_best_effort(node::cordon_edit);
        } else if wanted
            && !self
                .claims
                .iter()
                .any(|c| c.wants_machine() && c.phase.in_boot_window())
        {
            self.node_taints_best_effort(node::uncordon_edit);
        }
    }

    /// The Node's upkeep once the slot's own steps are planned: its provider ID, and the
    /// deletion of a stale Node.
    pub(super) fn node_upkeep(&mut self) {
        let Some(n) = self.node() else { return };
        if self.v.blind || self.v.unreadable || !self.v.acting {
            return;
        }
        match &n.provider_id {
            // cluster-autoscaler matches instances to Nodes by exact provider ID.
            None => {
                self.node_write(NodeAction::ProviderId(self.v.provider_id.to_owned()), false);
                return;
            }
            Some(found) if found != self.v.provider_id => {
                self.steps.push(Step::ProviderIdMismatch {
                    node: n.name.clone(),
                    found: found.clone(),
                });
                return;
            }
            Some(_) => {}
        }
        if self.stale(n) {
            self.node_write(NodeAction::Delete, false);
        }
    }

    /// A Node left behind (SPEC §3.12 6): deletion is opted into, fleet sees the machines and the
    /// Nodes (blindness returned early), no claim wants the slot and nothing runs on it, the
    /// machine has been seen off for the whole wait, the Node is not Ready, and its provider ID
    /// is the slot's (checked by the caller).
    fn stale(&self, n: &NodeView) -> bool {
        let Some(after) = self.v.timings.delete_stale_node_after else {
            return false;
        };
        let off_long_enough = self.power == Some(Power::Off)
            && self
                .v
                .off_since
                .is_some_and(|since| add(since, after) <= self.now);
        off_long_enough
            && !n.ready
            && !self.in_flight()
            && !self.claims.iter().any(|c| c.phase.is_live())
    }
}
