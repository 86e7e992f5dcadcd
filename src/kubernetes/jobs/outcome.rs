//! What a Job's status means for its operation (SPEC §4.2, Jobs as operations): the conditions
//! to an outcome, the pods' termination messages to the operation's tail, and the Job's times to
//! its duration. Pure: no I/O, no clock, and never a panic: a status anyone may have written is
//! read, not trusted.
//!
//! | Complete  | Failed                           | state                                 |
//! |-----------|----------------------------------|---------------------------------------|
//! | True      | not True                         | finished: completed                   |
//! | not True  | True, reason DeadlineExceeded    | finished: timed out                   |
//! | not True  | True, another reason             | finished: failed                      |
//! | True      | True                             | finished: failed (contradictory)      |
//! | garbage   | any                              | finished: failed (unreadable status)  |
//! | any       | garbage                          | finished: failed (unreadable status)  |
//! | not True  | not True                         | running: wait                         |
//!
//! A Complete or Failed status is garbage when it is not `True`, `False` or `Unknown`, whatever
//! the other conditions say. Other condition types decide nothing: FailureTarget comes before
//! Failed and SuccessCriteriaMet before Complete (wait for those), nor do Suspended and any type
//! a later Kubernetes adds.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

use crate::domain::claim::OperationOutcome;

/// Where a Job is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// No condition has ended it yet.
    Running,
    Finished(Finished),
}

/// How a Job ended, and why, in the Job's own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    pub outcome: OperationOutcome,
    pub why: String,
}

/// What one decisive condition type says, all its conditions together.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Said {
    /// No condition of the type has status True.
    NotTrue,
    /// One has status True, with its reason and message.
    True { reason: String, message: String },
    /// One has a status that is not True, False or Unknown: whatever the others say, the
    /// status as a whole cannot be trusted.
    Garbage(String),
}

fn said(conditions: &[JobCondition], kind: &str) -> Said {
    let mut said = Said::NotTrue;
    for c in conditions.iter().filter(|c| c.type_ == kind) {
        match c.status.as_str() {
            "True" if said == Said::NotTrue => {
                said = Said::True {
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                };
            }
            "True" | "False" | "Unknown" => {}
            other => {
                return Said::Garbage(format!("the Job's {kind} condition has status {other:?}"));
            }
        }
    }
    said
}

/// The reason and message of a condition, as one phrase.
fn phrase(reason: &str, message: &str) -> String {
    match (reason.is_empty(), message.is_empty()) {
        (true, true) => "no reason given".to_owned(),
        (false, true) => reason.to_owned(),
        (true, false) => message.to_owned(),
        (false, false) => format!("{reason}: {message}"),
    }
}

/// The Job's state from its conditions: the table above, one row per arm.
pub fn state(conditions: &[JobCondition]) -> JobState {
    let finished = |outcome, why: String| JobState::Finished(Finished { outcome, why });
    match (said(conditions, "Complete"), said(conditions, "Failed")) {
        (Said::Garbage(why), Said::NotTrue | Said::True { .. } | Said::Garbage(_))
        | (Said::NotTrue | Said::True { .. }, Said::Garbage(why)) => {
            finished(OperationOutcome::Failed, format!("{why}: unreadable"))
        }
        (Said::True { .. }, Said::True { reason, message }) => finished(
            OperationOutcome::Failed,
            format!(
                "the Job says both Complete and Failed ({}): contradictory",
                phrase(&reason, &message)
            ),
        ),
        (Said::True { reason, message }, Said::NotTrue) => finished(
            OperationOutcome::Completed,
            format!("Complete ({})", phrase(&reason, &message)),
        ),
        (Said::NotTrue, Said::True { reason, message }) if reason == "DeadlineExceeded" => {
            finished(
                OperationOutcome::TimedOut,
                format!("Failed ({})", phrase(&reason, &message)),
            )
        }
        (Said::NotTrue, Said::True { reason, message }) => finished(
            OperationOutcome::Failed,
            format!("Failed ({})", phrase(&reason, &message)),
        ),
        (Said::NotTrue, Said::NotTrue) => JobState::Running,
    }
}

/// A Job's state, from the conditions its status holds.
pub fn job_state(job: &Job) -> JobState {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    state(conditions)
}

/// How long the Job ran: from its start to its completion (or to the condition that ended it).
/// Zero when the status does not say, or says an end before the start.
pub fn duration(job: &Job) -> Duration {
    let Some(status) = &job.status else {
        return Duration::ZERO;
    };
    let ended = status.completion_time.as_ref().or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            .find_map(|c| c.last_transition_time.as_ref())
    });
    match (&status.start_time, ended) {
        (Some(start), Some(end)) => {
            let ms = end
                .0
                .as_millisecond()
                .saturating_sub(start.0.as_millisecond());
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        }
        _ => Duration::ZERO,
    }
}

/// The operation's tail: the termination message of the Job's container (its log's tail when
/// it failed without writing one, `FallbackToLogsOnError`) from the pod that ended last, then
/// its exit status and the Job's word, like the wrapper's `[exit status: 3]`. At most
/// `TAIL_BYTES`, its end kept.
pub fn tail(pods: &[Pod], finished: &Finished, job_name: &str) -> String {
    let last = pods
        .iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .filter(|c| c.name == super::spec::CONTAINER)
        .filter_map(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
        })
        .max_by_key(|t| t.finished_at.as_ref().map(|f| f.0.as_millisecond()));
    let mut text = String::new();
    if let Some(t) = last {
        text.push_str(t.message.as_deref().unwrap_or_default().trim_end());
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&exit(t));
        text.push('\n');
    }
    text.push_str(&format!("[job {job_name}: {}]", finished.why));
    crate::lifecycle::command::tail(text.as_bytes())
}

/// The container's end, as the wrapper says a command's.
fn exit(t: &ContainerStateTerminated) -> String {
    match (&t.reason, t.signal) {
        (_, Some(signal)) => format!("[exit status: {}, signal {signal}]", t.exit_code),
        (Some(reason), None) if reason != "Completed" && reason != "Error" => {
            format!("[exit status: {}, {reason}]", t.exit_code)
        }
        _ => format!("[exit status: {}]", t.exit_code),
    }
}

#[cfg(test)]
mod tests;
