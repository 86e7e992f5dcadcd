//! Jobs as operations against a mocked API server (SPEC §4.2, Jobs as operations): the exact
//! method, path, query and body of every call the Job runner and the Job reporter make, the
//! adoption of a Job that exists already (409, then a read, never a second create), the outcome
//! read from the Job's conditions and its tail from its pod, and the reporter's write to the
//! slot's operation record in a real Redis, once. Every call the tests see is one of
//! `support::kube::JOB_CALLS`, which the RBAC must grant.
//!
//! Runner tests run on a paused clock: the runner's polls pass without sleeping.

use crate::support;

#[path = "../support/kube.rs"]
mod kube_mock;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fleet::config::JobTemplate;
use fleet::domain::claim::{OperationKind, OperationOutcome};
use fleet::domain::name::{ClaimName, GroupName};
use fleet::domain::operation::{SlotOp, stamp};
use fleet::kubernetes::jobs::{JobRunner, Reporter, Swept, api, spec};
use fleet::lifecycle::{Report, Request, Runner};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::lease::Signal;
use kube_mock::{ApiServer, Call, JOB_CALLS, list, mock_client, status};
use serde_json::{Value, json};
use support::{bounded, conn, name, server};
use tokio_util::sync::CancellationToken;

const NS: &str = "fleet";
const JOBS: &str = "/apis/batch/v1/namespaces/fleet/jobs";
const PODS: &str = "/api/v1/namespaces/fleet/pods";

fn template() -> JobTemplate {
    JobTemplate {
        image: "registry.example/power:1.4".into(),
        command: vec![],
        args: vec!["on".into()],
        service_account_name: Some("fleet-power".into()),
        node_selector: BTreeMap::new(),
        tolerations: vec![],
        ttl_after_finished: Duration::from_secs(3600),
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap()
}

fn startup() -> Request {
    Request {
        kind: OperationKind::Startup,
        slot: name("bench-01"),
        group: GroupName::parse("pool-a").unwrap(),
        claim: Some(ClaimName::parse("bench-01-1-abcd").unwrap()),
        attempt: 1,
        provider_id: "fleet://bench-01".into(),
        command: vec![],
        env: BTreeMap::from([("BMC".into(), "10.0.0.9".into())]),
        dir: None,
        timeout: Duration::from_secs(300),
        controller: "ctl-1".into(),
        started_at: at(1_800_000_000_000),
        job: Some(template()),
        fence: Some("17".into()),
        driver: None,
        secret_env: Vec::new(),
    }
}

/// The Job as the API server returns it: what was sent, with a uid and `status`.
fn stored(request: &Request, status: Value) -> Value {
    let mut job = serde_json::to_value(spec::job(request, &template())).unwrap();
    job["metadata"]["uid"] = json!(format!("uid-{}", spec::name(request)));
    job["metadata"]["namespace"] = json!(NS);
    job["status"] = status;
    job
}

fn running() -> Value {
    json!({ "active": 1, "startTime": "2027-01-15T08:00:00Z" })
}

fn failed_deadline() -> Value {
    json!({
        "failed": 1,
        "startTime": "2027-01-15T08:00:00Z",
        "conditions": [
            { "type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded",
              "message": "Job was active longer than specified deadline" },
            { "type": "Failed", "status": "True", "reason": "DeadlineExceeded",
              "message": "Job was active longer than specified deadline",
              "lastTransitionTime": "2027-01-15T08:05:00Z" },
        ],
    })
}

fn complete() -> Value {
    json!({
        "succeeded": 1,
        "startTime": "2027-01-15T08:00:00Z",
        "completionTime": "2027-01-15T08:00:42Z",
        "conditions": [
            { "type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached" },
            { "type": "Complete", "status": "True", "reason": "CompletionsReached" },
        ],
    })
}

fn pods(message: &str, exit: i32) -> Value {
    list(
        "v1",
        "PodList",
        vec![json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": "p-x7k2q", "namespace": NS },
            "status": { "containerStatuses": [{
                "name": "operation", "image": "registry.example/power:1.4", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": { "terminated": {
                    "exitCode": exit, "reason": "Error", "message": message,
                    "finishedAt": "2027-01-15T08:04:59Z",
                }},
            }]},
        })],
    )
}

/// The query that lists a Job's pods, as kube writes it (its query strings start with '&').
fn pods_of(job: &str) -> String {
    format!("&labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}")
}

/// (method, path, query) of each call.
fn shape(calls: &[Call]) -> Vec<(String, String, String)> {
    calls
        .iter()
        .map(|c| (c.method.clone(), c.path.clone(), c.query.clone()))
        .collect()
}

fn call(method: &str, path: &str, query: &str) -> (String, String, String) {
    (method.into(), path.into(), query.into())
}

/// Runs `request` on a Job runner over `client`; the report comes back through the handle.
fn run(client: kube::Client, request: Request) -> tokio::task::JoinHandle<Report> {
    let runner = JobRunner::new(client, NS).polling_every(Duration::from_secs(5));
    tokio::spawn(async move { runner.run(request).await })
}

/// After the runner is done (its client dropped), nothing more reaches the server.
async fn no_more_calls(server: &mut ApiServer) {
    assert!(server.next().await.is_none(), "a call after the report");
    server.assert_only_job_calls();
}

#[tokio::test(start_paused = true)]
async fn a_job_is_created_with_its_exact_body_and_read_until_a_condition_ends_it() {
    let (client, mut server) = mock_client(NS);
    let request = startup();
    let job = spec::name(&request);
    let report = run(client, request.clone());

    let create = server.answer(201, stored(&request, json!(null))).await;
    assert_eq!(
        (
            create.method.as_str(),
            create.path.as_str(),
            create.query.as_str()
        ),
        ("POST", JOBS, "&fieldManager=fleet")
    );
    assert_eq!(
        create.body,
        serde_json::to_value(spec::job(&request, &template())).unwrap()
    );
    // The fields the operation's contract rests on, spelled out.
    assert_eq!(create.body["metadata"]["name"], json!(job));
    assert_eq!(create.body["spec"]["backoffLimit"], 0);
    assert_eq!(create.body["spec"]["activeDeadlineSeconds"], 300);
    assert_eq!(create.body["spec"]["ttlSecondsAfterFinished"], 3600);
    let pod = &create.body["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(
        pod["containers"][0]["terminationMessagePolicy"],
        "FallbackToLogsOnError"
    );
    assert_eq!(
        create.body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "fleet"
    );
    assert_eq!(
        create.body["metadata"]["annotations"]["fleet.dev/fence"],
        "17"
    );

    // Running, then FailureTarget alone (the Job is still ending), then Failed.
    server.answer(200, stored(&request, running())).await;
    let mut ending = stored(&request, failed_deadline());
    ending["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    server.answer(200, ending).await;
    server
        .answer(200, stored(&request, failed_deadline()))
        .await;
    let tail_pods = server
        .answer(200, pods("powering on\nBMC 10.0.0.9 did not answer\n", 137))
        .await;
    assert_eq!(tail_pods.query, pods_of(&job));

    let report = bounded("the report", report).await.unwrap();
    assert_eq!(report.outcome, OperationOutcome::TimedOut);
    assert_eq!(
        report.duration,
        Duration::from_secs(300),
        "the Job's own times"
    );
    assert_eq!(
        report.tail,
        format!(
            "powering on\nBMC 10.0.0.9 did not answer\n[exit status: 137]\n[job {job}: Failed \
             (DeadlineExceeded: Job was active longer than specified deadline)]"
        )
    );
    assert_eq!(
        shape(server.calls()),
        [
            call("POST", JOBS, "&fieldManager=fleet"),
            call("GET", &format!("{JOBS}/{job}"), ""),
            call("GET", &format!("{JOBS}/{job}"), ""),
            call("GET", &format!("{JOBS}/{job}"), ""),
            call("GET", PODS, &pods_of(&job)),
        ]
    );
    no_more_calls(&mut server).await;
}

// A second leader (or this one, restarted) fires the same claim's startup: the create meets
// 409 AlreadyExists, the Job that runs is read and its outcome is the report. No second create.
#[tokio::test(start_paused = true)]
async fn a_create_that_meets_409_adopts_the_job_that_exists_and_creates_nothing() {
    let (client, mut server) = mock_client(NS);
    let first = startup();
    let again = Request {
        started_at: at(1_800_000_090_000),
        controller: "ctl-2".into(),
        fence: Some("18".into()),
        ..first.clone()
    };
    let job = spec::name(&again);
    assert_eq!(job, spec::name(&first), "one name for the claim's startup");
    let report = run(client, again);

    let create = server
        .answer(
            409,
            status(
                409,
                "AlreadyExists",
                &format!("jobs.batch \"{job}\" already exists"),
            ),
        )
        .await;
    assert_eq!(create.method, "POST");
    // The Job the first leader made, finished.
    let read = server.answer(200, stored(&first, complete())).await;
    assert_eq!(
        (read.method.as_str(), read.path),
        ("GET", format!("{JOBS}/{job}"))
    );
    server.answer(200, pods("machine is on\n", 0)).await;

    let report = bounded("the report", report).await.unwrap();
    assert_eq!(report.outcome, OperationOutcome::Completed);
    assert_eq!(report.duration, Duration::from_secs(42));
    assert_eq!(
        report.tail,
        format!("machine is on\n[exit status: 0]\n[job {job}: Complete (CompletionsReached)]")
    );
    assert_eq!(
        shape(server.calls()),
        [
            call("POST", JOBS, "&fieldManager=fleet"),
            call("GET", &format!("{JOBS}/{job}"), ""),
            call("GET", PODS, &pods_of(&job)),
        ]
    );
    no_more_calls(&mut server).await;
}

// An adopted Job still running is waited for like a created one.
#[tokio::test(start_paused = true)]
async fn an_adopted_job_still_running_is_waited_for() {
    let (client, mut server) = mock_client(NS);
    let request = startup();
    let job = spec::name(&request);
    let report = run(client, request.clone());
    server
        .answer(409, status(409, "AlreadyExists", "already exists"))
        .await;
    server.answer(200, stored(&request, running())).await;
    server.answer(200, stored(&request, complete())).await;
    server.answer(200, list("v1", "PodList", vec![])).await;
    let report = bounded("the report", report).await.unwrap();
    assert_eq!(
        (report.outcome, report.tail.as_str()),
        (
            OperationOutcome::Completed,
            format!("[job {job}: Complete (CompletionsReached)]").as_str()
        )
    );
    assert_eq!(
        server.calls().iter().filter(|c| c.method == "POST").count(),
        1
    );
    no_more_calls(&mut server).await;
}

#[tokio::test(start_paused = true)]
async fn a_job_of_that_name_for_another_operation_is_not_adopted() {
    let (client, mut server) = mock_client(NS);
    let request = startup();
    let job = spec::name(&request);
    let report = run(client, request.clone());
    server
        .answer(409, status(409, "AlreadyExists", "already exists"))
        .await;
    let mut theirs = stored(&request, complete());
    theirs["metadata"]["annotations"]["fleet.dev/slot"] = json!("bench-99");
    server.answer(200, theirs).await;
    let report = bounded("the report", report).await.unwrap();
    assert_eq!(report.outcome, OperationOutcome::Failed);
    assert_eq!(
        report.tail,
        format!(
            "a Job named {job} exists for another operation (startup of bench-99 started \
             2027-01-15T08:00:00.000Z); nothing was created"
        )
    );
    no_more_calls(&mut server).await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_create_is_a_failed_report_that_says_why() {
    let (client, mut server) = mock_client(NS);
    let request = startup();
    let job = spec::name(&request);
    let report = run(client, request);
    server
        .answer(
            403,
            status(
                403,
                "Forbidden",
                "jobs.batch is forbidden: User \"system:serviceaccount:fleet:fleet\" cannot create resource \"jobs\"",
            ),
        )
        .await;
    let report = bounded("the report", report).await.unwrap();
    assert_eq!(report.outcome, OperationOutcome::Failed);
    assert_eq!(
        report.tail,
        format!(
            "creating the Job {job} failed: the API server refused or could not be reached: 403 \
             Forbidden: jobs.batch is forbidden: User \"system:serviceaccount:fleet:fleet\" \
             cannot create resource \"jobs\""
        )
    );
    assert_eq!(
        shape(server.calls()),
        [call("POST", JOBS, "&fieldManager=fleet")]
    );
    no_more_calls(&mut server).await;
}

// A create whose answer is lost may have been applied: the Job is read back. There is none: the
// operation failed, saying so. There is one: it is the operation's, and is waited for.
#[tokio::test(start_paused = true)]
async fn a_create_whose_answer_is_lost_is_read_back_before_anything_is_decided() {
    let (client, mut server) = mock_client(NS);
    let request = startup();
    let job = spec::name(&request);
    let report = run(client, request.clone());
    server.drop_connection().await;
    let read = server
        .answer(
            404,
            status(404, "NotFound", &format!("jobs.batch \"{job}\" not found")),
        )
        .await;
    assert_eq!(
        (read.method.as_str(), read.path),
        ("GET", format!("{JOBS}/{job}"))
    );
    let report = bounded("the report", report).await.unwrap();
    assert_eq!(report.outcome, OperationOutcome::Failed);
    assert!(
        report
            .tail
            .starts_with(&format!("creating the Job {job} failed: ")),
        "{}",
        report.tail
    );
    assert!(
        report.tail.ends_with("; no Job of that name exists"),
        "{}",
        report.tail
    );
    no_more_calls(&mut server).await;

    let (client, mut server) = mock_client(NS);
    let report = run(client, request.clone());
    server.drop_connection().await;
    server.answer(200, stored(&request, complete())).await;
    server.answer(200, pods("on\n", 0)).await;
    let report = bounded("the report", report).await.unwrap();
    assert_eq!(report.outcome, OperationOutcome::Completed);
    assert_eq!(
        server.calls().iter().filter(|c| c.method == "POST").count(),
        1
    );
    no_more_calls(&mut server).await;
}

#[tokio::test(start_paused = true)]
async fn a_job_deleted_before_it_finished_is_a_failed_report() {
    let (client, mut server) = mock_client(NS);
    let request = startup();
    let job = spec::name(&request);
    let report = run(client, request.clone());
    server.answer(201, stored(&request, json!(null))).await;
    server
        .answer(404, status(404, "NotFound", "not found"))
        .await;
    let report = bounded("the report", report).await.unwrap();
    assert_eq!(
        (report.outcome, report.tail),
        (
            OperationOutcome::Failed,
            format!("[job {job}: deleted before it finished]")
        )
    );
    no_more_calls(&mut server).await;
}

// The API server out of reach, or a Job that never ends: the runner gives up at the timeout
// plus the report slack, like the wrapper, and says so.
#[tokio::test(start_paused = true)]
async fn no_outcome_within_the_timeout_and_the_slack_is_timed_out() {
    let (client, mut server) = mock_client(NS);
    let request = Request {
        timeout: Duration::from_secs(10),
        ..startup()
    };
    let job = spec::name(&request);
    let mut report = run(client, request.clone());
    server.answer(201, stored(&request, json!(null))).await;
    let mut reads = 0;
    let report = loop {
        tokio::select! {
            done = &mut report => break done.unwrap(),
            next = server.next() => {
                // The runner is done and its client gone: its report is there.
                let Some((call, send)) = next else {
                    break bounded("the report", &mut report).await.unwrap();
                };
                assert_eq!(call.path, format!("{JOBS}/{job}"));
                reads += 1;
                // Half the reads fail: each is retried at the next poll.
                if reads % 2 == 0 {
                    send.send_response(kube_mock::response(200, &stored(&request, running())));
                } else {
                    send.send_response(kube_mock::response(
                        503,
                        &status(503, "ServiceUnavailable", "etcd is down"),
                    ));
                }
            }
        }
    };
    assert_eq!(report.outcome, OperationOutcome::TimedOut);
    assert_eq!(
        report.tail,
        format!("[job {job}: no outcome within 40s (the timeout and the report slack)]")
    );
    // Polled every 5 s for the 40 s: the first read at 5 s, the last before the bound.
    assert_eq!(reads, 7);
    no_more_calls(&mut server).await;
}

// SPEC §5.4: a controller that was not there when a Job ended (it restarted, or another leads
// now) learns the outcome from the reporter, which writes it to the slot's operation record
// exactly as the wrapper does: matched by the operation's start, once.
#[tokio::test]
async fn the_reporter_writes_a_finished_jobs_outcome_to_its_slot_record_once() {
    let redis = server();
    let store = ClaimStore::new(conn(&redis).await, Keys::default());
    let group = GroupName::parse("pool-a").unwrap();
    let slot = name("bench-01");
    let started_at = stamp(store.now().await.unwrap());
    let op = SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at,
        timeout: Duration::from_secs(300),
        controller: "ctl-1".into(),
        streak: 1,
        end: None,
        off_at: None,
    };
    store.record_unclaimed(&group, &slot, &op).await.unwrap();
    let request = Request {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at,
        ..startup()
    };
    let job = spec::name(&request);
    // An earlier shutdown of the same slot, finished: its start is not the record's.
    let earlier = Request {
        started_at: started_at - chrono::Duration::minutes(30),
        ..request.clone()
    };
    let other = Request {
        slot: name("bench-02"),
        ..request.clone()
    };
    let mut stray = stored(&other, complete());
    stray["metadata"]["name"] = json!("stray");
    stray["metadata"]["uid"] = json!("uid-stray");
    stray["metadata"]["annotations"] = json!({ "fleet.dev/group": "pool-a" });
    let jobs = list(
        "batch/v1",
        "JobList",
        vec![
            stored(&earlier, complete()),
            stored(&request, failed_deadline()),
            stored(&other, running()),
            stray,
        ],
    );

    let (client, mut api) = mock_client(NS);
    let mut reporter = Reporter::new(client.clone(), NS, store.clone());
    let sweeping = tokio::spawn(async move {
        let swept = reporter.sweep().await;
        (reporter, swept)
    });
    let listed = api.answer(200, jobs.clone()).await;
    assert_eq!(
        (
            listed.method.as_str(),
            listed.path.as_str(),
            listed.query.as_str()
        ),
        (
            "GET",
            JOBS,
            "&labelSelector=app.kubernetes.io%2Fmanaged-by%3Dfleet"
        )
    );
    let first_pods = api.answer(200, pods("powered on\n", 0)).await;
    assert_eq!(first_pods.query, pods_of(&spec::name(&earlier)));
    let second_pods = api
        .answer(200, pods("soft-off sent\nno ack from BMC\n", 137))
        .await;
    assert_eq!(second_pods.query, pods_of(&job));
    let (mut reporter, swept) = bounded("the sweep", sweeping).await.unwrap();
    assert_eq!(
        swept.unwrap(),
        Swept {
            running: 1,
            recorded: 1,
            settled: 1,
            unreadable: 1,
            failed: 0,
        }
    );
    let end = store
        .read_groups(std::slice::from_ref(&group))
        .await
        .unwrap()
        .remove(0)
        .operations
        .by_slot[&slot]
        .end
        .clone()
        .expect("the outcome on the slot's record");
    assert_eq!(end.outcome, OperationOutcome::TimedOut);
    assert_eq!(end.duration_ms, 300_000);
    assert_eq!(
        end.tail,
        format!(
            "soft-off sent\nno ack from BMC\n[exit status: 137]\n[job {job}: Failed \
             (DeadlineExceeded: Job was active longer than specified deadline)]"
        )
    );

    // The next sweep writes nothing and reads no pod: those Jobs are settled.
    let sweeping = tokio::spawn(async move { reporter.sweep().await });
    api.answer(200, jobs.clone()).await;
    let swept = bounded("the second sweep", sweeping)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((swept.recorded, swept.settled, swept.running), (0, 3, 1));

    // A restarted controller's reporter reads them again, and the record keeps its outcome.
    let mut restarted = Reporter::new(client, NS, store.clone());
    let sweeping = tokio::spawn(async move { restarted.sweep().await });
    api.answer(200, jobs).await;
    api.answer(200, pods("powered on\n", 0)).await;
    api.answer(200, pods("a different tail\n", 1)).await;
    let swept = bounded("the restarted sweep", sweeping)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((swept.recorded, swept.settled), (0, 2));
    let again = store
        .read_groups(std::slice::from_ref(&group))
        .await
        .unwrap()
        .remove(0)
        .operations
        .by_slot[&slot]
        .end
        .clone();
    assert_eq!(again.map(|e| e.tail), Some(end.tail));
    assert_eq!(
        shape(api.calls())
            .into_iter()
            .filter(|(_, path, _)| path == PODS)
            .count(),
        4,
        "pods read once per finished Job and reporter"
    );
    api.assert_only_job_calls();
}

// Only the leader sweeps: a follower's reporter makes no call, and one that becomes the leader
// sweeps at once.
#[tokio::test]
async fn the_reporter_sweeps_only_while_leading() {
    let redis = server();
    let store = ClaimStore::new(conn(&redis).await, Keys::default());
    tokio::time::pause();
    let (client, mut api) = mock_client(NS);
    let (signal, leadership) = Signal::new();
    let shutdown = CancellationToken::new();
    let reporter = Reporter::new(client, NS, store).every(Duration::from_secs(10));
    let running = tokio::spawn(reporter.run(leadership, shutdown.clone()));
    assert!(
        api.quiet_for(Duration::from_secs(60)).await,
        "a follower swept"
    );
    signal.announce(Some("17"));
    let listed = api.answer(200, list("batch/v1", "JobList", vec![])).await;
    assert_eq!(
        (listed.method.as_str(), listed.path.as_str()),
        ("GET", JOBS)
    );
    api.answer(200, list("batch/v1", "JobList", vec![])).await;
    signal.announce(None);
    assert!(
        api.quiet_for(Duration::from_secs(60)).await,
        "swept after leadership ended"
    );
    shutdown.cancel();
    bounded("the reporter to stop", running).await.unwrap();
    api.assert_only_job_calls();
}

// The calls the tests see, as the RBAC grants them, are the calls the code declares.
#[test]
fn job_calls_are_the_calls_the_code_declares() {
    let mut seen: Vec<(&str, &str, &str)> = JOB_CALLS
        .iter()
        .map(|(_, _, verb, group, resource)| (*verb, *group, *resource))
        .collect();
    let mut declared = api::CALLS.to_vec();
    seen.sort();
    declared.sort();
    assert_eq!(seen, declared);
    assert_eq!(
        kube_mock::job_call(
            "GET",
            "/apis/batch/v1/namespaces/fleet/jobs/fleet-startup-x"
        ),
        Some("/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    );
    assert_eq!(kube_mock::job_call("DELETE", JOBS), None);
    assert_eq!(kube_mock::job_call("GET", "/api/v1/nodes"), None);
}
