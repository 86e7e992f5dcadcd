//! Usability (SPEC §3.1): the single predicate for "the machine can take the pool's work". The
//! readiness gate, the claim's ready phase and the report all ask it the same way.
//!
//! A machine is usable only when its bench is UP (a HELD bench is there and takes no work) and,
//! where the slot is bound to a Kubernetes Node, that Node exists, is Ready, is not cordoned, and
//! carries none of the group's readiness taints. Pure: no I/O.

use serde::{Deserialize, Serialize};

use super::state::State;

/// A taint's effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    /// The name Kubernetes gives the effect.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

/// A Kubernetes taint, written `key[=value]:Effect`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: Effect,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid taint {0:?}: write key[=value]:Effect with Effect one of NoSchedule, PreferNoSchedule, \
     NoExecute (like node.cilium.io/agent-not-ready:NoExecute)"
)]
pub struct InvalidTaint(pub String);

impl std::str::FromStr for Taint {
    type Err = InvalidTaint;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidTaint(text.to_owned());
        let (head, effect) = text.rsplit_once(':').ok_or_else(bad)?;
        let effect = match effect {
            "NoSchedule" => Effect::NoSchedule,
            "PreferNoSchedule" => Effect::PreferNoSchedule,
            "NoExecute" => Effect::NoExecute,
            _ => return Err(bad()),
        };
        let (key, value) = match head.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (head, None),
        };
        let key_ok = !key.is_empty()
            && key.len() <= 316
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if !key_ok {
            return Err(bad());
        }
        Ok(Taint {
            key: key.to_owned(),
            value,
            effect,
        })
    }
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={}:{:?}", self.key, v, self.effect),
            None => write!(f, "{}:{:?}", self.key, self.effect),
        }
    }
}

impl Taint {
    /// Whether a node's taint is this readiness taint: same key and effect, and the same value
    /// when this one names a value.
    pub fn matches(&self, node_taint: &Taint) -> bool {
        self.key == node_taint.key
            && self.effect == node_taint.effect
            && self
                .value
                .as_ref()
                .is_none_or(|v| node_taint.value.as_ref() == Some(v))
    }
}

/// What fleet reads of a Kubernetes Node.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` and `metadata.resourceVersion`: every write fleet makes to the Node carries
    /// them, so it lands only on the Node fleet judged, as fleet saw it (SPEC §3.12).
    pub uid: String,
    pub resource_version: String,
    /// `spec.providerID`; `None` when empty.
    pub provider_id: Option<String>,
    /// The NodeReady condition is exactly True.
    pub ready: bool,
    /// `spec.unschedulable`: cordoned.
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
}

impl NodeView {
    /// Whether the Node carries fleet's own cordon taint, in any form.
    pub fn cordoned_by_fleet(&self) -> bool {
        self.taints.iter().any(|t| t.key == FLEET_CORDON_TAINT)
    }
}

/// Whether the slot is bound to a Kubernetes Node, and what its Node looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding<'a> {
    /// The slot has no Kubernetes Node: presence alone answers.
    Unbound,
    /// The slot names a Node; `None` when the Node object does not exist (yet).
    Bound(Option<&'a NodeView>),
    /// The slot names a Node, and the Nodes cannot be seen (the API server is out of reach, or
    /// sight of it came back within the grace): its usability is unknown, and the slot is judged
    /// as blind, never as unusable (SPEC §5.2).
    Unseen,
}

/// The key of the taint fleet puts on a Node before it powers the machine off (SPEC §3.1): a
/// Node that carries it, with any value and effect, is draining and takes no work.
pub const FLEET_CORDON_TAINT: &str = "fleet.dev/draining";

/// The taint fleet adds before a shutdown: nothing new schedules there, and what runs stays.
pub fn fleet_cordon() -> Taint {
    Taint {
        key: FLEET_CORDON_TAINT.to_owned(),
        value: None,
        effect: Effect::NoSchedule,
    }
}

/// The taints cluster-autoscaler puts on a Node it scales down; a previous scale-down may have
/// left them on a Node that comes back, where they would keep it out of the pool.
pub const AUTOSCALER_TAINTS: [&str; 2] = [
    "ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
];

/// A change to a Node's taints (SPEC §3.12). `spec.taints` is an atomic list, so the change is
/// written as the whole new list, made from the list as read: a taint leaves only when it is in
/// `remove` (same key and effect), so everyone else's taints stay exactly as they were.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaintEdit {
    pub remove: Vec<Taint>,
    pub add: Vec<Taint>,
}

impl TaintEdit {
    /// Whether a taint of the Node is one this edit removes.
    pub fn removes(&self, key: &str, effect: Effect) -> bool {
        self.remove
            .iter()
            .any(|r| r.key == key && r.effect == effect)
    }

    /// The list after the edit: the kept taints in their order, then the added ones.
    pub fn apply(&self, taints: &[Taint]) -> Vec<Taint> {
        taints
            .iter()
            .filter(|t| !self.removes(&t.key, t.effect))
            .chain(&self.add)
            .cloned()
            .collect()
    }

    /// `None` when the edit changes nothing, so an idempotent pass writes nothing.
    fn nonempty(self) -> Option<Self> {
        (!self.remove.is_empty() || !self.add.is_empty()).then_some(self)
    }
}

/// The cordon before a shutdown: fleet's taint, unless the Node carries it.
pub fn cordon_edit(node: &NodeView) -> Option<TaintEdit> {
    TaintEdit {
        remove: Vec::new(),
        add: (!node.cordoned_by_fleet())
            .then(fleet_cordon)
            .into_iter()
            .collect(),
    }
    .nonempty()
}

/// Lifting fleet's own cordon alone (the gate ran out: a cordoned Node is invisible to
/// cluster-autoscaler's scale-down).
pub fn uncordon_edit(node: &NodeView) -> Option<TaintEdit> {
    TaintEdit {
        remove: fleet_taints(node),
        add: Vec::new(),
    }
    .nonempty()
}

/// The readiness gate's end: fleet's cordon and cluster-autoscaler's leftovers go, and the
/// group's taints the Node lacks are stamped.
pub fn release_edit(node: &NodeView, node_taints: &[Taint]) -> Option<TaintEdit> {
    let mut remove = fleet_taints(node);
    remove.extend(
        node.taints
            .iter()
            .filter(|t| AUTOSCALER_TAINTS.contains(&t.key.as_str()))
            .cloned(),
    );
    let mut add = Vec::new();
    for want in node_taints {
        let same_slot = node
            .taints
            .iter()
            .find(|t| t.key == want.key && t.effect == want.effect);
        match same_slot {
            Some(t) if t.value == want.value => {}
            // Kubernetes allows one taint per key and effect: the group's value replaces it.
            Some(t) => {
                remove.push(t.clone());
                add.push(want.clone());
            }
            None => add.push(want.clone()),
        }
    }
    TaintEdit { remove, add }.nonempty()
}

fn fleet_taints(node: &NodeView) -> Vec<Taint> {
    node.taints
        .iter()
        .filter(|t| t.key == FLEET_CORDON_TAINT)
        .cloned()
        .collect()
}

/// The Node as it will be once the gate's release lands: what the gate judges, since fleet
/// removes its own cordon and cluster-autoscaler's leftovers itself at the gate's end.
pub fn released(node: &NodeView) -> NodeView {
    let mut next = node.clone();
    next.taints
        .retain(|t| t.key != FLEET_CORDON_TAINT && !AUTOSCALER_TAINTS.contains(&t.key.as_str()));
    next
}

/// The one usability predicate.
pub fn usable(presence: State, binding: Binding<'_>, readiness_taints: &[Taint]) -> bool {
    let bench_usable = match presence {
        State::Up => true,
        State::Held | State::Down => false,
    };
    let node_usable = match binding {
        Binding::Unbound => true,
        Binding::Bound(None) | Binding::Unseen => false,
        Binding::Bound(Some(node)) => {
            node.ready
                && !node.unschedulable
                && !node.taints.iter().any(|t| {
                    t.key == FLEET_CORDON_TAINT || readiness_taints.iter().any(|r| r.matches(t))
                })
        }
    };
    bench_usable && node_usable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(s: &str) -> Taint {
        s.parse().unwrap()
    }

    #[test]
    fn an_effect_is_named_as_kubernetes_names_it_and_read_back() {
        for (effect, name) in [
            (Effect::NoSchedule, "NoSchedule"),
            (Effect::PreferNoSchedule, "PreferNoSchedule"),
            (Effect::NoExecute, "NoExecute"),
        ] {
            assert_eq!(effect.as_str(), name);
            assert_eq!(taint(&format!("k:{}", effect.as_str())).effect, effect);
        }
    }

    #[test]
    fn taints_parse_and_say_what_is_valid() {
        assert_eq!(
            taint("node.cilium.io/agent-not-ready:NoExecute"),
            Taint {
                key: "node.cilium.io/agent-not-ready".into(),
                value: None,
                effect: Effect::NoExecute
            }
        );
        assert_eq!(taint("a=b:NoSchedule").value.as_deref(), Some("b"));
        assert_eq!(
            ["a:NoSchedule", "a:PreferNoSchedule", "a:NoExecute"].map(|t| taint(t).effect),
            [
                Effect::NoSchedule,
                Effect::PreferNoSchedule,
                Effect::NoExecute
            ]
        );
        for bad in ["", "a", "a:Never", ":NoSchedule", "a b:NoSchedule"] {
            let err = bad.parse::<Taint>().unwrap_err().to_string();
            assert!(err.contains("key[=value]:Effect"), "{bad}: {err}");
        }
        assert_eq!(taint("a=b:NoSchedule").to_string(), "a=b:NoSchedule");
    }

    // SPEC §3.1, usability over its whole input space: presence × binding × node facts.
    #[test]
    fn usability_over_the_whole_input_space() {
        let gate = [taint("node.cilium.io/agent-not-ready:NoExecute")];
        for presence in State::ALL {
            assert_eq!(
                usable(presence, Binding::Unbound, &gate),
                presence == State::Up,
                "{presence}"
            );
            assert!(
                !usable(presence, Binding::Bound(None), &gate),
                "a missing Node is not usable"
            );
            // Not usable, and never judged so: the planner holds an unseen slot blind.
            assert!(!usable(presence, Binding::Unseen, &gate), "an unseen Node");
            for ready in [true, false] {
                for unschedulable in [true, false] {
                    for tainted in [
                        None,
                        Some("node.cilium.io/agent-not-ready:NoExecute"),
                        Some("other:NoExecute"),
                        Some("node.cilium.io/agent-not-ready:NoSchedule"),
                        Some("fleet.dev/draining:NoSchedule"),
                        Some("fleet.dev/draining=x:PreferNoSchedule"),
                    ] {
                        let node = NodeView {
                            name: "n".into(),
                            ready,
                            unschedulable,
                            taints: tainted.map(taint).into_iter().collect(),
                            ..NodeView::default()
                        };
                        // The group's readiness taint, or fleet's own cordon in any form.
                        let gated = tainted == Some("node.cilium.io/agent-not-ready:NoExecute")
                            || tainted.is_some_and(|t| t.starts_with("fleet.dev/draining"));
                        let want = presence == State::Up && ready && !unschedulable && !gated;
                        assert_eq!(
                            usable(presence, Binding::Bound(Some(&node)), &gate),
                            want,
                            "{presence} ready={ready} cordoned={unschedulable} taint={tainted:?}"
                        );
                    }
                }
            }
        }
    }

    use proptest::prelude::*;

    fn any_taint() -> impl Strategy<Value = Taint> {
        let keys = prop::sample::select(vec![
            FLEET_CORDON_TAINT,
            AUTOSCALER_TAINTS[0],
            AUTOSCALER_TAINTS[1],
            "node.cilium.io/agent-not-ready",
            "gpu",
            "dedicated",
        ]);
        let values = prop::option::of(prop::sample::select(vec!["a", "b"]));
        let effects = prop::sample::select(vec![
            Effect::NoSchedule,
            Effect::PreferNoSchedule,
            Effect::NoExecute,
        ]);
        (keys, values, effects).prop_map(|(k, v, e)| Taint {
            key: k.to_owned(),
            value: v.map(str::to_owned),
            effect: e,
        })
    }

    /// A Node's taints as the API server allows them: one per key and effect.
    fn node_with(taints: Vec<Taint>) -> NodeView {
        let mut seen = std::collections::HashSet::new();
        let taints = taints
            .into_iter()
            .filter(|t| seen.insert((t.key.clone(), t.effect)))
            .collect();
        NodeView {
            name: "n".into(),
            taints,
            ..NodeView::default()
        }
    }

    fn fleets_own(t: &Taint) -> bool {
        t.key == FLEET_CORDON_TAINT || AUTOSCALER_TAINTS.contains(&t.key.as_str())
    }

    proptest! {
        // SPEC §3.12: every edit keeps everyone else's taints exactly, does what it says, and is
        // idempotent: on the Node it produced, it asks for nothing more.
        #[test]
        fn taint_edits_keep_others_taints_and_are_idempotent(
            taints in prop::collection::vec(any_taint(), 0..6),
            group in prop::collection::vec(any_taint(), 0..3),
        ) {
            let node = node_with(taints);
            let group: Vec<Taint> = node_with(group).taints.into_iter()
                .filter(|t| !fleets_own(t)).collect();
            let others: Vec<&Taint> = node.taints.iter()
                .filter(|t| !fleets_own(t)
                    && !group.iter().any(|g| g.key == t.key && g.effect == t.effect))
                .collect();
            let after = |edit: Option<TaintEdit>| {
                let list = edit.map_or(node.taints.clone(), |e| e.apply(&node.taints));
                NodeView { taints: list, ..node.clone() }
            };

            let cordoned = after(cordon_edit(&node));
            prop_assert!(cordoned.cordoned_by_fleet());
            prop_assert_eq!(cordon_edit(&cordoned), None);

            let uncordoned = after(uncordon_edit(&node));
            prop_assert!(!uncordoned.cordoned_by_fleet());
            prop_assert_eq!(uncordon_edit(&uncordoned), None);

            let released_node = after(release_edit(&node, &group));
            prop_assert!(!released_node.taints.iter().any(fleets_own));
            for want in &group {
                prop_assert!(released_node.taints.contains(want), "{want} stamped");
            }
            prop_assert_eq!(release_edit(&released_node, &group), None);
            let judged = released(&node);
            prop_assert_eq!(
                judged.taints.iter().collect::<Vec<_>>(),
                node.taints.iter().filter(|t| !fleets_own(t)).collect::<Vec<_>>(),
                "the gate judges the Node without fleet's cordon and CA's leftovers, nothing else"
            );

            for edited in [&cordoned, &uncordoned, &released_node] {
                let kept: Vec<&Taint> = edited.taints.iter()
                    .filter(|t| others.contains(t)).collect();
                prop_assert_eq!(&kept, &others, "others' taints kept, in their order");
            }
        }
    }

    #[test]
    fn an_edit_that_changes_nothing_is_none() {
        let clean = node_with(vec![taint("gpu:NoSchedule")]);
        assert_eq!(uncordon_edit(&clean), None);
        assert_eq!(release_edit(&clean, &[taint("gpu:NoSchedule")]), None);
        assert_eq!(
            release_edit(&clean, &[taint("gpu=a:NoSchedule")]),
            Some(TaintEdit {
                remove: vec![taint("gpu:NoSchedule")],
                add: vec![taint("gpu=a:NoSchedule")],
            }),
            "the group's value replaces the one taint of that key and effect"
        );
        assert_eq!(
            cordon_edit(&clean).unwrap().add,
            vec![taint("fleet.dev/draining:NoSchedule")]
        );
    }

    #[test]
    fn a_readiness_taint_with_a_value_matches_only_that_value() {
        let r = taint("k=v:NoExecute");
        assert!(r.matches(&taint("k=v:NoExecute")));
        assert!(!r.matches(&taint("k=w:NoExecute")));
        assert!(!r.matches(&taint("k:NoExecute")));
        assert!(taint("k:NoExecute").matches(&taint("k=anything:NoExecute")));
    }
}
