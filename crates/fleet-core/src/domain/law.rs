//! The input law (SPEC §3.1): every power decision reads the same three facts, the slot's live
//! claim, the machine's observed power and the node's usability, and one function of that triple
//! gives the report, the state machine's starting state and what fires.
//!
//! The report and the state come from the same match of the same triple, so they cannot
//! disagree. The report is an output: no decision reads it back. Pure: no I/O, no clock.

use serde::Serialize;

use super::claim::{Claim, Phase};
use super::fsm::{Event, NodeState, step};
/// The machine's observed power, a column of the law; it lives in [`super::power`] so that
/// `claim` can use it without a cycle.
pub use super::power::Power;

/// The live-claim column of the law.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ClaimInput {
    /// No claim names the slot.
    None,
    Pending,
    Booting,
    Ready,
    /// A live claim a scale-down marked: it owns the slot and is not a want.
    Marked,
    /// A failed or completed claim: a terminal claim is not a want.
    Terminal,
}

impl ClaimInput {
    pub const ALL: [ClaimInput; 6] = [
        ClaimInput::None,
        ClaimInput::Pending,
        ClaimInput::Booting,
        ClaimInput::Ready,
        ClaimInput::Marked,
        ClaimInput::Terminal,
    ];

    /// The column for the slot's current claim (its live claim, else its newest terminal one).
    pub fn of(claim: Option<&Claim>) -> ClaimInput {
        match claim {
            None => ClaimInput::None,
            Some(c) if c.phase.is_live() && c.marked_for_deletion.is_some() => ClaimInput::Marked,
            Some(c) => match c.phase {
                Phase::Pending => ClaimInput::Pending,
                Phase::Booting => ClaimInput::Booting,
                Phase::Ready => ClaimInput::Ready,
                Phase::Failed | Phase::Completed => ClaimInput::Terminal,
            },
        }
    }

    /// Law 1's WantsMachine: live and not marked.
    pub fn wants_machine(self) -> bool {
        match self {
            ClaimInput::Pending | ClaimInput::Booting | ClaimInput::Ready => true,
            ClaimInput::None | ClaimInput::Marked | ClaimInput::Terminal => false,
        }
    }

    pub fn is_live(self) -> bool {
        match self {
            ClaimInput::Pending | ClaimInput::Booting | ClaimInput::Ready | ClaimInput::Marked => {
                true
            }
            ClaimInput::None | ClaimInput::Terminal => false,
        }
    }
}

/// The whole input of a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Input {
    pub claim: ClaimInput,
    pub power: Power,
    /// Whether the machine can take the pool's work (`node::usable`).
    pub usable: bool,
}

/// The slot's reported phase: an output, derived, never an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Report {
    Off,
    Pending,
    Booting,
    Ready,
    Draining,
}

impl Report {
    pub const ALL: [Report; 5] = [
        Report::Off,
        Report::Pending,
        Report::Booting,
        Report::Ready,
        Report::Draining,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Report::Off => "off",
            Report::Pending => "pending",
            Report::Booting => "booting",
            Report::Ready => "ready",
            Report::Draining => "draining",
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a row fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Fires {
    Nothing,
    StartNode,
    ShutdownNode,
    /// A marked claim whose machine is off ends completed.
    CompleteClaim,
}

/// Who owns a row where the law itself fires nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Owner {
    /// The law: it fires, or the slot is at rest.
    Law,
    /// The operation in flight decides the next move (JobCompleted / JobFailed / JobTimeout).
    JobMonitor,
    /// The readiness gate decides the move to ready (or ReadinessGateTimeout).
    ReadinessGate,
    /// The claim controller ends the claim (MachineGone past the grace).
    ClaimController,
}

/// One row of the law.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Outcome {
    pub report: Report,
    pub state: NodeState,
    pub fires: Fires,
    pub owner: Owner,
}

const fn row(report: Report, state: NodeState, fires: Fires, owner: Owner) -> Outcome {
    Outcome {
        report,
        state,
        fires,
        owner,
    }
}

/// The input law, the table of SPEC §3.1 in its order: one exhaustive match over the whole
/// triple, with no wildcard arm, so a new claim column or power value does not compile until the
/// table says what it does. `true | false` is written out where the table says "—".
pub fn decide(input: Input) -> Outcome {
    use ClaimInput as C;
    use Fires::*;
    use NodeState::*;
    use Owner::*;
    use Power::*;
    match (input.claim, input.power, input.usable) {
        // 1. No claim, machine off: a free slot at rest.
        (C::None, Off, true | false) => row(Report::Off, Shutdown, Nothing, Law),
        // 2. No claim, machine on: unwanted, so shut it down.
        (C::None, On, true | false) => row(Report::Draining, NodeState::Ready, ShutdownNode, Law),
        // 3. Pending, machine off: boot it.
        (C::Pending, Off, true | false) => row(Report::Pending, Shutdown, StartNode, Law),
        // 4. Pending, machine already on: the readiness gate answers (pending → ready is legal).
        (C::Pending, On, true | false) => row(Report::Booting, StartingUp, Nothing, ReadinessGate),
        // 5. Booting: the operation in flight owns it.
        (C::Booting, On | Off, true | false) => {
            row(Report::Booting, StartingUp, Nothing, JobMonitor)
        }
        // 6. Ready, on and usable: capacity serving the pool.
        (C::Ready, On, true) => row(Report::Ready, NodeState::Ready, Nothing, Law),
        // 7. Ready, on, not usable: the readiness gate owns it.
        (C::Ready, On, false) => row(Report::Booting, StartingUp, Nothing, ReadinessGate),
        // 8. Ready, off: nothing fires; the claim controller ends it MachineGone past the grace.
        (C::Ready, Off, true | false) => row(Report::Booting, StartingUp, Nothing, ClaimController),
        // 9. Marked, on: shut it down; the claim completes once the machine is observed off.
        (C::Marked, On, true | false) => row(Report::Draining, NodeState::Ready, ShutdownNode, Law),
        // 10. Marked, off: the claim ends completed.
        (C::Marked, Off, true | false) => {
            row(Report::Off, Shutdown, CompleteClaim, ClaimController)
        }
        // 11. Terminal, on: a terminal claim is not a want, so shut it down.
        (C::Terminal, On, true | false) => {
            row(Report::Draining, NodeState::Ready, ShutdownNode, Law)
        }
        // 12. Terminal, off: at rest.
        (C::Terminal, Off, true | false) => row(Report::Off, Shutdown, Nothing, Law),
    }
}

/// The report a triple derives (the slot's phase), from the same row as the state. The slot's
/// report for a HELD bench is taken from the row it would take UP (SPEC §3.1, §4.5 step 8).
pub fn report(input: Input) -> Report {
    decide(input).report
}

/// The state the node state machine starts a pass in.
pub fn state(input: Input) -> NodeState {
    decide(input).state
}

/// The transitions in the order of the four laws (SPEC §3.1), each asked of the state machine
/// seeded from the law's state:
/// 1. a live claim that wants a machine, the machine off → StartNode;
/// 2. a live claim, the machine on, the node usable → nothing (capacity serving pods);
/// 3. no live claim (or a marked one), the machine observed on → ShutdownNode;
/// 4. a terminal claim with the machine on → the same branch as 3.
pub fn transition(input: Input) -> Option<Event> {
    let start = state(input);
    let legal = |e: Event| step(start, e).is_ok().then_some(e);
    let on = input.power == Power::On;
    if input.claim.wants_machine() && !on {
        return legal(Event::StartNode);
    }
    if input.claim.is_live() && !input.claim.wants_machine() && on {
        return legal(Event::ShutdownNode);
    }
    if input.claim.is_live() && on {
        return None;
    }
    if on {
        return legal(Event::ShutdownNode);
    }
    None
}

/// Every input, for the tests that walk the whole space.
pub fn all_inputs() -> impl Iterator<Item = Input> {
    ClaimInput::ALL.into_iter().flat_map(|claim| {
        Power::ALL.into_iter().flat_map(move |power| {
            [true, false].into_iter().map(move |usable| Input {
                claim,
                power,
                usable,
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ClaimInput as C;

    // The phase a view, a metric label and a log line show is the stored (serde) name, and the
    // stored name reads back as the same phase.
    #[test]
    fn every_report_is_shown_by_its_stored_name() {
        let names: Vec<String> = Report::ALL.iter().map(|r| r.to_string()).collect();
        assert_eq!(names, ["off", "pending", "booting", "ready", "draining"]);
        for report in Report::ALL {
            let stored = serde_json::to_value(report).unwrap();
            assert_eq!(stored, serde_json::Value::from(report.as_str()));
            assert_eq!(serde_json::from_value::<Report>(stored).unwrap(), report);
        }
    }

    // SPEC §3.1, the law over the whole input space, row by row. `None` for usability is the
    // table's "—": both values give the row.
    #[test]
    fn the_law_over_the_whole_input_space() {
        use Fires::*;
        use NodeState::*;
        type Row = (u8, C, Power, Option<bool>, Report, NodeState, Fires);
        let table: [Row; 12] = [
            (1, C::None, Power::Off, None, Report::Off, Shutdown, Nothing),
            (
                2,
                C::None,
                Power::On,
                None,
                Report::Draining,
                NodeState::Ready,
                ShutdownNode,
            ),
            (
                3,
                C::Pending,
                Power::Off,
                None,
                Report::Pending,
                Shutdown,
                StartNode,
            ),
            (
                4,
                C::Pending,
                Power::On,
                None,
                Report::Booting,
                StartingUp,
                Nothing,
            ),
            (
                5,
                C::Booting,
                Power::On,
                None,
                Report::Booting,
                StartingUp,
                Nothing,
            ),
            (
                5,
                C::Booting,
                Power::Off,
                None,
                Report::Booting,
                StartingUp,
                Nothing,
            ),
            (
                6,
                C::Ready,
                Power::On,
                Some(true),
                Report::Ready,
                NodeState::Ready,
                Nothing,
            ),
            (
                7,
                C::Ready,
                Power::On,
                Some(false),
                Report::Booting,
                StartingUp,
                Nothing,
            ),
            (
                8,
                C::Ready,
                Power::Off,
                None,
                Report::Booting,
                StartingUp,
                Nothing,
            ),
            (
                9,
                C::Marked,
                Power::On,
                None,
                Report::Draining,
                NodeState::Ready,
                ShutdownNode,
            ),
            (
                10,
                C::Marked,
                Power::Off,
                None,
                Report::Off,
                Shutdown,
                CompleteClaim,
            ),
            (
                11,
                C::Terminal,
                Power::On,
                None,
                Report::Draining,
                NodeState::Ready,
                ShutdownNode,
            ),
        ];
        let mut covered = 0;
        for (n, claim, power, usable, report, state, fires) in table {
            for u in usable.map_or(vec![true, false], |u| vec![u]) {
                let got = decide(Input {
                    claim,
                    power,
                    usable: u,
                });
                assert_eq!(
                    (got.report, got.state, got.fires),
                    (report, state, fires),
                    "SPEC §3.1 row {n}"
                );
                covered += 1;
            }
        }
        // Row 12 checked separately so the count below is the whole space.
        for u in [true, false] {
            let got = decide(Input {
                claim: C::Terminal,
                power: Power::Off,
                usable: u,
            });
            assert_eq!(
                (got.report, got.state, got.fires),
                (Report::Off, Shutdown, Nothing),
                "SPEC §3.1 row 12"
            );
            covered += 1;
        }
        assert_eq!(covered, all_inputs().count());
    }

    // The four laws and the table say the same thing, everywhere.
    #[test]
    fn the_four_laws_agree_with_the_table() {
        for input in all_inputs() {
            let want = match decide(input).fires {
                Fires::StartNode => Some(Event::StartNode),
                Fires::ShutdownNode => Some(Event::ShutdownNode),
                Fires::Nothing | Fires::CompleteClaim => None,
            };
            assert_eq!(transition(input), want, "{input:?}");
        }
    }

    // Whatever the law fires is legal from the state it seeds: no row asks for an illegal step.
    #[test]
    fn what_the_law_fires_is_legal_from_its_state() {
        for input in all_inputs() {
            if let Some(event) = transition(input) {
                assert!(step(state(input), event).is_ok(), "{input:?}");
            }
        }
    }

    #[test]
    fn a_marked_claim_is_live_but_not_a_want() {
        assert!(C::Marked.is_live() && !C::Marked.wants_machine());
        assert!(!C::Terminal.is_live() && !C::Terminal.wants_machine());
        for c in [C::Pending, C::Booting, C::Ready] {
            assert!(c.is_live() && c.wants_machine());
        }
    }

    #[test]
    fn a_ready_claim_whose_machine_is_off_reports_booting_and_fires_nothing() {
        let o = decide(Input {
            claim: C::Ready,
            power: Power::Off,
            usable: false,
        });
        assert_eq!(
            (o.report, o.fires, o.owner),
            (Report::Booting, Fires::Nothing, Owner::ClaimController)
        );
        assert_eq!(
            transition(Input {
                claim: C::Ready,
                power: Power::Off,
                usable: false
            }),
            None
        );
    }
}
