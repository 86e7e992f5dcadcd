//! The planner's Node steps as tables (SPEC §3.12): fleet's cordon taint around a shutdown, the
//! gate's release before the ready write, the provider ID, and a stale Node's deletion.

use super::*;
use crate::domain::node::{self, Effect};

fn taint(s: &str) -> Taint {
    s.parse().unwrap()
}

fn node_view(ready: bool, taints: &[&str], provider_id: Option<&str>) -> NodeView {
    NodeView {
        name: "node-01".into(),
        uid: "uid-1".into(),
        resource_version: "41".into(),
        provider_id: provider_id.map(str::to_owned),
        ready,
        unschedulable: false,
        taints: taints.iter().map(|t| taint(t)).collect(),
    }
}

fn bound(seen: Seen, kind: &str, node: NodeView) -> Case {
    let mut case = Case::new(seen, claims_of(kind));
    case.node = Some(node);
    case
}

/// The Node writes of a plan, and whether each must land.
fn node_writes(p: &Plan) -> Vec<(NodeAction, bool)> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Node(w) => {
                assert_eq!(
                    (w.uid.as_str(), w.resource_version.as_str()),
                    ("uid-1", "41")
                );
                Some((w.action.clone(), w.must_land))
            }
            _ => None,
        })
        .collect()
}

fn kinds(p: &Plan) -> Vec<&'static str> {
    p.steps
        .iter()
        .map(|s| match s {
            Step::Record(_) | Step::RecordUnclaimed(_) => "record",
            Step::Cordon { .. } => "cordon",
            Step::Node(_) => "node",
            Step::Spawn { .. } => "spawn",
            Step::Write(_) => "write",
            _ => "other",
        })
        .collect()
}

const PID: Option<&str> = Some("fleet://bench-01");

// A shutdown records first (the fenced write), then cordons the bench and taints the Node, then
// runs: the taint is best effort, so a refused one never leaves a recorded shutdown unrun.
#[test]
fn a_shutdown_taints_the_node_after_its_record_and_before_it_runs() {
    for kind in ["marked", "none"] {
        let p = bound(Seen::Up, kind, node_view(true, &[], PID)).plan(t(10));
        assert_eq!(kinds(&p), ["record", "cordon", "node", "spawn"], "{kind}");
        assert_eq!(
            node_writes(&p),
            [(
                NodeAction::Taints(TaintEdit {
                    remove: vec![],
                    add: vec![node::fleet_cordon()],
                }),
                false
            )]
        );
    }
    // While the shutdown is on its way, a Node without the taint (a refused write) gets it
    // again; one that carries it gets nothing.
    let mut going = bound(Seen::Up, "none", node_view(true, &[], PID));
    going.here.running = Some(OperationKind::Shutdown);
    assert_eq!(node_writes(&going.plan(t(10))).len(), 1);
    let mut done = bound(
        Seen::Up,
        "none",
        node_view(true, &["fleet.dev/draining:NoSchedule"], PID),
    );
    done.here.running = Some(OperationKind::Shutdown);
    assert_eq!(node_writes(&done.plan(t(10))), []);
}

// The gate's end: with fleet's cordon and CA's leftovers on an otherwise usable Node, the gate is
// satisfied, the release (which must land) comes first and stamps the group's taints, then the
// ready write.
#[test]
fn the_gate_releases_the_node_before_the_claim_reads_ready() {
    let leftovers = [
        "fleet.dev/draining:NoSchedule",
        "ToBeDeletedByClusterAutoscaler=1700000000:NoSchedule",
        "other:NoSchedule",
    ];
    let mut case = bound(Seen::Up, "booting", node_view(true, &leftovers, PID));
    case.node_taints = vec![taint("gpu=a:NoSchedule")];
    let p = case.plan(t(5));
    assert_eq!(kinds(&p), ["node", "write"]);
    let [(NodeAction::Taints(edit), true)] = &node_writes(&p)[..] else {
        panic!("{:#?}", p.steps)
    };
    assert_eq!(
        edit.apply(&case.node.as_ref().unwrap().taints),
        vec![taint("other:NoSchedule"), taint("gpu=a:NoSchedule")]
    );
    let Some(Step::Write(w)) = p.steps.last() else {
        unreachable!()
    };
    assert_eq!(w.next.phase, Phase::Ready);
    assert!(
        p.status.as_ref().is_some_and(|s| s.usable),
        "reported usable"
    );

    // A Node already released: the ready write alone.
    let mut clean = bound(
        Seen::Up,
        "booting",
        node_view(true, &["gpu=a:NoSchedule"], PID),
    );
    clean.node_taints = vec![taint("gpu=a:NoSchedule")];
    assert_eq!(kinds(&clean.plan(t(5))), ["write"]);

    // Not Ready, or a readiness taint: no release, no ready write.
    for node in [
        node_view(false, &["fleet.dev/draining:NoSchedule"], PID),
        node_view(true, &["node.cilium.io/agent-not-ready:NoExecute"], PID),
    ] {
        let mut c = bound(Seen::Up, "booting", node);
        c.node_taints = vec![];
        let mut with_gate = c;
        let gated = [taint("node.cilium.io/agent-not-ready:NoExecute")];
        let p = plan_with_readiness(&mut with_gate, &gated, t(5));
        assert!(
            !p.steps
                .iter()
                .any(|s| matches!(s, Step::Write(w) if w.next.phase == Phase::Ready)),
            "{:#?}",
            p.steps
        );
        assert!(
            !node_writes(&p)
                .iter()
                .any(|(a, _)| matches!(a, NodeAction::Taints(_))),
            "nothing released before the gate is satisfied"
        );
    }
}

fn plan_with_readiness(case: &mut Case, readiness: &[Taint], now: DateTime<Utc>) -> Plan {
    let (g, s) = (group(), slot());
    plan(
        View {
            group: &g,
            slot: &s,
            timings: &case.timings,
            startup_timeout: Duration::from_secs(300),
            shutdown_timeout: Duration::from_secs(120),
            readiness_taints: readiness,
            node_taints: &case.node_taints,
            provider_id: "fleet://bench-01",
            binding: Binding::Bound(case.node.as_ref()),
            off_since: case.off_since,
            may_start: case.may_start,
            bench: case.bench.as_ref(),
            blind: case.blind,
            unreadable: case.unreadable,
            adopting: case.adopting,
            acting: case.acting,
            claims: case.claims.clone(),
            stored_op: case.stored_op.clone(),
            remembered_op: None,
            elsewhere_op: case.elsewhere_op.clone(),
            here: case.here.clone(),
            report_slack: Duration::from_secs(30),
            holder: "me",
            status: &case.status,
        },
        now,
    )
}

// The gate runs out: fleet's cordon comes off anyway (best effort), and the claim fails.
#[test]
fn a_gate_that_runs_out_lifts_fleets_cordon_and_fails_the_claim() {
    let case = bound(
        Seen::Up,
        "booting",
        node_view(
            false,
            &["fleet.dev/draining:NoSchedule", "x:NoExecute"],
            PID,
        ),
    );
    // Heard at once (UP), not usable: the second budget runs from the first beat.
    let heard = case.plan(t(5));
    let Some(Step::Write(w)) = heard.steps.first() else {
        panic!("{:#?}", heard.steps)
    };
    let mut later = bound(
        Seen::Up,
        "booting",
        node_view(
            false,
            &["fleet.dev/draining:NoSchedule", "x:NoExecute"],
            PID,
        ),
    );
    later.claims = vec![w.next.clone()];
    // Both budgets run from the startup's end at t(2): 90 s to be heard, 240 s to be usable.
    let p = later.plan(t(2 + 90 + 240));
    // The failed claim's machine is shut down in the same pass: one Node write per pass, so the
    // shutdown's taint waits for the next pass (which retries it while the shutdown runs).
    assert_eq!(
        kinds(&p),
        ["node", "write", "record", "cordon", "spawn"],
        "{:#?}",
        p.steps
    );
    assert_eq!(
        node_writes(&p),
        [(
            NodeAction::Taints(TaintEdit {
                remove: vec![taint("fleet.dev/draining:NoSchedule")],
                add: vec![],
            }),
            false
        )]
    );
    let Step::Write(w) = &p.steps[1] else {
        unreachable!()
    };
    assert_eq!(w.next.reason, Some(Reason::ReadinessGateTimeout));
}

// An empty providerID is filled with the slot's; another value is left alone and said.
#[test]
fn the_provider_id_is_filled_when_empty_and_never_overwritten() {
    let p = bound(Seen::Up, "ready", node_view(true, &[], None)).plan(t(10));
    assert_eq!(
        node_writes(&p),
        [(NodeAction::ProviderId("fleet://bench-01".into()), false)]
    );
    let p = bound(Seen::Up, "ready", node_view(true, &[], Some("aws:///x"))).plan(t(10));
    assert_eq!(node_writes(&p), []);
    assert!(p.steps.contains(&Step::ProviderIdMismatch {
        node: "node-01".into(),
        found: "aws:///x".into()
    }));
    assert_eq!(
        node_writes(&bound(Seen::Up, "ready", node_view(true, &[], PID)).plan(t(10))),
        []
    );
    // A follower, or a blind controller, writes nothing.
    let mut follower = bound(Seen::Up, "ready", node_view(true, &[], None));
    follower.acting = false;
    assert_eq!(node_writes(&follower.plan(t(10))), []);
    let mut blind = bound(Seen::Up, "ready", node_view(true, &[], None));
    blind.blind = true;
    assert_eq!(node_writes(&blind.plan(t(10))), []);
}

// SPEC §3.12 6: a stale Node is deleted only when every condition holds; each one alone keeps it.
#[test]
fn a_stale_node_is_deleted_only_when_every_condition_holds() {
    let after = Duration::from_secs(600);
    let stale = || {
        let mut c = bound(Seen::Down, "terminal", node_view(false, &[], PID));
        c.timings.delete_stale_node_after = Some(after);
        c.off_since = Some(t(0));
        c
    };
    let deletes = |c: Case, now| {
        node_writes(&c.plan(now))
            .iter()
            .any(|(a, _)| *a == NodeAction::Delete)
    };
    assert!(deletes(stale(), t(600)), "every condition holds");
    assert!(!deletes(stale(), t(599)), "off for less than the wait");
    let mut c = stale();
    c.timings.delete_stale_node_after = None;
    assert!(!deletes(c, t(600)), "not opted into");
    let mut c = stale();
    c.off_since = None;
    assert!(!deletes(c, t(600)), "never seen off by this controller");
    let mut c = stale();
    c.node = Some(node_view(true, &[], PID));
    assert!(!deletes(c, t(600)), "the Node is Ready");
    let mut c = stale();
    c.node = Some(node_view(false, &[], Some("other://x")));
    assert!(!deletes(c, t(600)), "another provider ID");
    let mut c = stale();
    c.blind = true;
    assert!(!deletes(c, t(600)), "blind");
    let mut c = stale();
    c.unreadable = true;
    assert!(!deletes(c, t(600)), "a claim cannot be read");
    let mut c = stale();
    c.acting = false;
    assert!(!deletes(c, t(600)), "not the leader");
    let mut c = stale();
    c.here.running = Some(OperationKind::Startup);
    assert!(!deletes(c, t(600)), "an operation in flight");
    let mut c = stale();
    c.claims = claims_of("pending");
    assert!(!deletes(c, t(600)), "a claim wants the slot");
    let mut c = stale();
    c.bench = bench(Seen::Up, None);
    assert!(!deletes(c, t(600)), "the machine is on");
}

#[test]
fn fleets_cordon_taint_is_a_no_schedule_taint() {
    assert_eq!(node::fleet_cordon().effect, Effect::NoSchedule);
    assert_eq!(
        node::fleet_cordon().to_string(),
        "fleet.dev/draining:NoSchedule"
    );
}

// A cordon refused while the machine goes down (its shutdown recorded, not yet observed off) is
// added again by the next pass: found by the scripted API-server scenario.
#[test]
fn a_refused_cordon_is_retried_while_the_machine_goes_down() {
    let mut c = bound(Seen::Up, "none", node_view(true, &[], PID));
    c.stored_op = Some(SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: t(5),
        timeout: Duration::from_secs(120),
        controller: "me".to_owned(),
        streak: 1,
        end: Some(operation::OpEnd {
            outcome: OperationOutcome::Completed,
            finished_at: t(6),
            duration_ms: 1000,
            tail: String::new(),
        }),
        off_at: None,
    });
    let p = c.plan(t(7));
    assert_eq!(
        node_writes(&p),
        [(
            NodeAction::Taints(TaintEdit {
                remove: vec![],
                add: vec![node::fleet_cordon()],
            }),
            false
        )],
        "{:#?}",
        p.steps
    );
}

// At most one Node write a pass, over every claim column, presence, Node and whether the
// controller acts: each carries the resourceVersion the pass read, so a second would be refused
// by the first one's change. A controller that does not act writes no Node at all.
#[test]
fn one_node_write_a_pass_at_most_and_none_without_acting() {
    let cordon = node::fleet_cordon().to_string();
    for kind in ["none", "pending", "booting", "ready", "marked", "terminal"] {
        for seen in [Seen::Down, Seen::Up, Seen::Held] {
            for (ready, taints) in [(true, vec![]), (false, vec![cordon.as_str()])] {
                for pid in [None, PID, Some("fleet://other")] {
                    for acting in [true, false] {
                        let node = node_view(ready, &taints, pid);
                        let mut case = bound(seen, kind, node);
                        case.acting = acting;
                        let writes = node_writes(&case.plan(t(10)));
                        let at = format!("{kind} {seen:?} ready={ready} {pid:?} acting={acting}");
                        assert!(writes.len() <= 1, "{at}: {writes:?}");
                        assert!(acting || writes.is_empty(), "{at}: {writes:?}");
                    }
                }
            }
        }
    }
}

// fleet's cordon comes off only for a claim that holds the machine: with no claim that wants it,
// a Node left cordoned by fleet keeps its cordon.
#[test]
fn the_cordon_comes_off_only_for_a_claim_that_holds_the_machine() {
    let cordon = node::fleet_cordon().to_string();
    for (kind, lifted) in [("none", false), ("terminal", false), ("ready", true)] {
        let p = bound(Seen::Down, kind, node_view(true, &[&cordon], PID)).plan(t(10));
        let uncordons = node_writes(&p).iter().any(
            |(a, _)| matches!(a, NodeAction::Taints(e) if e.remove.contains(&node::fleet_cordon())),
        );
        assert_eq!(uncordons, lifted, "{kind}: {:?}", node_writes(&p));
    }
}
