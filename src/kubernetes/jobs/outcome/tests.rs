//! A Job's conditions to an outcome, over the whole input space: every list of up to two
//! conditions drawn from every condition type Kubernetes writes (and one it does not), every
//! status (and garbage) and every reason that matters, checked against the table in the module's
//! documentation, each failure named by its row. Then the tail and the duration.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::domain::claim::OperationOutcome;
use crate::lifecycle::TAIL_BYTES;

const TYPES: [&str; 6] = [
    "Complete",
    "Failed",
    "FailureTarget",
    "SuccessCriteriaMet",
    "Suspended",
    "SomethingNew",
];
const STATUSES: [&str; 5] = ["True", "False", "Unknown", "Maybe", ""];
const REASONS: [Option<&str>; 4] = [
    None,
    Some("DeadlineExceeded"),
    Some("BackoffLimitExceeded"),
    Some("PodFailurePolicy"),
];

fn condition(type_: &str, status: &str, reason: Option<&str>) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(Into::into),
        message: reason.map(|r| format!("because {r}")),
        ..JobCondition::default()
    }
}

/// Every condition of the alphabet.
fn alphabet() -> Vec<JobCondition> {
    let mut all = Vec::new();
    for t in TYPES {
        for s in STATUSES {
            for r in REASONS {
                all.push(condition(t, s, r));
            }
        }
    }
    all
}

/// The table's row for a list of conditions, and the outcome it gives (`None`: running),
/// said from the table's own words rather than from the code's summary.
fn row(conditions: &[JobCondition]) -> (&'static str, Option<OperationOutcome>) {
    let decisive = |c: &&JobCondition| c.type_ == "Complete" || c.type_ == "Failed";
    let garbage = conditions
        .iter()
        .filter(decisive)
        .any(|c| !["True", "False", "Unknown"].contains(&c.status.as_str()));
    let complete = conditions
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    let failed: Vec<&JobCondition> = conditions
        .iter()
        .filter(|c| c.type_ == "Failed" && c.status == "True")
        .collect();
    if garbage {
        return ("garbage", Some(OperationOutcome::Failed));
    }
    match (complete, failed.first()) {
        (true, None) => ("Complete", Some(OperationOutcome::Completed)),
        (true, Some(_)) => ("Complete and Failed", Some(OperationOutcome::Failed)),
        (false, Some(f)) if f.reason.as_deref() == Some("DeadlineExceeded") => {
            ("Failed DeadlineExceeded", Some(OperationOutcome::TimedOut))
        }
        (false, Some(_)) => ("Failed, another reason", Some(OperationOutcome::Failed)),
        (false, None) => ("running", None),
    }
}

fn outcome_of(state: &JobState) -> Option<OperationOutcome> {
    match state {
        JobState::Running => None,
        JobState::Finished(f) => Some(f.outcome),
    }
}

#[test]
fn every_list_of_up_to_two_conditions_gives_the_tables_outcome() {
    let all = alphabet();
    let mut lists: Vec<Vec<JobCondition>> = vec![vec![]];
    for a in &all {
        lists.push(vec![a.clone()]);
        for b in &all {
            lists.push(vec![a.clone(), b.clone()]);
        }
    }
    assert_eq!(lists.len(), 1 + 120 + 120 * 120);
    let mut failures = Vec::new();
    let mut rows_seen = std::collections::BTreeSet::new();
    for list in &lists {
        let (name, want) = row(list);
        rows_seen.insert(name);
        let got = state(list);
        if outcome_of(&got) != want {
            failures.push(format!("row {name}: {list:?} gave {got:?}, want {want:?}"));
        }
        if let JobState::Finished(f) = &got
            && f.why.is_empty()
        {
            failures.push(format!("row {name}: {list:?} finished without a reason"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} lists:\n{}",
        failures.len(),
        lists.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    // Every row of the table was reached.
    assert_eq!(
        rows_seen.into_iter().collect::<Vec<_>>(),
        [
            "Complete",
            "Complete and Failed",
            "Failed DeadlineExceeded",
            "Failed, another reason",
            "garbage",
            "running",
        ]
    );
}

#[test]
fn the_rows_of_the_table_say_why() {
    let finished = |list: &[JobCondition]| match state(list) {
        JobState::Finished(f) => f,
        JobState::Running => panic!("{list:?} is running"),
    };
    let c = |t, s, r| condition(t, s, r);
    let f = finished(&[c("Complete", "True", None)]);
    assert_eq!(
        (f.outcome, f.why.as_str()),
        (OperationOutcome::Completed, "Complete (no reason given)")
    );
    let f = finished(&[
        c("FailureTarget", "True", Some("DeadlineExceeded")),
        c("Failed", "True", Some("DeadlineExceeded")),
    ]);
    assert_eq!(
        (f.outcome, f.why.as_str()),
        (
            OperationOutcome::TimedOut,
            "Failed (DeadlineExceeded: because DeadlineExceeded)"
        )
    );
    let f = finished(&[c("Failed", "True", Some("BackoffLimitExceeded"))]);
    assert_eq!(
        (f.outcome, f.why.as_str()),
        (
            OperationOutcome::Failed,
            "Failed (BackoffLimitExceeded: because BackoffLimitExceeded)"
        )
    );
    let f = finished(&[c("Complete", "True", None), c("Failed", "True", None)]);
    assert_eq!(f.outcome, OperationOutcome::Failed);
    assert!(f.why.contains("both Complete and Failed"), "{}", f.why);
    let f = finished(&[c("Complete", "Maybe", None)]);
    assert_eq!(
        (f.outcome, f.why.as_str()),
        (
            OperationOutcome::Failed,
            "the Job's Complete condition has status \"Maybe\": unreadable"
        )
    );
    // FailureTarget comes before Failed: the Job is still ending, not ended.
    assert_eq!(
        state(&[c("FailureTarget", "True", Some("DeadlineExceeded"))]),
        JobState::Running
    );
    assert_eq!(
        state(&[c("SuccessCriteriaMet", "True", None)]),
        JobState::Running
    );
    assert_eq!(state(&[c("Failed", "False", None)]), JobState::Running);
    assert_eq!(state(&[]), JobState::Running);
}

fn job(status: serde_json::Value) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": "fleet-startup-x" },
        "status": status,
    }))
    .unwrap()
}

#[test]
fn a_job_without_status_runs_and_its_duration_is_its_own() {
    assert_eq!(job_state(&job(json!(null))), JobState::Running);
    assert_eq!(duration(&job(json!(null))), Duration::ZERO);
    let done = job(json!({
        "startTime": "2027-01-15T08:00:00Z",
        "completionTime": "2027-01-15T08:01:30Z",
        "conditions": [{ "type": "Complete", "status": "True" }],
    }));
    assert_eq!(duration(&done), Duration::from_secs(90));
    let failed = job(json!({
        "startTime": "2027-01-15T08:00:00Z",
        "conditions": [{
            "type": "Failed", "status": "True", "reason": "DeadlineExceeded",
            "lastTransitionTime": "2027-01-15T08:05:01Z",
        }],
    }));
    assert_eq!(duration(&failed), Duration::from_secs(301));
    let backwards = job(json!({
        "startTime": "2027-01-15T08:00:00Z",
        "completionTime": "2027-01-15T07:00:00Z",
    }));
    assert_eq!(duration(&backwards), Duration::ZERO);
}

fn pod(terminated: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "p" },
        "status": { "containerStatuses": [{
            "name": "operation", "image": "power", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": { "terminated": terminated },
        }]},
    }))
    .unwrap()
}

#[test]
fn the_tail_is_the_last_pods_message_its_exit_and_the_jobs_word() {
    let finished = Finished {
        outcome: OperationOutcome::Failed,
        why: "Failed (BackoffLimitExceeded: Job has reached the specified backoff limit)".into(),
    };
    let older = pod(json!({
        "exitCode": 1, "reason": "Error", "message": "first try\n",
        "finishedAt": "2027-01-15T08:00:00Z",
    }));
    let newer = pod(json!({
        "exitCode": 3, "reason": "Error", "message": "BMC 10.0.0.9 refused\n",
        "finishedAt": "2027-01-15T08:01:00Z",
    }));
    assert_eq!(
        tail(&[older, newer], &finished, "fleet-startup-x"),
        "BMC 10.0.0.9 refused\n[exit status: 3]\n[job fleet-startup-x: Failed \
         (BackoffLimitExceeded: Job has reached the specified backoff limit)]"
    );
    let killed = pod(json!({ "exitCode": 137, "reason": "OOMKilled" }));
    assert_eq!(
        tail(&[killed], &finished, "j"),
        format!("[exit status: 137, OOMKilled]\n[job j: {}]", finished.why)
    );
    assert_eq!(
        tail(&[], &finished, "j"),
        format!("[job j: {}]", finished.why),
        "no pod (deleted, or never scheduled): the Job's word alone"
    );
}

#[test]
fn a_tail_is_at_most_tail_bytes_and_keeps_its_end() {
    let finished = Finished {
        outcome: OperationOutcome::Completed,
        why: "Complete (no reason given)".into(),
    };
    let loud = pod(json!({ "exitCode": 0, "message": "x".repeat(10 * TAIL_BYTES) }));
    let t = tail(&[loud], &finished, "j");
    assert_eq!(t.len(), TAIL_BYTES);
    assert!(
        t.ends_with("[exit status: 0]\n[job j: Complete (no reason given)]"),
        "{t}"
    );
}

proptest! {
    // A status anyone may have written is read, never a panic, and a finished state says why.
    #[test]
    fn any_conditions_are_read_without_a_panic(
        list in proptest::collection::vec(
            ("\\PC{0,12}|Complete|Failed", "\\PC{0,6}|True|False", proptest::option::of("\\PC{0,12}")),
            0..5,
        ),
    ) {
        let conditions: Vec<JobCondition> = list
            .iter()
            .map(|(t, s, r)| condition(t, s, r.as_deref()))
            .collect();
        if let JobState::Finished(f) = state(&conditions) {
            prop_assert!(!f.why.is_empty());
        }
    }
}
