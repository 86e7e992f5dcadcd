//! The Job spec builder: the name (deterministic, an RFC 1123 label of at most 63 characters,
//! the same for the same operation and different for another), the labels, the annotations and
//! every field of the Job, and the operation read back from a Job.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::config::{JobTemplate, Toleration};
use crate::domain::claim::OperationKind;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::lifecycle::Request;

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap()
}

fn template() -> JobTemplate {
    JobTemplate {
        image: "registry.example/power:1.4".into(),
        command: vec!["/power".into()],
        args: vec!["on".into()],
        service_account_name: Some("fleet-power".into()),
        node_selector: BTreeMap::from([("kubernetes.io/hostname".into(), "bmc-gw".into())]),
        tolerations: vec![Toleration {
            key: Some("node-role.kubernetes.io/control-plane".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }],
        ttl_after_finished: Duration::from_secs(3600),
    }
}

fn request(kind: OperationKind, claim: Option<&str>) -> Request {
    Request {
        kind,
        slot: BenchName::parse("bench-01.rack1").unwrap(),
        group: GroupName::parse("pool-a").unwrap(),
        claim: claim.map(|c| ClaimName::parse(c).unwrap()),
        attempt: 2,
        provider_id: "fleet://bench-01.rack1".into(),
        command: vec![],
        env: BTreeMap::from([("BMC".into(), "10.0.0.9".into())]),
        dir: Some(PathBuf::from("/work")),
        timeout: Duration::from_millis(299_500),
        controller: "ctl-1".into(),
        started_at: at(1_800_000_000_123),
        job: Some(template()),
        fence: Some("1712345678901234".into()),
        driver: None,
        // A Job's container gets only the group's env and fleet's own variables: the names of
        // the controller's secrets go nowhere in it (the whole body is compared below).
        secret_env: vec!["BMC_PASS".into()],
    }
}

fn is_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

#[test]
fn the_name_is_the_kind_the_slot_and_a_digest_of_the_operation() {
    let startup = request(OperationKind::Startup, Some("bench-01-2-abcd"));
    let name = name(&startup);
    assert_eq!(name, name.clone());
    assert!(name.starts_with("fleet-startup-bench-01-rack1-"), "{name}");
    assert_eq!(name.len(), "fleet-startup-bench-01-rack1-".len() + 16);
    assert!(is_label(&name), "{name}");
    // The digest is the identity's: computed here the same way, so a change to it is seen.
    assert_eq!(
        name,
        format!(
            "fleet-startup-bench-01-rack1-{}",
            digest(
                "v1\0pool-a\0bench-01.rack1\0startup\0bench-01-2-abcd\x002",
                16
            )
        )
    );
}

#[test]
fn a_claims_startup_has_one_name_whenever_it_is_fired() {
    let first = request(OperationKind::Startup, Some("bench-01-2-abcd"));
    let again = Request {
        started_at: at(1_800_000_999_000),
        controller: "ctl-2".into(),
        fence: Some("1712345678999999".into()),
        ..first.clone()
    };
    assert_eq!(
        name(&first),
        name(&again),
        "a second leader's create meets 409"
    );
    // Another claim, attempt, slot, group or kind is another operation.
    let others = [
        Request {
            claim: Some(ClaimName::parse("bench-01-3-efgh").unwrap()),
            ..first.clone()
        },
        Request {
            attempt: 3,
            ..first.clone()
        },
        Request {
            slot: BenchName::parse("bench-02.rack1").unwrap(),
            ..first.clone()
        },
        Request {
            group: GroupName::parse("pool-b").unwrap(),
            ..first.clone()
        },
        Request {
            kind: OperationKind::Shutdown,
            ..first.clone()
        },
    ];
    for other in &others {
        assert_ne!(name(&first), name(other), "{other:?}");
    }
}

#[test]
fn a_shutdown_is_named_by_its_start_so_a_second_one_is_a_second_job() {
    for claim in [Some("bench-01-2-abcd"), None] {
        let first = request(OperationKind::Shutdown, claim);
        let same = Request {
            controller: "ctl-2".into(),
            ..first.clone()
        };
        let next = Request {
            started_at: at(1_800_000_600_000),
            ..first.clone()
        };
        assert_eq!(name(&first), name(&same), "{claim:?}");
        assert_ne!(name(&first), name(&next), "{claim:?}");
        assert!(name(&first).starts_with("fleet-shutdown-bench-01-rack1-"));
    }
    // The start is kept to the millisecond, as the store keeps it.
    let a = request(OperationKind::Shutdown, None);
    let b = Request {
        started_at: a.started_at + chrono::Duration::microseconds(400),
        ..a.clone()
    };
    assert_eq!(name(&a), name(&b));
}

#[test]
fn a_long_slot_is_shortened_and_the_name_stays_a_label() {
    let long = format!("{}.{}", "a".repeat(63), "b-".repeat(30) + "c");
    let mut r = request(OperationKind::Shutdown, None);
    r.slot = BenchName::parse(&long).unwrap();
    let n = name(&r);
    assert_eq!(n.len(), MAX_NAME, "{n}");
    assert!(is_label(&n), "{n}");
    assert!(
        n.starts_with(&format!("fleet-shutdown-{}", "a".repeat(31))),
        "{n}"
    );
    // A cut that ends on '-' drops it, so the name never holds "--" before the digest.
    r.slot = BenchName::parse(&format!("{}-{}", "a".repeat(30), "b".repeat(20))).unwrap();
    let n = name(&r);
    assert!(is_label(&n), "{n}");
    assert!(!n.contains("--"), "{n}");
}

#[test]
fn the_labels_select_fleets_jobs_by_group_operation_slot_and_claim() {
    let r = request(OperationKind::Startup, Some("bench-01-2-abcd"));
    assert_eq!(
        labels(&r),
        BTreeMap::from([
            ("app.kubernetes.io/managed-by".into(), "fleet".into()),
            ("fleet.dev/group".into(), "pool-a".into()),
            ("fleet.dev/operation".into(), "startup".into()),
            ("fleet.dev/slot-digest".into(), digest("bench-01.rack1", 32)),
            ("fleet.dev/slot".into(), "bench-01.rack1".into()),
            (
                "fleet.dev/claim-digest".into(),
                digest("bench-01-2-abcd", 32)
            ),
            ("fleet.dev/claim".into(), "bench-01-2-abcd".into()),
        ])
    );
    let unclaimed = request(OperationKind::Shutdown, None);
    let l = labels(&unclaimed);
    assert_eq!(
        l.get("fleet.dev/operation").map(String::as_str),
        Some("shutdown")
    );
    assert!(!l.contains_key("fleet.dev/claim-digest"), "{l:?}");
    // A bench name is up to 253 characters, a label value at most 63: the digest fits.
    let mut long = r.clone();
    long.slot =
        BenchName::parse(&["a".repeat(63), "b".repeat(63), "c".repeat(63)].join(".")).unwrap();
    for value in labels(&long).values() {
        assert!(value.len() <= 63, "{value}");
    }
    // The rule that maps it (SPEC §3.12 9): a label value, the name's head and its digest.
    let mapped = &labels(&long)["fleet.dev/slot"];
    assert_eq!(
        mapped,
        &format!("{}-{}", "a".repeat(46), digest(long.slot.as_str(), 16))
    );
    assert!(is_label_value(mapped), "{mapped}");
    let dotted = ["b".repeat(45), "c".repeat(63), "d".repeat(63)].join(".");
    let value = label_value(&dotted);
    assert!(
        value.starts_with(&format!("{}-", "b".repeat(45))),
        "{value}"
    );
    assert!(is_label_value(&value), "{value}");
    assert_eq!(label_value("bench-01"), "bench-01");
}

/// A label value: at most 63 characters of `[A-Za-z0-9._-]`, starting and ending with a letter or
/// digit.
fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[test]
fn the_annotations_hold_the_full_names_the_attempt_the_start_and_the_fence() {
    let r = request(OperationKind::Startup, Some("bench-01-2-abcd"));
    assert_eq!(
        annotations(&r),
        BTreeMap::from([
            ("fleet.dev/group".into(), "pool-a".into()),
            ("fleet.dev/slot".into(), "bench-01.rack1".into()),
            ("fleet.dev/claim".into(), "bench-01-2-abcd".into()),
            ("fleet.dev/operation".into(), "startup".into()),
            ("fleet.dev/attempt".into(), "2".into()),
            (
                "fleet.dev/started-at".into(),
                "2027-01-15T08:00:00.123Z".into()
            ),
            ("fleet.dev/controller".into(), "ctl-1".into()),
            ("fleet.dev/fence".into(), "1712345678901234".into()),
        ])
    );
    let bare = Request {
        claim: None,
        fence: None,
        ..r
    };
    let a = annotations(&bare);
    assert!(
        !a.contains_key("fleet.dev/claim") && !a.contains_key("fleet.dev/fence"),
        "{a:?}"
    );
}

/// The whole Job, as it is sent: every field the operation sets.
fn expected_body(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "fleet",
                "fleet.dev/group": "pool-a",
                "fleet.dev/operation": "startup",
                "fleet.dev/slot-digest": digest("bench-01.rack1", 32),
                "fleet.dev/claim-digest": digest("bench-01-2-abcd", 32),
                "fleet.dev/slot": "bench-01.rack1",
                "fleet.dev/claim": "bench-01-2-abcd",
            },
            "annotations": {
                "fleet.dev/group": "pool-a",
                "fleet.dev/slot": "bench-01.rack1",
                "fleet.dev/claim": "bench-01-2-abcd",
                "fleet.dev/operation": "startup",
                "fleet.dev/attempt": "2",
                "fleet.dev/started-at": "2027-01-15T08:00:00.123Z",
                "fleet.dev/controller": "ctl-1",
                "fleet.dev/fence": "1712345678901234",
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 300,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {
                    "labels": {
                        "app.kubernetes.io/managed-by": "fleet",
                        "fleet.dev/group": "pool-a",
                        "fleet.dev/operation": "startup",
                        "fleet.dev/slot-digest": digest("bench-01.rack1", 32),
                        "fleet.dev/claim-digest": digest("bench-01-2-abcd", 32),
                        "fleet.dev/slot": "bench-01.rack1",
                        "fleet.dev/claim": "bench-01-2-abcd",
                    },
                },
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": "fleet-power",
                    "nodeSelector": { "kubernetes.io/hostname": "bmc-gw" },
                    "tolerations": [{
                        "key": "node-role.kubernetes.io/control-plane",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    }],
                    "containers": [{
                        "name": "operation",
                        "image": "registry.example/power:1.4",
                        "command": ["/power"],
                        "args": ["on"],
                        "workingDir": "/work",
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "env": [
                            { "name": "BMC", "value": "10.0.0.9" },
                            { "name": "FLEET_SLOT", "value": "bench-01.rack1" },
                            { "name": "FLEET_GROUP", "value": "pool-a" },
                            { "name": "FLEET_CLAIM", "value": "bench-01-2-abcd" },
                            { "name": "FLEET_ATTEMPT", "value": "2" },
                            { "name": "FLEET_PROVIDER_ID", "value": "fleet://bench-01.rack1" },
                            { "name": "FLEET_CONTROLLER", "value": "ctl-1" },
                            { "name": "FLEET_OPERATION", "value": "startup" },
                        ],
                    }],
                },
            },
        },
    })
}

#[test]
fn the_job_runs_once_within_the_timeout_is_kept_its_ttl_and_tells_its_tail() {
    let r = request(OperationKind::Startup, Some("bench-01-2-abcd"));
    let built = job(&r, &template());
    let body = serde_json::to_value(&built).unwrap();
    assert_eq!(body, expected_body(&name(&r)));
}

#[test]
fn an_empty_entrypoint_and_selectors_are_left_to_the_image_and_the_cluster() {
    let r = request(OperationKind::Shutdown, None);
    let bare = JobTemplate {
        image: "power".into(),
        command: vec![],
        args: vec![],
        service_account_name: None,
        node_selector: BTreeMap::new(),
        tolerations: vec![],
        ttl_after_finished: Duration::from_millis(1500),
    };
    let r = Request {
        dir: None,
        timeout: Duration::from_secs(60),
        ..r
    };
    let body = serde_json::to_value(job(&r, &bare)).unwrap();
    let spec = &body["spec"];
    assert_eq!(spec["activeDeadlineSeconds"], 60);
    assert_eq!(
        spec["ttlSecondsAfterFinished"], 2,
        "rounded up, never shorter"
    );
    let pod = &spec["template"]["spec"];
    for absent in ["serviceAccountName", "nodeSelector", "tolerations"] {
        assert!(pod.get(absent).is_none(), "{absent}: {pod}");
    }
    let container = &pod["containers"][0];
    for absent in ["command", "args", "workingDir"] {
        assert!(container.get(absent).is_none(), "{absent}: {container}");
    }
    assert_eq!(container["image"], "power");
    assert_eq!(
        container["env"][0],
        json!({ "name": "BMC", "value": "10.0.0.9" })
    );
    assert_eq!(
        container["env"][3],
        json!({ "name": "FLEET_CLAIM", "value": "" }),
        "no claim: empty, as the wrapper gives it"
    );
}

#[test]
fn the_operation_is_read_back_from_the_jobs_annotations() {
    for (kind, claim) in [
        (OperationKind::Startup, Some("bench-01-2-abcd")),
        (OperationKind::Shutdown, Some("bench-01-2-abcd")),
        (OperationKind::Shutdown, None),
    ] {
        let r = request(kind, claim);
        let built = job(&r, &template());
        assert_eq!(Identity::read(&built), Ok(Identity::of(&r)));
        // Through JSON, as it comes back from the API server.
        let back: Job = serde_json::from_value(serde_json::to_value(&built).unwrap()).unwrap();
        assert_eq!(Identity::read(&back), Ok(Identity::of(&r)));
    }
}

#[test]
fn a_job_whose_annotations_are_missing_or_wrong_says_which() {
    let r = request(OperationKind::Startup, Some("bench-01-2-abcd"));
    let rows = [
        ("fleet.dev/group", None, "no annotation fleet.dev/group"),
        (
            "fleet.dev/slot",
            Some("Bench 01"),
            "annotation fleet.dev/slot: ",
        ),
        (
            "fleet.dev/claim",
            Some("-x"),
            "annotation fleet.dev/claim: ",
        ),
        (
            "fleet.dev/operation",
            Some("reboot"),
            "annotation fleet.dev/operation: \"reboot\"",
        ),
        (
            "fleet.dev/attempt",
            Some("-1"),
            "annotation fleet.dev/attempt: ",
        ),
        (
            "fleet.dev/started-at",
            Some("yesterday"),
            "annotation fleet.dev/started-at: ",
        ),
    ];
    for (key, value, want) in rows {
        let mut j = job(&r, &template());
        let notes = j.metadata.annotations.as_mut().unwrap();
        match value {
            None => {
                notes.remove(key);
            }
            Some(v) => {
                notes.insert(key.into(), v.into());
            }
        }
        let err = Identity::read(&j).expect_err(key);
        assert!(err.starts_with(want), "{key}: {err}");
    }
    let mut none = job(&r, &template());
    none.metadata.annotations = None;
    assert_eq!(
        Identity::read(&none),
        Err("no annotation fleet.dev/group".to_owned())
    );
}

proptest! {
    // Every bench name and claim gives a name that is an RFC 1123 label of at most 63
    // characters, computed the same twice.
    #[test]
    fn every_name_is_a_label_within_63_characters(
        slot in "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?){0,3}",
        claim in proptest::option::of("[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?"),
        attempt in 0u32..10,
        started in 0i64..4_000_000_000_000,
        startup in any::<bool>(),
    ) {
        let Ok(slot) = BenchName::parse(&slot) else { return Ok(()) };
        let mut r = request(
            if startup { OperationKind::Startup } else { OperationKind::Shutdown },
            None,
        );
        r.slot = slot;
        r.claim = claim.and_then(|c| ClaimName::parse(&c).ok());
        r.attempt = attempt;
        r.started_at = at(started);
        let n = name(&r);
        prop_assert!(is_label(&n), "{}", n);
        prop_assert_eq!(n.clone(), name(&r.clone()));
        for value in labels(&r).values() {
            prop_assert!(value.len() <= 63);
        }
    }

    // Annotations anyone may have written are read without a panic.
    #[test]
    fn any_annotations_are_read_without_a_panic(
        notes in proptest::collection::btree_map(
            proptest::sample::select(vec![
                "fleet.dev/group", "fleet.dev/slot", "fleet.dev/claim", "fleet.dev/operation",
                "fleet.dev/attempt", "fleet.dev/started-at", "other",
            ]),
            "\\PC{0,30}",
            0..8,
        ),
    ) {
        let mut j = Job::default();
        j.metadata.annotations =
            Some(notes.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
        let _ = Identity::read(&j);
    }
}
