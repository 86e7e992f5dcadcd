//! The operation wrapper, `fleet operation` (SPEC §4.2, §5.4), as `fleet serve` runs it: a
//! process of its own per lifecycle operation, its outcome by exit status, a bounded output tail,
//! and the outcome reported to the store for whichever controller reads it next.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use fleet::domain::claim::{OperationKind, OperationOutcome};
use fleet::domain::name::GroupName;
use fleet::domain::operation::{SlotOp, stamp};
use fleet::lifecycle::{Job, Report, Request, Runner, TAIL_BYTES};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use support::*;

fn request(script: &str, timeout: Duration) -> Request {
    Request {
        kind: OperationKind::Shutdown,
        slot: name("bench-01"),
        group: GroupName::parse("pool-a").unwrap(),
        claim: None,
        attempt: 0,
        provider_id: "fleet://bench-01".into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::new(),
        dir: None,
        timeout,
        controller: "test".into(),
        started_at: chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap(),
        job: None,
        fence: None,
        driver: None,
    }
}

/// Runs the wrapper as a process with `job` on its stdin and returns its report and its peak
/// resident memory (kB), read from the kernel's account of that one child.
// The child is reaped by wait4, which also returns its resource usage.
#[allow(clippy::zombie_processes)]
fn wrapper(job: &Job) -> (Report, i64) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("operation")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(job).unwrap())
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    let mut status = 0;
    // SAFETY: a plain rusage struct the kernel fills for this child, which is ours to reap.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid);
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (report, usage.ru_maxrss)
}

// Issue 10 #10: an operation's output was buffered whole (a startup printing 300 MB took the
// controller from 10.8 MB to 304 MB resident). The wrapper reads and discards it as it arrives,
// keeping the 2 KiB tail.
#[test]
fn a_command_printing_300_mb_costs_the_wrapper_a_few_megabytes() {
    let job = Job {
        request: request(
            "head -c 300000000 /dev/zero | tr '\\0' x; echo; echo last line",
            Duration::from_secs(120),
        ),
        report_to: None,
    };
    let (report, peak_kb) = wrapper(&job);
    assert_eq!(report.outcome, OperationOutcome::Completed);
    assert!(
        report.tail.ends_with("x\nlast line"),
        "{:?}",
        &report.tail[report.tail.len() - 20..]
    );
    assert!(report.tail.len() <= TAIL_BYTES);
    eprintln!("the wrapper peaked at {peak_kb} kB");
    assert!(peak_kb < 40 * 1024, "the wrapper peaked at {peak_kb} kB");
}

// Issue 10 #5: exit 0 is success even when the command leaves a background child holding its
// output (`nohup`, `ssh -f`); the old runner waited for end-of-file and recorded TimedOut.
#[test]
fn exit_0_with_a_child_holding_the_output_is_completed_at_once() {
    let job = Job {
        request: request("echo asked; (sleep 30) & exit 0", Duration::from_secs(5)),
        report_to: None,
    };
    let started = std::time::Instant::now();
    let (report, _) = wrapper(&job);
    assert_eq!(
        (report.outcome, report.tail.as_str()),
        (OperationOutcome::Completed, "asked")
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

// Issue 10 #4: the wrapper reports the outcome to the slot's operation record, where the next
// controller reads it, whether or not anyone waits for it. Here nobody does: the runner's future
// is dropped as soon as the operation started (a controller that stopped).
#[tokio::test]
async fn the_outcome_reaches_the_store_when_nobody_waits_for_it() {
    let server = server();
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let group = GroupName::parse("pool-a").unwrap();
    let started_at = stamp(store.now().await.unwrap());
    let op = SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at,
        timeout: Duration::from_secs(10),
        controller: "test".into(),
        streak: 1,
        end: None,
        off_at: None,
    };
    store
        .record_unclaimed(&group, &name("bench-01"), &op)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let mut req = request(
        &format!(
            "touch {}; sleep 0.5; echo powered off; exit 3",
            marker.display()
        ),
        Duration::from_secs(10),
    );
    req.started_at = started_at;
    let run = exec(&server);
    let running = tokio::spawn(async move { run.run(req).await });
    bounded("the wrapper to start", async {
        while !marker.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    running.abort();
    let end = bounded("the outcome in the store", async {
        loop {
            let read = store
                .read_groups(std::slice::from_ref(&group))
                .await
                .unwrap()
                .remove(0);
            if let Some(end) = read.operations.by_slot[&name("bench-01")].end.clone() {
                return end;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(end.outcome, OperationOutcome::Failed);
    assert!(end.tail.starts_with("powered off"), "{}", end.tail);
    assert!(end.tail.contains("exit status: 3"), "{}", end.tail);
}

// The wrapper refuses what is not a job (exit 2), and says what it is for.
#[test]
fn the_wrapper_refuses_anything_but_a_job() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("operation")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("runs one lifecycle operation for `fleet serve`")
    );
    // It does not show in the help.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        !help
            .lines()
            .any(|l| l.trim_start().starts_with("operation ")),
        "{help}"
    );
}

// The command never sees the variables the controller runs with: FLEET_REDIS_URL may hold a
// password (SPEC §2.7); it gets fleet's own FLEET_SLOT and the rest.
#[test]
fn the_command_does_not_inherit_the_controllers_secrets() {
    let job = Job {
        request: request(
            "env | grep '^FLEET_' | sort | cut -d= -f1 | tr '\\n' ' '; echo; echo \"url=$FLEET_REDIS_URL\"",
            Duration::from_secs(10),
        ),
        report_to: None,
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("operation")
        .env("FLEET_REDIS_URL", "redis://admin:hunter2@10.0.0.1:6379")
        .env("FLEET_TLS_KEY", "/etc/fleet/key.pem")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&job).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!report.tail.contains("hunter2"), "{}", report.tail);
    assert!(
        report.tail.contains("url=\n") || report.tail.ends_with("url="),
        "{}",
        report.tail
    );
    assert!(report.tail.starts_with("FLEET_ATTEMPT FLEET_CLAIM FLEET_CONTROLLER FLEET_GROUP FLEET_OPERATION FLEET_PROVIDER_ID FLEET_SLOT"), "{}", report.tail);
}
