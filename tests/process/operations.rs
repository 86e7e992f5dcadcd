//! The operation wrapper, `fleet operation` (SPEC §4.2, §5.4), as `fleet serve` runs it: a
//! process of its own per lifecycle operation, its outcome by exit status, a bounded output tail,
//! and the outcome reported to the store for whichever controller reads it next.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use fleet::domain::claim::{OperationKind, OperationOutcome};
use fleet::domain::name::GroupName;
use fleet::domain::operation::{SlotOp, stamp};
use fleet::lifecycle::{Job, Report, Request, Runner, TAIL_BYTES};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet_testing::Fixture;
use fleet_testing::fixture::{Driver, Group, Op};
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
        secret_env: Vec::new(),
    }
}

/// Runs the wrapper as a process with `job` on its stdin and returns its report and its peak
/// resident memory (kB): the high-water mark of its own address space (`VmHWM`), read while it
/// runs. Not `wait4`'s `ru_maxrss`: a child started by vfork and exec counts the high-water mark
/// of the address space it shared with its parent until the exec, and this parent is a test
/// binary running its whole tier beside it. The mark only grows, so the last reading before the
/// exit misses at most the last few milliseconds of the run.
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
    let mut stdout = child.stdout.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    while !reading.is_finished() {
        let hwm = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
        });
        peak = peak.max(hwm.unwrap_or(0));
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = reading.join().unwrap();
    child.wait().unwrap();
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (report, peak)
}

// An operation's output was buffered whole (a startup printing 300 MB took the
// controller from 10.8 MB to 304 MB resident). The wrapper reads and discards it as it arrives,
// keeping the 2 KiB tail.
#[test]
fn a_command_printing_300_mb_costs_the_wrapper_a_few_megabytes() {
    let job = Job {
        secret: None,
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

// Exit 0 is success even when the command leaves a background child holding its
// output (`nohup`, `ssh -f`); the old runner waited for end-of-file and recorded TimedOut.
#[test]
fn exit_0_with_a_child_holding_the_output_is_completed_at_once() {
    let job = Job {
        secret: None,
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

// The wrapper reports the outcome to the slot's operation record, where the next
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
        secret: None,
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

// ---------------------------------------------------------------------------------------------
// Drivers through the wrapper (SPEC §4.10): the same process, report and store record as a
// command; the tail is the audit record or the error's words.

fn wol_driver(target: std::net::SocketAddr) -> fleet::power::Driver {
    fleet::power::Driver {
        kind: fleet::power::DriverKind::Wol(fleet::power::wol::config::WolDriver {
            mac: "52:54:00:12:34:56".parse().unwrap(),
            broadcast: target,
        }),
        off: fleet::power::OffBy::Agent,
    }
}

/// A request of `kind` run by a Wake-on-LAN driver whose off is the agent's, with no command.
fn driven(kind: OperationKind, target: std::net::SocketAddr, timeout: Duration) -> Request {
    Request {
        kind,
        command: Vec::new(),
        driver: Some(wol_driver(target)),
        ..request("", timeout)
    }
}

fn report_to(server: &fleet_testing::RedisServer) -> fleet::lifecycle::ReportTo {
    fleet::lifecycle::ReportTo {
        url: server.url(),
        ca_file: None,
        sentinel_auth: None,
        timeout: Duration::from_secs(10),
        prefix: Keys::default().prefix().to_owned(),
    }
}

#[tokio::test]
async fn a_wake_on_lan_startup_sends_the_magic_packets_through_the_wrapper() {
    let listener = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let job = Job {
        secret: None,
        request: driven(OperationKind::Startup, target, Duration::from_secs(10)),
        report_to: None,
    };
    let (report, _) = tokio::task::spawn_blocking(move || wrapper(&job))
        .await
        .unwrap();
    assert_eq!(
        report.outcome,
        OperationOutcome::Completed,
        "{}",
        report.tail
    );
    let mut packet = vec![0xFF; 6];
    for _ in 0..16 {
        packet.extend_from_slice(&[0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    }
    for n in 0..3 {
        let mut buf = [0u8; 256];
        let (len, _) = bounded("a magic packet", listener.recv_from(&mut buf))
            .await
            .unwrap();
        assert_eq!(&buf[..len], packet.as_slice(), "packet {n}");
    }
    let lines: Vec<&str> = report.tail.lines().collect();
    assert_eq!(lines.len(), 4, "{}", report.tail);
    // Each line: when it was sent (ms from the action's start), what, and the answer.
    for line in &lines[..3] {
        let (when, what) = line.split_once(": ").unwrap();
        assert!(
            when.strip_prefix("wol +")
                .and_then(|ms| ms.strip_suffix("ms"))
                .is_some_and(|ms| ms.parse::<u64>().is_ok()),
            "{line}"
        );
        assert!(
            what.starts_with("magic packet for 52:54:00:12:34:56 to 127.0.0.1:")
                && what.ends_with(" -> sent (102 bytes); a machine answers by beating"),
            "{line}"
        );
    }
    assert!(
        lines[3].starts_with("wol: 3 attempt(s) in ")
            && lines[3].ends_with("verified nothing, no escalation"),
        "{}",
        report.tail
    );
}

/// Runs the shutdown of a slot whose driver's off is its agent's, with an agent of `bench-01`
/// running in this process (`power_off`: its command, `None` for none), and returns the report
/// and what the store recorded for it.
async fn agent_off(
    power_off: Option<String>,
    agent_runs: bool,
    timeout: Duration,
) -> (Report, fleet::domain::operation::OpEnd) {
    let server = server();
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let group = GroupName::parse("pool-a").unwrap();
    let started_at = stamp(store.now().await.unwrap());
    let op = SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at,
        timeout,
        controller: "test".into(),
        streak: 1,
        end: None,
        off_at: None,
    };
    store
        .record_unclaimed(&group, &name("bench-01"), &op)
        .await
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let agent = agent_runs.then(|| {
        let agent = fleet::agent::Agent::new(
            fleet::agent::Config {
                name: name("bench-01"),
                interval: Duration::from_millis(100),
                ttl: Duration::from_secs(60),
                final_ttl: Duration::ZERO,
                final_hold: None,
                power_off,
            },
            server.endpoint(),
            Keys::default(),
        );
        tokio::spawn(agent.run(shutdown.clone()))
    });
    let mut req = driven(
        OperationKind::Shutdown,
        "127.0.0.1:9".parse().unwrap(),
        timeout,
    );
    req.started_at = started_at;
    let job = Job {
        secret: None,
        request: req,
        report_to: Some(report_to(&server)),
    };
    let (report, _) = tokio::task::spawn_blocking(move || wrapper(&job))
        .await
        .unwrap();
    shutdown.cancel();
    if let Some(task) = agent {
        bounded("the agent to stop", task).await.unwrap();
    }
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
    (report, end)
}

#[tokio::test]
async fn an_off_through_the_agent_completes_when_the_agent_accepts_and_its_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("off");
    let command = format!("echo off > '{}'", mark.display());
    let (report, end) = agent_off(Some(command), true, Duration::from_secs(10)).await;
    assert_eq!(
        report.outcome,
        OperationOutcome::Completed,
        "{}",
        report.tail
    );
    let lines: Vec<&str> = report.tail.lines().collect();
    assert_eq!(lines.len(), 2, "{}", report.tail);
    assert!(
        lines[0].starts_with("agent +")
            && lines[0].contains("ms: power-off request ")
            && lines[0].ends_with(
                " to the agent of bench-01 -> accepted: it runs its power-off command; the \
                 heartbeat's end shows the machine off"
            ),
        "{}",
        report.tail
    );
    assert_eq!((end.outcome, end.tail), (report.outcome, report.tail));
    bounded("the power-off command's mark", async {
        while std::fs::read_to_string(&mark).ok().as_deref() != Some("off\n") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn an_off_refused_by_an_agent_without_the_option_fails_with_its_reason() {
    let (report, end) = agent_off(None, true, Duration::from_secs(10)).await;
    assert_eq!(report.outcome, OperationOutcome::Failed);
    assert!(
        report
            .tail
            .starts_with("agent of bench-01: refused power-off request ")
            && report.tail.ends_with(fleet::agent::REFUSAL),
        "{}",
        report.tail
    );
    assert_eq!(end.outcome, OperationOutcome::Failed);
}

#[tokio::test]
async fn an_off_no_agent_answers_times_out_at_the_timeout_saying_what_to_look_at() {
    let started = std::time::Instant::now();
    let (report, end) = agent_off(None, false, Duration::from_secs(2)).await;
    assert_eq!(report.outcome, OperationOutcome::TimedOut);
    assert!(
        report.tail.starts_with("agent of bench-01 (no answer): the power-off request had no answer within 2s")
            && report.tail.ends_with("is the bench's fleet agent running, reaching Redis, with an ACL file written by this fleet's `fleet acl`?"),
        "{}",
        report.tail
    );
    assert_eq!(end.outcome, OperationOutcome::TimedOut);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// What an operation inherits (SPEC §4.2).

/// Every value of every key of `server`, as text: what a search for a secret must cover (the
/// timelines, the operation records, the slot reports, the ledgers).
async fn everything_stored(server: &fleet_testing::RedisServer) -> String {
    let keys: Vec<String> = raw(server, &["KEYS", "*"]).await;
    let mut all = String::new();
    for key in keys {
        let kind: String = raw(server, &["TYPE", &key]).await;
        let value: redis::Value = match kind.as_str() {
            "string" => raw(server, &["GET", &key]).await,
            "hash" => raw(server, &["HGETALL", &key]).await,
            "list" => raw(server, &["LRANGE", &key, "0", "-1"]).await,
            "set" => raw(server, &["SMEMBERS", &key]).await,
            "zset" => raw(server, &["ZRANGE", &key, "0", "-1", "WITHSCORES"]).await,
            "stream" => raw(server, &["XRANGE", &key, "-", "+"]).await,
            other => panic!("{key} is a {other}"),
        };
        all.push_str(&format!("{key} {value:?}\n"));
    }
    all
}

// A BMC's `password_env` secret was inherited by every command operation, so a script
// that printed its environment put it in the timeline and on the page. A real `fleet serve`, with
// that secret and a Redis URL with a password in its environment, runs a startup whose command
// prints its environment: neither value is anywhere in what is recorded (the claim's timeline,
// the slot's operation record, any key, the log), the variables an operation is promised are
// there (fleet's own, the group's env, the rest of the controller's environment), and the slot
// whose driver reads the secret still gets it in its own wrapper.
#[tokio::test]
async fn an_operation_gets_none_of_the_secrets_fleet_read_and_all_it_is_promised() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    // The secret's value is written split in two, so that the configuration (which the command
    // line is part of) never holds it whole.
    let script = r#"env | grep -e '^FLEET_' -e '^GROUP_VAR=' -e '^VISIBLE_VAR=' -e '^BMC_PASS=' | sort; echo "secrets=$(env | grep -c -e s3cr""et-bmc -e s3cr""et-url)"; "$BIN" --redis "$REDIS" beat "$FLEET_SLOT" --ttl 1h"#;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // A BMC that refuses every connection: the driver's operation fails there (within its 2 s),
    // after it read its password.
    let bmc = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    drop(listener);
    let startup = Op::sh(script)
        .env("GROUP_VAR", "given")
        .env("BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("REDIS", server.url());
    let driver = Driver::redfish(&bmc)
        .username("admin")
        .password_env("BMC_PASS")
        .insecure(true);
    let text = Fixture::new()
        .group(
            Group::new("pool-a")
                .max(1)
                .ungated()
                .startup(startup)
                .shutdown(Op::command(["true"])),
        )
        .group(
            Group::new("bmc")
                .max(1)
                .ungated()
                .driver(driver)
                .timing("job_timeout", "2s"),
        )
        .slots("pool-a", ["bench-01"])
        .slots("bmc", ["bench-02"])
        .yaml();
    let parsed = fleet::config::parse(&text, std::path::Path::new("fleet.yaml")).unwrap();
    assert_eq!(parsed.secret_env(), ["BMC_PASS"]);
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, &text).unwrap();
    let args = QUICK_SERVE;
    let env = [
        ("BMC_PASS", "s3cret-bmc-pw"),
        ("VISIBLE_VAR", "inherited"),
        // Not the URL it runs with (`--redis` is): a password in the variable all the same.
        (
            "FLEET_REDIS_URL",
            "redis://admin:s3cret-url-pw@10.0.0.1:6379",
        ),
    ];
    let mut serve = Serve::start_with_env("serve", &server.url(), &path, &args, &env);
    serve.log(&["became the leader"]).await;
    request_claim(&server, "pool-a", "bench-01", "bench-01-1").await;
    serve
        .log(&["claim moved", "slot=bench-01", "to=ready"])
        .await;

    let described = fleet_ok(&server, &["describe", "bench-01"]);
    for promised in [
        "FLEET_SLOT=bench-01",
        "FLEET_GROUP=pool-a",
        "FLEET_CLAIM=bench-01-1",
        "FLEET_ATTEMPT=",
        "FLEET_PROVIDER_ID=fleet://bench-01",
        "FLEET_OPERATION=startup",
        "FLEET_CONTROLLER=",
        "GROUP_VAR=given",
        "VISIBLE_VAR=inherited",
        "secrets=0",
    ] {
        assert!(described.contains(promised), "{promised}:\n{described}");
    }
    for withheld in ["BMC_PASS", "FLEET_REDIS_URL", "s3cret"] {
        assert!(!described.contains(withheld), "{withheld}:\n{described}");
    }

    // The driver's own wrapper still reads the secret: its startup fails at the BMC, not for a
    // password it could not find.
    request_claim(&server, "bmc", "bench-02", "bench-02-1").await;
    serve
        .log(&["operation ended", "slot=bench-02", "startup"])
        .await;
    let driven = fleet_ok(&server, &["describe", "bench-02"]);
    assert!(driven.contains(&bmc), "{driven}");
    assert!(!driven.contains("is not set"), "{driven}");
    assert!(!driven.contains("s3cret"), "{driven}");

    let stored = everything_stored(&server).await;
    assert!(
        stored.contains("VISIBLE_VAR=inherited"),
        "the output is stored"
    );
    assert!(!stored.contains("s3cret"), "{stored}");
    let lines = serve.stop().await;
    assert!(!lines.iter().any(|l| l.contains("s3cret")), "{lines:#?}");
}

/// What a startup script prints of `fleet serve`, its wrapper's parent: its environment's
/// `FLEET_REDIS_URL` and `BMC_PASS` lines (or why it could not read them) and whether reading its
/// memory was refused; then it fails, so its output is recorded and nothing else happens.
const SNOOP: &str = r#"serve=$(cut -d' ' -f4 /proc/$PPID/stat); echo "environ: $(tr '\0' '\n' < /proc/$serve/environ 2>&1 | grep -e FLEET_REDIS_URL -e BMC_PASS -e denied | tr '\n' ' ')"; echo "mem: $(dd if=/proc/$serve/mem bs=1 count=1 2>&1 | grep -c denied)"; exit 1"#;

/// A Redis whose user `ops` has the password `s3cret-url-pw`, on a TCP port, and the URL that
/// names it.
fn guarded_redis() -> (fleet_testing::RedisServer, String) {
    let server = fleet_testing::RedisServer::with(fleet_testing::Options {
        tcp: true,
        args: ["--user", "ops", "on", ">s3cret-url-pw", "~*", "&*", "+@all"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    })
    .unwrap();
    let url = format!(
        "redis://ops:s3cret-url-pw@127.0.0.1:{}/",
        server.port().unwrap()
    );
    (server, url)
}

/// `fleet serve` with the URL in `FLEET_REDIS_URL` and a BMC password in `BMC_PASS` (its driver
/// slot's), as `uid` when given; its stderr's lines.
fn serve_with_secrets(
    url: &str,
    config: &std::path::Path,
    uid: Option<u32>,
) -> (
    tokio::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"));
    command
        .args(["serve", "--config"])
        .arg(config)
        .args(QUICK_SERVE)
        .args(["--grpc-addr", "127.0.0.1:0"])
        .env("FLEET_REDIS_URL", url)
        .env("BMC_PASS", "s3cret-bmc-pw")
        .env("FLEET_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let mut child = command.spawn().expect("starting fleet serve");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

async fn line_with(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>, words: &[&str]) {
    bounded(&format!("fleet serve to log {words:?}"), async {
        loop {
            let line = lines.recv().await.expect("fleet serve ended");
            if words.iter().all(|w| line.contains(w)) {
                return;
            }
        }
    })
    .await;
}

/// The configuration of the snooping startup: `bench-01` runs it; `bench-02`'s Redfish driver
/// reads `BMC_PASS`, so fleet holds that secret too.
fn snooping_config(dir: &std::path::Path) -> std::path::PathBuf {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bmc = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    drop(listener);
    let text = Fixture::new()
        .group(
            Group::new("pool-a")
                .max(1)
                .ungated()
                .startup(Op::sh(SNOOP))
                .shutdown(Op::command(["true"])),
        )
        .group(
            Group::new("bmc")
                .max(1)
                .ungated()
                .driver(
                    Driver::redfish(&bmc)
                        .username("admin")
                        .password_env("BMC_PASS")
                        .insecure(true),
                )
                .timing("job_timeout", "2s"),
        )
        .slots("pool-a", ["bench-01"])
        .slots("bmc", ["bench-02"])
        .yaml();
    let path = dir.join("fleet.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

// SPEC §7.2 S6: a startup script read `fleet serve`'s environment through /proc and put the Redis
// URL with its password into `fleet describe` and the page. fleet serve is not dumpable now, so a
// program under its user reads neither its environment nor its memory: here both as `nobody`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_under_fleet_serves_user_reads_neither_its_environment_nor_its_memory() {
    use std::os::unix::fs::PermissionsExt;
    let (_server, url) = guarded_redis();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = snooping_config(dir.path());
    let (_serve, mut lines) = serve_with_secrets(&url, &config, Some(65_534));
    line_with(&mut lines, &["became the leader"]).await;
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &url, "claim", "bench-01"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    line_with(&mut lines, &["operation ended", "bench-01"]).await;
    let described = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &url, "describe", "bench-01"])
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.contains("/environ: Permission denied"),
        "{described}"
    );
    assert!(described.contains("mem: 1"), "{described}");
    assert!(!described.contains("s3cret"), "{described}");
}

// SPEC §7.2 S6: the secrets fleet serve needs after start are not left in its environment: even a
// reader that may read it (root, here) sees the Redis URL's and the BMC password's bytes
// overwritten, and the driver's wrapper still gets its password, with its job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_serves_environment_holds_none_of_the_secrets_it_needs_after_start() {
    let (_server, url) = guarded_redis();
    let dir = tempfile::tempdir().unwrap();
    let config = snooping_config(dir.path());
    let (_serve, mut lines) = serve_with_secrets(&url, &config, None);
    line_with(&mut lines, &["became the leader"]).await;
    let fleet = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .arg("--redis")
            .arg(&url)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    fleet(&["claim", "bench-01"]);
    line_with(&mut lines, &["operation ended", "bench-01"]).await;
    let described = fleet(&["describe", "bench-01"]);
    assert!(described.contains("FLEET_REDIS_URL=****"), "{described}");
    assert!(described.contains("BMC_PASS=****"), "{described}");
    assert!(!described.contains("s3cret"), "{described}");
    // The driver's wrapper reads its password from its job: its startup fails at the BMC, which
    // refuses every connection, not for a password it could not find.
    fleet(&["claim", "bench-02"]);
    line_with(&mut lines, &["operation ended", "slot=bench-02", "startup"]).await;
    let driven = fleet(&["describe", "bench-02"]);
    assert!(driven.contains("127.0.0.1:"), "{driven}");
    assert!(!driven.contains("is not set"), "{driven}");
    assert!(!driven.contains("s3cret"), "{driven}");
}
