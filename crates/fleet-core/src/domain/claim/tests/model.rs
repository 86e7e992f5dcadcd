//! A model slot driven by random sequences of observations, operations, scaling calls and time:
//! the pure parts composed as a controller pass composes them (judge, gate, law, report), with
//! every invariant of SPEC §3 checked after every step.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;

use super::super::*;
use crate::domain::fsm::{self, NodeState};
use crate::domain::history::{History, LEDGER_LEN, RING_LEN};
use crate::domain::law::{self, ClaimInput, Fires, Input};
use crate::domain::name::{BenchName, ClaimName, GroupName};

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum OpKind {
    Startup,
    Shutdown,
}

#[derive(Clone, Debug, PartialEq)]
struct Op {
    kind: OpKind,
    claim: Option<ClaimName>,
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Completed,
    Failed,
    Timeout,
}

#[derive(Clone, Debug)]
enum Action {
    /// A provider creates a claim: atomic with the check that the slot has no live claim.
    Create,
    /// A claim made around the check (a hand-made claim, a racing provider): the controller's
    /// supersession must still leave one live claim.
    CreateUnchecked,
    Observe {
        on: bool,
        usable: bool,
    },
    Pass,
    /// The operation in flight ends; a shutdown that "lands" powers the machine off.
    OpDone {
        outcome: Outcome,
        lands: bool,
    },
    Advance(u32),
    /// A scale-down: cancel a pending claim, mark a booting or ready one.
    ScaleDown,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => Just(Action::Create),
        1 => Just(Action::CreateUnchecked),
        3 => (any::<bool>(), any::<bool>()).prop_map(|(on, usable)| Action::Observe { on, usable }),
        6 => Just(Action::Pass),
        3 => (0..3u8, any::<bool>()).prop_map(|(o, lands)| Action::OpDone {
            outcome: [Outcome::Completed, Outcome::Failed, Outcome::Timeout][o as usize],
            lands,
        }),
        3 => prop_oneof![1..120u32, 120..2000u32, 2000..4000u32].prop_map(Action::Advance),
        2 => Just(Action::ScaleDown),
    ]
}

struct Slot {
    timings: Timings,
    claims: Vec<Claim>,
    last: Option<LastClaim>,
    power: Power,
    usable: bool,
    op: Option<Op>,
    history: History,
    now: i64,
    next_id: u32,
}

impl Slot {
    fn new() -> Self {
        Slot {
            timings: Timings::default(),
            claims: Vec::new(),
            last: None,
            power: Power::Off,
            usable: false,
            op: None,
            history: History::default(),
            now: 0,
            next_id: 0,
        }
    }

    fn live(&self) -> Vec<&Claim> {
        self.claims.iter().filter(|c| c.phase.is_live()).collect()
    }

    fn create(&mut self) {
        self.next_id += 1;
        let c = Claim::new(
            ClaimName::parse(&format!("bench-01-{}", self.next_id)).unwrap(),
            BenchName::parse("bench-01").unwrap(),
            GroupName::parse("pool-a").unwrap(),
            self.last.as_ref(),
            t(self.now),
            &self.timings,
            None,
        );
        self.claims.push(c);
    }

    /// Replaces a claim by its successor, checking the write is a legal one-version step.
    fn write(&mut self, next: Claim) {
        let i = self
            .claims
            .iter()
            .position(|c| c.name == next.name)
            .expect("claim exists");
        assert_eq!(
            next.version,
            self.claims[i].version + 1,
            "one write, one version"
        );
        if next.phase.is_terminal() {
            self.last = Some(next.digest());
        }
        self.claims[i] = next;
    }

    fn apply(&mut self, name: &ClaimName, mv: Move) {
        let c = self
            .claims
            .iter()
            .find(|c| &c.name == name)
            .expect("claim exists")
            .clone();
        let next = c
            .apply(mv, t(self.now))
            .unwrap_or_else(|e| panic!("the controller chose an illegal move: {e}"));
        self.write(next);
    }

    /// The slot's current claim: the live one, else the newest terminal one.
    fn current(&self) -> Option<&Claim> {
        self.claims
            .iter()
            .filter(|c| c.phase.is_live())
            .max_by_key(|c| c.requested_at)
            .or_else(|| {
                self.claims
                    .iter()
                    .max_by_key(|c| (c.finished_at, c.requested_at))
            })
    }

    /// One controller pass: judge every claim, the readiness gate, the law, the report.
    fn pass(&mut self) {
        let now = t(self.now);
        // 1. The claim controller.
        let live: Vec<Claim> = self.live().into_iter().cloned().collect();
        let losers: Vec<ClaimName> = superseded(&live.iter().collect::<Vec<_>>())
            .iter()
            .map(|c| c.name.clone())
            .collect();
        for c in self.claims.clone() {
            let ctx = Context {
                now,
                power: Some(self.power),
                slot_exists: true,
                superseded: losers.contains(&c.name),
                timings: &self.timings,
            };
            match judge(&c, &ctx) {
                Judgment::Keep => {}
                Judgment::Fail(r) => self.apply(&c.name, Move::because(Phase::Failed, r)),
                Judgment::Complete(r) => self.apply(&c.name, Move::because(Phase::Completed, r)),
                Judgment::Watch(w) => {
                    let next = c.watched(w, now).unwrap();
                    self.write(next);
                }
                Judgment::Collect => self.claims.retain(|x| x.name != c.name),
            }
        }
        // 2. The readiness gate answers for a claim whose machine is up.
        if self.op.is_none()
            && let Some(c) = self.current().filter(|c| c.wants_machine()).cloned()
            && matches!(c.phase, Phase::Pending | Phase::Booting)
            && self.power == Power::On
            && self.usable
        {
            self.apply(&c.name, Move::to(Phase::Ready));
        }
        // 3. The law, seeded from the triple.
        let current = self.current().cloned();
        let input = Input {
            claim: ClaimInput::of(current.as_ref()),
            power: self.power,
            usable: self.usable,
        };
        let outcome = law::decide(input);
        assert_eq!(
            law::transition(input).is_some(),
            matches!(outcome.fires, Fires::StartNode | Fires::ShutdownNode)
        );
        if self.op.is_none() {
            match outcome.fires {
                Fires::StartNode => {
                    assert_eq!(
                        fsm::step(outcome.state, fsm::Event::StartNode),
                        Ok(NodeState::StartingUp)
                    );
                    let c = current.expect("StartNode needs a claim");
                    assert!(
                        c.attempt <= self.timings.max_attempts,
                        "a claim past the bound was never judged"
                    );
                    self.apply(&c.name, Move::to(Phase::Booting));
                    self.op = Some(Op {
                        kind: OpKind::Startup,
                        claim: Some(c.name.clone()),
                    });
                }
                Fires::ShutdownNode => {
                    assert_eq!(
                        fsm::step(outcome.state, fsm::Event::ShutdownNode),
                        Ok(NodeState::ShuttingDown)
                    );
                    match current.filter(|c| c.marked_for_deletion.is_some() && c.phase.is_live()) {
                        Some(c) => {
                            if c.shutdown_gate(now, &self.timings) == ShutdownGate::Fire {
                                let next = c.record_shutdown_attempt(now, &self.timings);
                                self.write(next);
                                self.op = Some(Op {
                                    kind: OpKind::Shutdown,
                                    claim: Some(c.name.clone()),
                                });
                            }
                        }
                        None => {
                            self.op = Some(Op {
                                kind: OpKind::Shutdown,
                                claim: None,
                            })
                        }
                    }
                }
                Fires::Nothing | Fires::CompleteClaim => {}
            }
        }
        // 4. The report, through the one writer.
        let current = self.current().cloned();
        let input = Input {
            claim: ClaimInput::of(current.as_ref()),
            power: self.power,
            usable: self.usable,
        };
        self.history.record(law::report(input), now);
    }

    fn op_done(&mut self, outcome: Outcome, lands: bool) {
        let Some(op) = self.op.take() else { return };
        let event = match outcome {
            Outcome::Completed => fsm::Event::JobCompleted,
            Outcome::Failed => fsm::Event::JobFailed,
            Outcome::Timeout => fsm::Event::JobTimeout,
        };
        let from = match op.kind {
            OpKind::Startup => NodeState::StartingUp,
            OpKind::Shutdown => NodeState::ShuttingDown,
        };
        let to = fsm::step(from, event).expect("an operation's end is legal from its state");
        let claim = op
            .claim
            .and_then(|n| self.claims.iter().find(|c| c.name == n).cloned());
        match (op.kind, outcome) {
            (OpKind::Startup, Outcome::Completed) => {
                assert_eq!(to, NodeState::Ready);
                self.power = Power::On;
            }
            (OpKind::Startup, Outcome::Failed | Outcome::Timeout) => {
                assert_eq!(to, NodeState::Shutdown);
                let reason = match outcome {
                    Outcome::Failed => Reason::StartupJobFailed,
                    _ => Reason::StartupJobTimeout,
                };
                if let Some(c) = claim.filter(|c| c.phase == Phase::Booting) {
                    self.apply(&c.name, Move::because(Phase::Failed, reason));
                }
            }
            (OpKind::Shutdown, Outcome::Completed) => {
                assert_eq!(to, NodeState::Shutdown);
                // A shutdown that succeeded is not a machine that is off: only one that lands is.
                if lands {
                    self.power = Power::Off;
                    self.usable = false;
                }
            }
            (OpKind::Shutdown, Outcome::Failed | Outcome::Timeout) => {
                assert_eq!(to, NodeState::Ready);
                if let (Outcome::Timeout, Some(c)) = (outcome, claim.filter(|c| c.phase.is_live()))
                {
                    self.write(c.warn(Reason::ShutdownJobTimeout));
                }
            }
        }
    }

    fn scale_down(&mut self) {
        let Some(c) = self.live().first().map(|c| (*c).clone()) else {
            return;
        };
        match cancellation(c.phase) {
            Cancellation::Delete => self.claims.retain(|x| x.name != c.name),
            Cancellation::Reverse => {
                if let Ok(next) = c.mark_for_deletion(Reason::NodeDeleted) {
                    self.write(next);
                }
            }
            Cancellation::Nothing => {}
        }
    }

    fn check(&self, after_pass: bool) {
        if after_pass {
            assert!(
                self.live().len() <= 1,
                "two live claims on one slot after a pass"
            );
        }
        for c in &self.claims {
            if c.is(ConditionKind::MachineCommitted) {
                assert!(
                    c.attempt <= self.timings.max_attempts,
                    "a machine was bought past the bound"
                );
            }
            if c.phase == Phase::Ready {
                assert_eq!(c.deadline_at, None, "a ready claim has no deadline");
            }
            assert_eq!(
                c.phase.is_terminal(),
                c.finished_at.is_some(),
                "finished exactly when terminal"
            );
        }
        assert!(self.history.recent_transitions().count() <= RING_LEN);
        assert!(self.history.recent_activations().count() <= LEDGER_LEN);
    }

    fn run(&mut self, a: &Action) {
        match a {
            Action::Create => {
                if self.live().is_empty() {
                    self.create();
                }
            }
            Action::CreateUnchecked => self.create(),
            Action::Observe { on, usable } => {
                self.power = if *on { Power::On } else { Power::Off };
                self.usable = *on && *usable;
            }
            Action::Pass => {
                self.pass();
                // Re-applying the same observation changes nothing.
                let claims = self.claims.clone();
                let (op, history) = (self.op.clone(), self.history.clone());
                self.pass();
                assert_eq!(
                    self.claims, claims,
                    "a second pass over the same observation moved a claim"
                );
                assert_eq!(
                    (&self.op, &self.history),
                    (&op, &history),
                    "a second pass changed the slot"
                );
            }
            Action::OpDone { outcome, lands } => self.op_done(*outcome, *lands),
            Action::Advance(s) => self.now += i64::from(*s),
            Action::ScaleDown => self.scale_down(),
        }
        self.check(matches!(a, Action::Pass));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    // Claims made through the atomic create only: never two live claims, at any step.
    #[test]
    fn no_sequence_breaks_an_invariant_of_the_claim_model(actions in proptest::collection::vec(action(), 1..120)) {
        let mut slot = Slot::new();
        for a in actions.iter().filter(|a| !matches!(a, Action::CreateUnchecked)) {
            slot.run(a);
            prop_assert!(slot.live().len() <= 1, "two live claims after {a:?}");
        }
    }

    // With claims made around the check as well, supersession leaves one live claim per pass.
    #[test]
    fn claims_made_around_the_check_are_superseded_by_the_next_pass(actions in proptest::collection::vec(action(), 1..120)) {
        let mut slot = Slot::new();
        for a in &actions {
            slot.run(a);
        }
    }
}

// A slot whose startup keeps failing spends exactly its three attempts, then the fourth claim
// fails AttemptLimitExceeded with no machine bought; a success resets the count.
#[test]
fn a_failing_slot_spends_three_attempts_and_buys_no_fourth_machine() {
    let mut slot = Slot::new();
    let mut bought = Vec::new();
    for _ in 0..4 {
        slot.run(&Action::Create);
        slot.run(&Action::Pass);
        if let Some(op) = &slot.op {
            bought.push(
                slot.claims
                    .iter()
                    .find(|c| Some(&c.name) == op.claim.as_ref())
                    .unwrap()
                    .attempt,
            );
        }
        slot.run(&Action::OpDone {
            outcome: Outcome::Failed,
            lands: false,
        });
        slot.run(&Action::Pass);
    }
    assert_eq!(bought, [1, 2, 3]);
    let last = slot.last.clone().unwrap();
    assert_eq!(
        (last.attempt, last.reason),
        (4, Some(Reason::AttemptLimitExceeded))
    );
    // A claim that produces a machine ends the streak.
    let mut slot = Slot::new();
    slot.run(&Action::Create);
    slot.run(&Action::Pass);
    slot.run(&Action::OpDone {
        outcome: Outcome::Failed,
        lands: false,
    });
    slot.run(&Action::Pass);
    slot.run(&Action::Create);
    slot.run(&Action::Pass);
    slot.run(&Action::OpDone {
        outcome: Outcome::Completed,
        lands: false,
    });
    slot.run(&Action::Observe {
        on: true,
        usable: true,
    });
    slot.run(&Action::Pass);
    let ready = slot.live()[0].clone();
    assert_eq!((ready.phase, ready.attempt), (Phase::Ready, 2));
    slot.run(&Action::ScaleDown);
    slot.run(&Action::Pass);
    slot.run(&Action::OpDone {
        outcome: Outcome::Completed,
        lands: true,
    });
    slot.run(&Action::Pass);
    slot.run(&Action::Create);
    assert_eq!(slot.live()[0].attempt, 1);
}

// A no-op shutdown script: the attempts are counted per operation, firing stops after the
// bound, and resumes after the reset grace.
#[test]
fn a_shutdown_that_never_lands_stops_firing_after_the_bound_and_resumes_after_the_grace() {
    let mut slot = Slot::new();
    slot.run(&Action::Create);
    slot.run(&Action::Pass);
    slot.run(&Action::OpDone {
        outcome: Outcome::Completed,
        lands: false,
    });
    slot.run(&Action::Observe {
        on: true,
        usable: true,
    });
    slot.run(&Action::Pass);
    slot.run(&Action::ScaleDown);
    let mut fired = 0;
    for _ in 0..6 {
        slot.run(&Action::Pass);
        if slot.op.is_some() {
            fired += 1;
        }
        slot.run(&Action::OpDone {
            outcome: Outcome::Completed,
            lands: false,
        });
        slot.run(&Action::Advance(60));
    }
    assert_eq!(fired, 3, "three shutdowns, then the streak is spent");
    slot.run(&Action::Advance(
        Duration::from_secs(30 * 60).as_secs() as u32
    ));
    slot.run(&Action::Pass);
    assert!(
        slot.op.is_some(),
        "the shutdown fires again after the grace"
    );
    slot.run(&Action::OpDone {
        outcome: Outcome::Completed,
        lands: true,
    });
    slot.run(&Action::Pass);
    let done = slot
        .claims
        .iter()
        .find(|c| c.phase == Phase::Completed)
        .unwrap();
    assert_eq!(done.reason, Some(Reason::NodeDeleted));
    assert_eq!(done.shutdown_attempts, 1);
}
