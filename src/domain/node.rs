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
    /// The NodeReady condition is True.
    pub ready: bool,
    /// `spec.unschedulable`: cordoned.
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
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
                            ready,
                            unschedulable,
                            taints: tainted.map(taint).into_iter().collect(),
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

    #[test]
    fn a_readiness_taint_with_a_value_matches_only_that_value() {
        let r = taint("k=v:NoExecute");
        assert!(r.matches(&taint("k=v:NoExecute")));
        assert!(!r.matches(&taint("k=w:NoExecute")));
        assert!(!r.matches(&taint("k:NoExecute")));
        assert!(taint("k:NoExecute").matches(&taint("k=anything:NoExecute")));
    }
}
