//! The Job an operation becomes (SPEC §4.2, Jobs as operations): its name, labels, annotations
//! and spec, built from the request alone, and the operation read back from a Job's
//! annotations. Pure: no I/O, no clock.
//!
//! The name is deterministic, so a second leader (or the same one restarted) that fires the same
//! operation gets 409 AlreadyExists and adopts the Job that runs, rather than powering the
//! machine twice. A claim's startup is one operation per claim and attempt (SPEC §5.4: never
//! fired again for its claim), so its name leaves out the start time; a shutdown may be fired
//! again for the same claim (SPEC §3.6) or for no claim, so its name is its start time's.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, PodSpec, PodTemplateSpec, Toleration as KubeToleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::config::{JobTemplate, Toleration};
use crate::domain::claim::OperationKind;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::lifecycle::Request;

/// Every Job fleet makes carries this label with `MANAGER`: the reporter lists by it.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "fleet";
pub const GROUP_LABEL: &str = "fleet.dev/group";
pub const OPERATION_LABEL: &str = "fleet.dev/operation";
/// A digest of the slot's name: a bench name may be longer than a label value's 63 characters.
pub const SLOT_LABEL: &str = "fleet.dev/slot-digest";
/// A digest of the claim's name; absent on a shutdown no claim asked for.
pub const CLAIM_LABEL: &str = "fleet.dev/claim-digest";
/// The slot's name as a label value (`label_value`): `kubectl get jobs -l fleet.dev/slot=NAME`.
pub const SLOT_NAME_LABEL: &str = "fleet.dev/slot";
/// The claim's name as a label value; absent on a shutdown no claim asked for.
pub const CLAIM_NAME_LABEL: &str = "fleet.dev/claim";

pub const GROUP_ANNOTATION: &str = "fleet.dev/group";
pub const SLOT_ANNOTATION: &str = "fleet.dev/slot";
pub const CLAIM_ANNOTATION: &str = "fleet.dev/claim";
pub const OPERATION_ANNOTATION: &str = "fleet.dev/operation";
pub const ATTEMPT_ANNOTATION: &str = "fleet.dev/attempt";
/// The operation's identity in the slot's operation record (RFC 3339, milliseconds, UTC).
pub const STARTED_AT_ANNOTATION: &str = "fleet.dev/started-at";
pub const FENCE_ANNOTATION: &str = "fleet.dev/fence";
pub const CONTROLLER_ANNOTATION: &str = "fleet.dev/controller";

/// The label the Job controller puts on a Job's pods (Kubernetes 1.27 and later).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// The one container of the pod.
pub const CONTAINER: &str = "operation";

/// The longest Job name: the Job controller copies it into its pods' `job-name` label, whose
/// value is at most 63 characters.
pub const MAX_NAME: usize = 63;

/// Hex digits of the digest in a name: 64 bits, against a collision among a fleet's operations.
const NAME_DIGEST: usize = 16;
/// Hex digits of a label's digest: 128 bits, within a label value's 63 characters.
const LABEL_DIGEST: usize = 32;

/// The first `hex` hex digits (at most 64) of the SHA-256 of `text`.
pub fn digest(text: &str, hex: usize) -> String {
    use sha2::Digest;
    let sum = sha2::Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in sum.iter() {
        out.push_str(&format!("{byte:02x}"));
    }
    out.truncate(hex);
    out
}

/// The Job's name: `fleet-<kind>-<slot, shortened>-<digest of the operation's identity>`, an
/// RFC 1123 label of at most 63 characters. The slot is there for people; the digest makes it
/// unique.
pub fn name(request: &Request) -> String {
    name_of(&Identity::of(request))
}

/// The Job's name for an operation known by its identity (an Event about a claim's Job names it
/// without the whole request).
pub fn name_of(op: &Identity) -> String {
    let kind = op.kind.as_str();
    let claim = op.claim.as_ref().map_or("", ClaimName::as_str);
    let identity = match (op.kind, &op.claim) {
        (OperationKind::Startup, Some(_)) => format!(
            "v1\0{}\0{}\0{kind}\0{claim}\0{}",
            op.group, op.slot, op.attempt
        ),
        (OperationKind::Startup, None) | (OperationKind::Shutdown, _) => format!(
            "v1\0{}\0{}\0{kind}\0{claim}\0{}\0{}",
            op.group,
            op.slot,
            op.attempt,
            op.started_at.timestamp_millis()
        ),
    };
    let hash = digest(&identity, NAME_DIGEST);
    let room = MAX_NAME - "fleet-".len() - kind.len() - 2 - hash.len();
    let slot: String = op
        .slot
        .as_str()
        .chars()
        .map(|c| if c == '.' { '-' } else { c })
        .take(room)
        .collect();
    let slot = slot.trim_end_matches('-');
    if slot.is_empty() {
        format!("fleet-{kind}-{hash}")
    } else {
        format!("fleet-{kind}-{slot}-{hash}")
    }
}

/// A name as a label value (SPEC §3.12 9): the name itself when it has at most 63 characters
/// (a bench's or claim's name is already of a label value's characters, starting and ending with
/// a letter or digit); a longer one is its first 46 characters, less a trailing `-` or `.`, then
/// `-` and the first 16 hex digits of its SHA-256.
pub fn label_value(name: &str) -> String {
    const MAX: usize = 63;
    if name.len() <= MAX {
        return name.to_owned();
    }
    let head = name[..46].trim_end_matches(['-', '.']);
    format!("{head}-{}", digest(name, 16))
}

/// The labels of the Job and of its pods.
pub fn labels(request: &Request) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (GROUP_LABEL.to_owned(), request.group.to_string()),
        (OPERATION_LABEL.to_owned(), request.kind.as_str().to_owned()),
        (
            SLOT_LABEL.to_owned(),
            digest(request.slot.as_str(), LABEL_DIGEST),
        ),
        (
            SLOT_NAME_LABEL.to_owned(),
            label_value(request.slot.as_str()),
        ),
    ]);
    if let Some(claim) = &request.claim {
        labels.insert(CLAIM_LABEL.to_owned(), digest(claim.as_str(), LABEL_DIGEST));
        labels.insert(CLAIM_NAME_LABEL.to_owned(), label_value(claim.as_str()));
    }
    labels
}

/// The annotations: the full names and what identifies the operation, for the reporter and for
/// people.
pub fn annotations(request: &Request) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([
        (GROUP_ANNOTATION.to_owned(), request.group.to_string()),
        (SLOT_ANNOTATION.to_owned(), request.slot.to_string()),
        (
            OPERATION_ANNOTATION.to_owned(),
            request.kind.as_str().to_owned(),
        ),
        (ATTEMPT_ANNOTATION.to_owned(), request.attempt.to_string()),
        (STARTED_AT_ANNOTATION.to_owned(), stamp(request.started_at)),
        (CONTROLLER_ANNOTATION.to_owned(), request.controller.clone()),
    ]);
    if let Some(claim) = &request.claim {
        annotations.insert(CLAIM_ANNOTATION.to_owned(), claim.to_string());
    }
    if let Some(fence) = &request.fence {
        annotations.insert(FENCE_ANNOTATION.to_owned(), fence.clone());
    }
    annotations
}

/// A start time as the annotation holds it: milliseconds, as the store's record does.
pub fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Whole seconds, rounded up: a Job's deadline is never shorter than the operation's timeout.
fn seconds(d: Duration) -> i64 {
    let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    whole.saturating_add(i64::from(d.subsec_nanos() > 0)).max(1)
}

/// The Job that runs `request` with `template`. It runs once (`backoffLimit: 0`, `restartPolicy:
/// Never`: a retry is the controller's decision, never the Job controller's), is killed at the
/// operation's timeout (`activeDeadlineSeconds`, reason DeadlineExceeded), is kept
/// `ttl_after_finished` once finished so a successor can read its outcome, and its container's
/// log tail becomes its termination message when it fails without one.
pub fn job(request: &Request, template: &JobTemplate) -> Job {
    let labels = labels(request);
    let mut env: Vec<EnvVar> = request
        .env
        .iter()
        .map(|(name, value)| var(name, value.clone()))
        .collect();
    env.extend(
        request
            .fleet_env()
            .into_iter()
            .map(|(name, value)| var(name, value)),
    );
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(template.image.clone()),
        command: (!template.command.is_empty()).then(|| template.command.clone()),
        args: (!template.args.is_empty()).then(|| template.args.clone()),
        env: Some(env),
        working_dir: request
            .dir
            .as_ref()
            .map(|d| d.to_string_lossy().into_owned()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        service_account_name: template.service_account_name.clone(),
        node_selector: (!template.node_selector.is_empty()).then(|| template.node_selector.clone()),
        tolerations: (!template.tolerations.is_empty())
            .then(|| template.tolerations.iter().map(toleration).collect()),
        containers: vec![container],
        ..PodSpec::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(name(request)),
            labels: Some(labels.clone()),
            annotations: Some(annotations(request)),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(seconds(request.timeout)),
            ttl_seconds_after_finished: Some(
                i32::try_from(seconds(template.ttl_after_finished)).unwrap_or(i32::MAX),
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

fn var(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        value_from: None,
    }
}

fn toleration(t: &Toleration) -> KubeToleration {
    KubeToleration {
        key: t.key.clone(),
        operator: t.operator.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
        toleration_seconds: t.toleration_seconds,
    }
}

/// The operation a Job runs, read back from its annotations: what its outcome is written to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub group: GroupName,
    pub slot: BenchName,
    pub claim: Option<ClaimName>,
    pub kind: OperationKind,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
}

impl Identity {
    /// What `request` would be read back as: its start time kept to milliseconds, as the
    /// annotation keeps it.
    pub fn of(request: &Request) -> Identity {
        Identity {
            group: request.group.clone(),
            slot: request.slot.clone(),
            claim: request.claim.clone(),
            kind: request.kind,
            attempt: request.attempt,
            started_at: DateTime::from_timestamp_millis(request.started_at.timestamp_millis())
                .unwrap_or(request.started_at),
        }
    }

    /// Reads a Job's annotations; the error says which one is missing or wrong. Never panics:
    /// anyone may have written them.
    pub fn read(job: &Job) -> Result<Identity, String> {
        let empty = BTreeMap::new();
        let notes = job.metadata.annotations.as_ref().unwrap_or(&empty);
        let get = |key: &str| {
            notes
                .get(key)
                .map(String::as_str)
                .ok_or_else(|| format!("no annotation {key}"))
        };
        let bad = |key: &str, e: &dyn std::fmt::Display| format!("annotation {key}: {e}");
        let group =
            GroupName::parse(get(GROUP_ANNOTATION)?).map_err(|e| bad(GROUP_ANNOTATION, &e))?;
        let slot =
            BenchName::parse(get(SLOT_ANNOTATION)?).map_err(|e| bad(SLOT_ANNOTATION, &e.why()))?;
        let claim = match notes.get(CLAIM_ANNOTATION) {
            None => None,
            Some(c) => Some(ClaimName::parse(c).map_err(|e| bad(CLAIM_ANNOTATION, &e))?),
        };
        let kind = match get(OPERATION_ANNOTATION)? {
            "startup" => OperationKind::Startup,
            "shutdown" => OperationKind::Shutdown,
            other => return Err(bad(OPERATION_ANNOTATION, &format!("{other:?}"))),
        };
        let attempt = get(ATTEMPT_ANNOTATION)?
            .parse::<u32>()
            .map_err(|e| bad(ATTEMPT_ANNOTATION, &e))?;
        let started_at = DateTime::parse_from_rfc3339(get(STARTED_AT_ANNOTATION)?)
            .map_err(|e| bad(STARTED_AT_ANNOTATION, &e))?
            .with_timezone(&Utc);
        Ok(Identity {
            group,
            slot,
            claim,
            kind,
            attempt,
            started_at,
        })
    }
}

#[cfg(test)]
mod tests;
