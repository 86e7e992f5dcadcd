//! The slot's operation record (SPEC §4.3, §5.4): the last lifecycle operation fired on a slot,
//! as the controller recorded it before running it, with its outcome once reported and, for a
//! shutdown, when the machine was first observed off after it.
//!
//! It is the controller's own memory of what it told the machine, never a report: it outlives the
//! claim it served, a claim write that was lost, and the process that fired it. The rules that
//! read it are here: whether the slot's machine is on its way down, whether an operation may
//! still report, whether a startup was already fired for a claim's attempt, and the bound on
//! shutdowns of a machine no claim wants. Pure: no I/O, no clock.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::claim::{Claim, OperationKind, OperationOutcome, Timings, add};
use super::name::ClaimName;

/// How much longer than an operation's own timeout the controller waits for the wrapper's
/// report: the wrapper kills the command at the timeout, then has this long to drain its output
/// and report the outcome to the store (it retries a store it cannot reach within it). An
/// operation's timeout plus this slack stays below `stuck_threshold` (SPEC §3.5, §4.2).
pub const REPORT_SLACK: Duration = Duration::from_secs(30);

/// The last operation fired on a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotOp {
    pub kind: OperationKind,
    /// The claim it served; `None` for a shutdown of a machine no claim wants.
    pub claim: Option<ClaimName>,
    /// The claim's attempt (0 without a claim).
    pub attempt: u32,
    /// When it was recorded as started (server time): its identity.
    pub started_at: DateTime<Utc>,
    /// Its own timeout: the wrapper kills it there.
    pub timeout: Duration,
    /// The controller that fired it (its lease holder id).
    pub controller: String,
    /// For a shutdown of a machine no claim wants: how many such shutdowns in a row, this one
    /// included (the bound of SPEC §4.9 3). 0 otherwise.
    pub streak: u32,
    /// How it ended, once reported.
    pub end: Option<OpEnd>,
    /// For a shutdown: when the machine was first observed off after it started.
    pub off_at: Option<DateTime<Utc>>,
}

/// How an operation ended, as its wrapper (or the controller that ran it) reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpEnd {
    pub outcome: OperationOutcome,
    pub finished_at: DateTime<Utc>,
    pub duration_ms: u64,
    /// The tail of its output.
    pub tail: String,
}

/// What the bound on shutdowns of a machine no claim wants allows now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnclaimedShutdown {
    /// Fire one, the `streak`-th in a row.
    Fire { streak: u32 },
    /// The last one has not had time to take effect: one operation timeout plus one monitor poll
    /// after it started.
    Settling,
    /// The streak is spent until the reset grace after the last one.
    Paused { until: DateTime<Utc> },
}

impl SlotOp {
    /// Whether the operation is still running: no outcome reported yet.
    pub fn running(&self) -> bool {
        self.end.is_none()
    }

    /// Whether the slot's machine is on its way down at `now` (SPEC §4.5): the last operation
    /// fired on it is a shutdown, the machine has not been observed off since, and the shutdown
    /// may still be taking effect. A power-off command returns before the machine goes dark (a
    /// BMC soft-off, an OS shutting down), so a machine that still reads on is not capacity: no
    /// claim may take it as it is, and it is offered to no request. A shutdown whose command
    /// failed said it did not power anything off. One that left the machine on for its whole
    /// timeout plus `settle` (one monitor poll) did not take: the machine is not going down, and
    /// is claimable again as it is (a no-op shutdown script must not lock a slot forever).
    pub fn going_down(&self, now: DateTime<Utc>, settle: Duration) -> bool {
        self.kind == OperationKind::Shutdown
            && self.off_at.is_none()
            && self
                .end
                .as_ref()
                .is_none_or(|e| e.outcome != OperationOutcome::Failed)
            && now < add(self.started_at, self.timeout + settle)
    }

    /// Whether a running operation's outcome can no longer come: past its timeout (where its
    /// wrapper kills it) and the time the wrapper has to report.
    pub fn report_overdue(&self, now: DateTime<Utc>, slack: Duration) -> bool {
        self.running() && now >= add(self.started_at, self.timeout + slack)
    }

    /// Whether this is the startup fired for `claim`'s attempt: a startup is fired once per
    /// claim attempt, whatever the claim's own record says now.
    pub fn started(&self, claim: &Claim) -> bool {
        self.kind == OperationKind::Startup
            && self.claim.as_ref() == Some(&claim.name)
            && self.attempt == claim.attempt
    }

    /// The record a claim keeps of its own operation, as a slot record: what the slot's record
    /// must at least say (a store written before slot records existed has only the claim's).
    pub fn of_claim(claim: &Claim) -> Option<SlotOp> {
        let op = claim.operation.as_ref()?;
        // The record keeps milliseconds (`stamp`): a claim's record from before slot records
        // existed kept microseconds, and must name the same operation.
        Some(SlotOp {
            kind: op.kind,
            claim: Some(claim.name.clone()),
            attempt: claim.attempt,
            started_at: stamp(op.started_at),
            timeout: op.timeout,
            controller: String::new(),
            streak: 0,
            end: op.outcome.map(|outcome| {
                let finished_at = op.finished_at.unwrap_or(op.started_at);
                OpEnd {
                    outcome,
                    finished_at,
                    duration_ms: (finished_at - op.started_at)
                        .num_milliseconds()
                        .max(0)
                        .unsigned_abs(),
                    tail: String::new(),
                }
            }),
            off_at: None,
        })
    }
}

/// The slot's record from its witnesses (the store's record, the controller's memory, the claims'
/// own records): the newest operation wins, and what one witness knows of it (its outcome, the
/// machine observed off) fills what another lacks. A record the store lost (a restart that
/// dropped its last writes) survives in the others.
pub fn merge<'a>(witnesses: impl IntoIterator<Item = &'a SlotOp>) -> Option<SlotOp> {
    let witnesses: Vec<&SlotOp> = witnesses.into_iter().collect();
    let newest = witnesses.iter().map(|w| w.started_at).max()?;
    let same: Vec<&&SlotOp> = witnesses
        .iter()
        .filter(|w| w.started_at == newest)
        .collect();
    let mut merged = (*same[0]).clone();
    for w in &same[1..] {
        if merged.end.is_none() {
            merged.end.clone_from(&w.end);
        }
        if merged.off_at.is_none() {
            merged.off_at = w.off_at;
        }
        if merged.controller.is_empty() {
            merged.controller.clone_from(&w.controller);
        }
        merged.streak = merged.streak.max(w.streak);
    }
    Some(merged)
}

/// An operation's start time as its record keeps it: the server's time to the millisecond, the
/// precision the store's scripts compare.
pub fn stamp(now: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
}

/// How an operation that no process of this controller runs, and whose outcome was not reported,
/// is settled (SPEC §5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreported {
    /// Its wrapper may still report it: it stays in flight, whatever the machine reads.
    InFlight,
    /// Its report can no longer come and the observation says it did its work.
    Done(&'static str),
    /// Its report can no longer come and a late boot or power-off may still show: wait, until the
    /// stuck threshold.
    Late,
    /// Past the stuck threshold with nothing to show: abandoned (the seed's ForceCleanup; its
    /// claim fails StuckTransition).
    Abandoned,
}

/// Settles an unreported operation: in flight until its timeout and the report `slack` passed
/// (its wrapper kills it at the timeout and has the slack to report); then done when the machine
/// shows it (a startup's machine on, a shutdown's off); then abandoned at `stuck_threshold` from
/// its start.
pub fn unreported(
    op: &SlotOp,
    on: Option<bool>,
    now: DateTime<Utc>,
    slack: Duration,
    stuck_threshold: Duration,
) -> Unreported {
    if !op.report_overdue(now, slack) {
        return Unreported::InFlight;
    }
    match (op.kind, on) {
        (OperationKind::Startup, Some(true)) => Unreported::Done(
            "its outcome was never reported; the machine is on: the readiness gate judges it",
        ),
        (OperationKind::Shutdown, Some(false)) => {
            Unreported::Done("its outcome was never reported; the machine is off")
        }
        _ if now < add(op.started_at, stuck_threshold) => Unreported::Late,
        _ => Unreported::Abandoned,
    }
}

/// The bound on shutdowns of a machine no claim wants (law rows 2 and 11, SPEC §4.9 3): they are
/// counted on the slot's operation record like a claim's, spaced by one operation timeout plus
/// one monitor poll after any shutdown (a scale-down's included: its power-off may still be taking
/// effect), paused after `max_attempts` in a row until `shutdown_attempt_reset_grace` after the
/// last. Any other operation since ends the streak.
pub fn unclaimed_shutdown(
    last: Option<&SlotOp>,
    now: DateTime<Utc>,
    timings: &Timings,
    shutdown_timeout: Duration,
) -> UnclaimedShutdown {
    let Some(last) = last.filter(|op| op.kind == OperationKind::Shutdown) else {
        return UnclaimedShutdown::Fire { streak: 1 };
    };
    let settled = add(
        last.started_at,
        shutdown_timeout.max(last.timeout) + timings.job_monitor_poll_interval,
    );
    if now < settled {
        return UnclaimedShutdown::Settling;
    }
    if last.claim.is_some() {
        return UnclaimedShutdown::Fire { streak: 1 };
    }
    let reset = add(last.started_at, timings.shutdown_attempt_reset_grace);
    if now >= reset {
        return UnclaimedShutdown::Fire { streak: 1 };
    }
    if last.streak >= timings.max_attempts {
        return UnclaimedShutdown::Paused { until: reset };
    }
    UnclaimedShutdown::Fire {
        streak: last.streak + 1,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;
    use crate::domain::name::{BenchName, GroupName};

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn op(kind: OperationKind, claim: Option<&str>) -> SlotOp {
        SlotOp {
            kind,
            claim: claim.map(|c| ClaimName::parse(c).unwrap()),
            attempt: 1,
            started_at: t0(),
            timeout: Duration::from_secs(60),
            controller: "ctl".into(),
            streak: u32::from(claim.is_none()),
            end: None,
            off_at: None,
        }
    }

    fn ended(mut o: SlotOp, outcome: OperationOutcome) -> SlotOp {
        o.end = Some(OpEnd {
            outcome,
            finished_at: t0() + TimeDelta::seconds(1),
            duration_ms: 1000,
            tail: String::new(),
        });
        o
    }

    // Every combination of kind, outcome, observation and time.
    #[test]
    fn a_machine_is_going_down_after_a_shutdown_until_seen_off_or_the_shutdown_did_not_take() {
        use OperationOutcome::*;
        let settle = Duration::from_secs(30);
        for kind in [OperationKind::Startup, OperationKind::Shutdown] {
            for outcome in [None, Some(Completed), Some(Failed), Some(TimedOut)] {
                for off in [false, true] {
                    // The shutdown's timeout is 60 s: it may take effect until 90 s.
                    for (at, in_window) in [(0, true), (89, true), (90, false)] {
                        let mut o = op(kind, None);
                        if let Some(outcome) = outcome {
                            o = ended(o, outcome);
                        }
                        o.off_at = off.then(t0);
                        let want = kind == OperationKind::Shutdown
                            && !off
                            && outcome != Some(Failed)
                            && in_window;
                        let now = t0() + TimeDelta::seconds(at);
                        assert_eq!(
                            o.going_down(now, settle),
                            want,
                            "{kind:?} {outcome:?} off={off} at {at}s"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_outcome_is_overdue_past_the_timeout_and_the_report_slack() {
        let o = op(OperationKind::Startup, Some("bench-01-1"));
        let slack = Duration::from_secs(30);
        assert!(!o.report_overdue(t0() + TimeDelta::seconds(89), slack));
        assert!(o.report_overdue(t0() + TimeDelta::seconds(90), slack));
        let done = ended(o, OperationOutcome::Completed);
        assert!(!done.report_overdue(t0() + TimeDelta::days(1), slack));
    }

    // Every kind, observation (on, off, blind) and time against the report slack and the stuck
    // threshold.
    #[test]
    fn an_unreported_operation_is_in_flight_then_done_late_or_abandoned() {
        let slack = Duration::from_secs(30);
        let stuck = Duration::from_secs(900);
        for kind in [OperationKind::Startup, OperationKind::Shutdown] {
            for on in [Some(true), Some(false), None] {
                for (at, phase) in [(89, 0), (90, 1), (899, 1), (900, 2)] {
                    let o = op(kind, Some("bench-01-1"));
                    let got = unreported(&o, on, t0() + TimeDelta::seconds(at), slack, stuck);
                    let shows = match kind {
                        OperationKind::Startup => on == Some(true),
                        OperationKind::Shutdown => on == Some(false),
                    };
                    let want = match (phase, shows) {
                        (0, _) => "in flight",
                        (_, true) => "done",
                        (1, false) => "late",
                        _ => "abandoned",
                    };
                    let name = match got {
                        Unreported::InFlight => "in flight",
                        Unreported::Done(_) => "done",
                        Unreported::Late => "late",
                        Unreported::Abandoned => "abandoned",
                    };
                    assert_eq!(name, want, "{kind:?} on={on:?} at {at}s");
                }
            }
        }
        let reported = ended(
            op(OperationKind::Startup, None),
            OperationOutcome::Completed,
        );
        assert_eq!(
            unreported(&reported, None, t0() + TimeDelta::days(1), slack, stuck),
            Unreported::InFlight,
            "a reported operation is never judged again"
        );
    }

    #[test]
    fn a_startup_is_known_fired_for_its_claim_and_attempt_only() {
        let t = Timings::default();
        let name = |n: &str| ClaimName::parse(n).unwrap();
        let mut c = Claim::new(
            name("bench-01-1"),
            BenchName::parse("bench-01").unwrap(),
            GroupName::parse("pool-a").unwrap(),
            None,
            t0(),
            &t,
            None,
        );
        let o = op(OperationKind::Startup, Some("bench-01-1"));
        assert!(o.started(&c));
        c.attempt = 2;
        assert!(!o.started(&c), "another attempt");
        c.attempt = 1;
        c.name = name("bench-01-2");
        assert!(!o.started(&c), "another claim");
        let shutdown = op(OperationKind::Shutdown, Some("bench-01-2"));
        assert!(!shutdown.started(&c), "a shutdown is no startup");
    }

    #[test]
    fn the_newest_record_wins_and_witnesses_of_it_fill_in_what_it_lacks() {
        let a = op(OperationKind::Startup, Some("bench-01-1"));
        let mut b = op(OperationKind::Shutdown, None);
        b.started_at = t0() + TimeDelta::seconds(5);
        assert_eq!(merge([&a, &b]), Some(b.clone()));
        assert_eq!(merge([&b, &a]), Some(b.clone()));
        assert_eq!(merge([&a]), Some(a.clone()));
        assert_eq!(merge([]), None);
        // The store's record without its outcome, memory's with it and the machine seen off.
        let mut known = ended(b.clone(), OperationOutcome::Completed);
        known.off_at = Some(t0() + TimeDelta::seconds(9));
        known.controller = String::new();
        let merged = merge([&b, &known, &a]).unwrap();
        assert_eq!(merged.end, known.end);
        assert_eq!(merged.off_at, known.off_at);
        assert_eq!(merged.controller, "ctl");
    }

    #[test]
    fn a_claims_own_record_is_a_witness() {
        let t = Timings::default();
        let c = Claim::new(
            ClaimName::parse("bench-01-1").unwrap(),
            BenchName::parse("bench-01").unwrap(),
            GroupName::parse("pool-a").unwrap(),
            None,
            t0(),
            &t,
            None,
        );
        assert_eq!(SlotOp::of_claim(&c), None);
        let started = c.start_operation(OperationKind::Startup, Duration::from_secs(60), t0());
        let o = SlotOp::of_claim(&started).unwrap();
        assert!(o.started(&started) && o.running());
        // A record from before slot records existed names the same operation as its slot's.
        let micros = c.start_operation(
            OperationKind::Startup,
            Duration::from_secs(60),
            t0() + TimeDelta::microseconds(1_500),
        );
        assert_eq!(
            SlotOp::of_claim(&micros).unwrap().started_at,
            t0() + TimeDelta::milliseconds(1)
        );
        let done = started
            .finish_operation(OperationOutcome::Failed, t0() + TimeDelta::seconds(2))
            .unwrap();
        let o = SlotOp::of_claim(&done).unwrap();
        assert_eq!(
            o.end.map(|e| (e.outcome, e.duration_ms)),
            Some((OperationOutcome::Failed, 2000))
        );
    }

    #[test]
    fn a_stamp_keeps_milliseconds() {
        let t = t0() + TimeDelta::microseconds(1_234_567);
        assert_eq!(
            stamp(t).timestamp_micros(),
            t0().timestamp_micros() + 1_234_000
        );
    }

    #[test]
    fn unclaimed_shutdowns_settle_count_pause_and_reset() {
        let t = Timings {
            job_monitor_poll_interval: Duration::from_secs(30),
            shutdown_attempt_reset_grace: Duration::from_secs(1800),
            max_attempts: 3,
            ..Timings::default()
        };
        let timeout = Duration::from_secs(60);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        assert_eq!(
            unclaimed_shutdown(None, at(0), &t, timeout),
            UnclaimedShutdown::Fire { streak: 1 }
        );
        // A scale-down's shutdown last: it settles too, then no unclaimed streak.
        let claimed = op(OperationKind::Shutdown, Some("bench-01-1"));
        assert_eq!(
            unclaimed_shutdown(Some(&claimed), at(0), &t, timeout),
            UnclaimedShutdown::Settling
        );
        assert_eq!(
            unclaimed_shutdown(Some(&claimed), at(90), &t, timeout),
            UnclaimedShutdown::Fire { streak: 1 }
        );
        let startup = op(OperationKind::Startup, Some("bench-01-1"));
        assert_eq!(
            unclaimed_shutdown(Some(&startup), at(0), &t, timeout),
            UnclaimedShutdown::Fire { streak: 1 }
        );
        let mut last = op(OperationKind::Shutdown, None);
        assert_eq!(
            unclaimed_shutdown(Some(&last), at(89), &t, timeout),
            UnclaimedShutdown::Settling
        );
        assert_eq!(
            unclaimed_shutdown(Some(&last), at(90), &t, timeout),
            UnclaimedShutdown::Fire { streak: 2 }
        );
        last.streak = 3;
        assert_eq!(
            unclaimed_shutdown(Some(&last), at(90), &t, timeout),
            UnclaimedShutdown::Paused { until: at(1800) }
        );
        assert_eq!(
            unclaimed_shutdown(Some(&last), at(1800), &t, timeout),
            UnclaimedShutdown::Fire { streak: 1 }
        );
    }
}
