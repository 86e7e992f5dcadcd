//! The node state machine (SPEC §3.4): four states, six events, one transition table.
//!
//! A pass never reads the machine's state back from a record: it seeds the machine from the
//! input law's state for the current triple (`law::decide`), then steps it with the event the
//! law fires or the operation's outcome. Pure: no I/O, no clock.

use serde::Serialize;

/// Where a slot's machine is in its lifecycle, as the state machine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// No machine: a free slot, a pending claim that has not started, or a machine that just
    /// went off.
    Shutdown,
    /// The startup operation is in flight.
    StartingUp,
    /// The machine is up; the transition to fire from here is ShutdownNode.
    Ready,
    /// The shutdown operation is in flight.
    ShuttingDown,
}

impl NodeState {
    pub const ALL: [NodeState; 4] = [
        NodeState::Shutdown,
        NodeState::StartingUp,
        NodeState::Ready,
        NodeState::ShuttingDown,
    ];

    /// Whether an operation is in flight (the states ForceCleanup may end).
    pub fn is_transitional(self) -> bool {
        match self {
            NodeState::StartingUp | NodeState::ShuttingDown => true,
            NodeState::Shutdown | NodeState::Ready => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Shutdown => "shutdown",
            NodeState::StartingUp => "startingup",
            NodeState::Ready => "ready",
            NodeState::ShuttingDown => "shuttingdown",
        }
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What moves the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Event {
    /// Start the startup operation; the claim moves pending → booting in the same write.
    StartNode,
    /// Start the shutdown operation (after cordoning).
    ShutdownNode,
    /// The operation in flight exited 0.
    JobCompleted,
    /// The operation in flight exited non-zero.
    JobFailed,
    /// The operation in flight outlived its timeout (and was killed).
    JobTimeout,
    /// An operation stuck past the stuck threshold is abandoned.
    ForceCleanup,
}

impl Event {
    pub const ALL: [Event; 6] = [
        Event::StartNode,
        Event::ShutdownNode,
        Event::JobCompleted,
        Event::JobFailed,
        Event::JobTimeout,
        Event::ForceCleanup,
    ];
}

/// A transition the table does not have. Nothing is written for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition: {event:?} from {from}")]
pub struct IllegalTransition {
    pub from: NodeState,
    pub event: Event,
}

/// The transition table of SPEC §3.4, one arm per (state, event); no wildcard, so a new state or
/// event does not compile until the table says what it does.
pub fn step(from: NodeState, event: Event) -> Result<NodeState, IllegalTransition> {
    use Event::*;
    use NodeState::*;
    let illegal = Err(IllegalTransition { from, event });
    match (from, event) {
        (Shutdown, StartNode) => Ok(StartingUp),
        (Shutdown, ShutdownNode | JobCompleted | JobFailed | JobTimeout | ForceCleanup) => illegal,
        (StartingUp, JobCompleted) => Ok(Ready),
        (StartingUp, JobFailed | JobTimeout | ForceCleanup) => Ok(Shutdown),
        (StartingUp, StartNode | ShutdownNode) => illegal,
        (Ready, ShutdownNode) => Ok(ShuttingDown),
        (Ready, StartNode | JobCompleted | JobFailed | JobTimeout | ForceCleanup) => illegal,
        (ShuttingDown, JobCompleted | ForceCleanup) => Ok(Shutdown),
        (ShuttingDown, JobFailed | JobTimeout) => Ok(Ready),
        (ShuttingDown, StartNode | ShutdownNode) => illegal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::*;
    use NodeState::*;

    // SPEC §3.4, the transition table, over all 24 (state, event) pairs.
    #[test]
    fn the_transition_table_over_every_state_and_event() {
        let table: [(NodeState, Event, Option<NodeState>); 24] = [
            (Shutdown, StartNode, Some(StartingUp)),
            (Shutdown, ShutdownNode, None),
            (Shutdown, JobCompleted, None),
            (Shutdown, JobFailed, None),
            (Shutdown, JobTimeout, None),
            (Shutdown, ForceCleanup, None),
            (StartingUp, StartNode, None),
            (StartingUp, ShutdownNode, None),
            (StartingUp, JobCompleted, Some(Ready)),
            (StartingUp, JobFailed, Some(Shutdown)),
            (StartingUp, JobTimeout, Some(Shutdown)),
            (StartingUp, ForceCleanup, Some(Shutdown)),
            (Ready, StartNode, None),
            (Ready, ShutdownNode, Some(ShuttingDown)),
            (Ready, JobCompleted, None),
            (Ready, JobFailed, None),
            (Ready, JobTimeout, None),
            (Ready, ForceCleanup, None),
            (ShuttingDown, StartNode, None),
            (ShuttingDown, ShutdownNode, None),
            (ShuttingDown, JobCompleted, Some(Shutdown)),
            (ShuttingDown, JobFailed, Some(Ready)),
            (ShuttingDown, JobTimeout, Some(Ready)),
            (ShuttingDown, ForceCleanup, Some(Shutdown)),
        ];
        for (from, event, to) in table {
            let got = step(from, event);
            match to {
                Some(to) => assert_eq!(got, Ok(to), "{from} --{event:?}-->"),
                None => assert_eq!(
                    got,
                    Err(IllegalTransition { from, event }),
                    "{from} --{event:?}-->"
                ),
            }
        }
        // The table above is the whole input space.
        assert_eq!(table.len(), NodeState::ALL.len() * Event::ALL.len());
    }

    // The name a state shows in logs and errors is its stored (serde) name, one per state.
    #[test]
    fn every_state_is_shown_by_its_stored_name() {
        let names: Vec<String> = NodeState::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["shutdown", "startingup", "ready", "shuttingdown"]);
        for state in NodeState::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.as_str())
            );
        }
    }

    proptest::proptest! {
        // Any sequence of events: accepted steps stay in the table, refused ones change nothing,
        // and an operation's end is accepted exactly when an operation is in flight.
        #[test]
        fn no_event_sequence_reaches_an_illegal_state(events in proptest::collection::vec(0..6usize, 0..64)) {
            let mut state = Shutdown;
            for e in events.into_iter().map(|i| Event::ALL[i]) {
                match step(state, e) {
                    Ok(next) => {
                        proptest::prop_assert!(NodeState::ALL.contains(&next));
                        if matches!(e, JobCompleted | JobFailed | JobTimeout) {
                            proptest::prop_assert!(state.is_transitional());
                        }
                        state = next;
                    }
                    Err(err) => proptest::prop_assert_eq!(err, IllegalTransition { from: state, event: e }),
                }
            }
        }
    }

    #[test]
    fn force_cleanup_ends_exactly_the_transitional_states() {
        for s in NodeState::ALL {
            assert_eq!(step(s, ForceCleanup).is_ok(), s.is_transitional(), "{s}");
        }
    }
}
