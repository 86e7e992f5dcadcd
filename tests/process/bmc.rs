//! The BMC's reading (SPEC §4.10) against real peers: the leader's reader (`power::watch`) reads a
//! Redfish BMC (sushy-tools' emulator, which applies a power change 1 to 11 s after a Reset) into
//! the store (`store::bmc`), and the views show it beside the heartbeat; a BMC that cannot be
//! reached reads `unknown` with its reason, and the slot keeps its heartbeat's power. Each test
//! starts its own redis-server and, where it needs one, its own emulator. Nothing here sleeps to
//! synchronise: the store is polled, every wait bounded.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::config::Config;
use fleet::domain::claim::{OperationKind, OperationOutcome};
use fleet::domain::name::GroupName;
use fleet::domain::operation::{OpEnd, SlotOp};
use fleet::power::DriverKind;
use fleet::power::{Bmc, Intent, PowerState};
use fleet::reconcile::bmc::Reader;
use fleet::store::bmc::{BmcReading, BmcState, BmcStore};
use fleet::store::catalog::Catalog;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::lease::Signal;
use fleet_testing::fixture::{Driver, Group, Slot};
use fleet_testing::{Fixture, RedisServer};
use support::*;

/// A running `sushy-emulator --fake` on a free loopback port (its one system starts Off),
/// killed on drop.
struct Sushy {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Sushy {
    fn start() -> Sushy {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("sushy.conf"),
            format!(
                "SUSHY_EMULATOR_STATE_DIR = {:?}\n",
                dir.path().join("state").display().to_string()
            ),
        )
        .expect("the emulator's configuration");
        let mut sushy = Sushy {
            child: Command::new("true").spawn().expect("true runs"),
            dir,
            port: 0,
        };
        // A free port, and a fresh one if another process took it between the pick and the bind.
        for _ in 0..5 {
            let _ = sushy.child.wait();
            sushy.port = free_port();
            let log = std::fs::File::create(sushy.dir.path().join("emulator.log")).expect("a log");
            sushy.child = Command::new("sushy-emulator")
                .arg("--fake")
                .arg("--config")
                .arg(sushy.dir.path().join("sushy.conf"))
                .args([
                    "--interface",
                    "127.0.0.1",
                    "--port",
                    &sushy.port.to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("a log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "sushy-emulator cannot be started ({e}): run scripts/ensure-deps.sh, \
                         which installs it with pip install sushy-tools"
                    )
                });
            if sushy.ready() {
                return sushy;
            }
            let _ = sushy.child.kill();
        }
        panic!("sushy-emulator did not start on any of 5 ports");
    }

    /// Polls until the service root answers 200 (within 30 s); false when the emulator exited.
    fn ready(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut head = [0u8; 12];
                if stream
                    .write_all(b"GET /redfish/v1/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                    .is_ok()
                    && stream.read_exact(&mut head).is_ok()
                    && head.ends_with(b"200")
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("sushy-emulator did not answer in 30 s");
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// Group `g` of up to `max` slots, each with a Redfish driver at `endpoint` (plain http, as a
/// test BMC), its password in a file under `dir`.
fn redfish_group(dir: &Path, endpoint: &str, max: u32) -> Group {
    let password = dir.join("bmc-password");
    std::fs::write(&password, "s3cret-bmc-pw\n").expect("the password file");
    let bmc = Driver::redfish(endpoint)
        .username("admin")
        .password_file(&password)
        .insecure(true);
    Group::new("g").max(max).ungated().driver(bmc)
}

/// A configuration of group `g` whose `slots` each have a Redfish driver at `endpoint` (plain
/// http, as a test BMC), its password in a file under `dir`.
fn config_text(dir: &Path, endpoint: &str, slots: &[&str]) -> String {
    Fixture::new()
        .group(redfish_group(dir, endpoint, slots.len() as u32))
        .slots("g", slots)
        .yaml()
}

fn parse(text: &str) -> Config {
    fleet::config::parse(text, Path::new("fleet.yaml")).expect("a valid configuration")
}

fn group() -> GroupName {
    GroupName::parse("g").expect("valid group")
}

/// The leader's reader over `server`, reading every 200 ms under token `7` (the group's fence
/// raised to it, as a new leader does), until the returned signal says it no longer leads.
async fn leading_reader(server: &RedisServer, config: Config) -> Signal {
    let store = ClaimStore::new(conn(server).await, Keys::default());
    assert!(store.raise_fence(&group(), "7").await.expect("the fence"));
    let (signal, leadership) = Signal::new();
    signal.announce(Some("7"));
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(config));
    let reader = Reader::new(conn(server).await, Keys::default(), rx)
        .every(Duration::from_millis(200))
        .run(leadership, tokio_util::sync::CancellationToken::new());
    tokio::spawn(async move {
        // The configuration's sender lives as long as the reader.
        let _tx = _tx;
        reader.await;
    });
    signal
}

/// The slot's reading now, if any.
async fn reading(server: &RedisServer, slot: &str) -> Option<BmcReading> {
    let store = BmcStore::new(conn(server).await, Keys::default());
    let mut read = store
        .read_all(&[(group(), vec![name(slot)])])
        .await
        .expect("the readings are read");
    read.remove(0)
        .remove(0)
        .map(|r| r.expect("a reading fleet wrote"))
}

/// Polls the store (every 20 ms, at most `within`) until `slot`'s reading is `state`.
async fn wait_for(
    server: &RedisServer,
    slot: &str,
    state: BmcState,
    within: Duration,
) -> BmcReading {
    let polled = tokio::time::timeout(within, async {
        loop {
            if let Some(r) = reading(server, slot).await.filter(|r| r.state == state) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    polled.unwrap_or_else(|_| panic!("{slot} did not read {state:?} within {within:?}"))
}

/// Runs the real binary against `server`; its stdout, having asserted exit 0.
fn fleet(server: &RedisServer, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .output()
        .expect("fleet runs");
    support::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `fleet slots -o json` row of `slot`.
fn slot_row(server: &RedisServer, slot: &str) -> serde_json::Value {
    let rows: serde_json::Value =
        serde_json::from_str(&fleet(server, &["slots", "-o", "json"])).expect("json rows");
    rows.as_array()
        .expect("an array")
        .iter()
        .find(|r| r["name"] == slot)
        .cloned()
        .unwrap_or_else(|| panic!("no row {slot}: {rows:#}"))
}

#[tokio::test]
async fn the_leaders_reader_writes_off_then_on_after_a_power_on_through_the_driver() {
    let server = server();
    let sushy = Sushy::start();
    let dir = tempfile::tempdir().unwrap();
    let config = parse(&config_text(dir.path(), &sushy.endpoint(), &["n1"]));
    let _signal = leading_reader(&server, config.clone()).await;

    let off = wait_for(&server, "n1", BmcState::Off, Duration::from_secs(20)).await;
    assert_eq!(off.why, None);
    // A reading stands a few periods and one read's timeout, never forever.
    let ttl: i64 = raw(&server, &["PTTL", "{fleet:g}:bmc:n1"]).await;
    assert!(ttl > 0 && ttl <= 30_600, "{ttl}");

    // Powered on through the slot's own driver (as the operation wrapper does): the reader,
    // which polled it off meanwhile, reads it on once it is.
    let DriverKind::Redfish(driver) = &config.slots[&name("n1")].driver.as_ref().unwrap().kind
    else {
        panic!("a redfish slot");
    };
    let bmc = fleet::power::drive::redfish(driver).expect("the driver");
    let audit = tokio::time::timeout(
        Duration::from_secs(40),
        bmc.power(Intent::On, Duration::from_secs(30)),
    )
    .await
    .expect("the driver's own bound")
    .expect("powered on");
    assert_eq!(audit.verified, Some(PowerState::On));
    let on = wait_for(&server, "n1", BmcState::On, Duration::from_secs(10)).await;
    assert!(on.at > off.at, "{on:?} after {off:?}");

    // The views show it beside the heartbeat's power, which it does not change: no controller
    // has observed the slot, so its power stays unknown, whatever the BMC says.
    Catalog::of(&config)
        .publish(&mut conn(&server).await, &Keys::default())
        .await
        .unwrap();
    let row = slot_row(&server, "n1");
    assert_eq!(row["power"], "unknown", "{row:#}");
    assert_eq!(row["bmc"]["state"], "on", "{row:#}");
    assert_eq!(row["bmc"]["reason"], serde_json::Value::Null, "{row:#}");
    assert!(row["bmc"]["age_ms"].as_u64().unwrap() < 10_000, "{row:#}");
    let table = fleet(&server, &["slots"]);
    let header = table.lines().find(|l| l.starts_with("SLOT")).unwrap();
    assert!(
        header.contains("POWER") && header.contains("BMC"),
        "{table}"
    );
    let line = table.lines().find(|l| l.contains("n1")).unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert!(cells.windows(2).any(|w| w == ["unknown", "on"]), "{table}");
    let described = fleet(&server, &["describe", "n1"]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("BMC:") && l.contains("on, read ")),
        "{described}"
    );
}

#[tokio::test]
async fn a_slot_is_not_read_while_its_operation_runs_and_is_read_again_once_it_ends() {
    let server = server();
    let sushy = Sushy::start();
    let dir = tempfile::tempdir().unwrap();
    // Two slots behind one BMC: one chain, read in name order, so once `b` is read in a round,
    // `a`'s turn in that round is over.
    let config = parse(&config_text(dir.path(), &sushy.endpoint(), &["a", "b"]));
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    assert!(store.raise_fence(&group(), "7").await.unwrap());
    let started_at = fleet::domain::operation::stamp(store.now().await.unwrap());
    let op = SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at,
        timeout: Duration::from_secs(300),
        controller: "test".into(),
        streak: 1,
        end: None,
        off_at: None,
    };
    store
        .fenced("7")
        .record_unclaimed(&group(), &name("a"), &op)
        .await
        .unwrap();
    let _signal = leading_reader(&server, config).await;

    let b = wait_for(&server, "b", BmcState::Off, Duration::from_secs(20)).await;
    // Three more rounds, so `a` was passed over in each.
    let polled = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let later = reading(&server, "b").await.unwrap();
            if (later.at - b.at).num_milliseconds() >= 600 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    polled.expect("b read again");
    assert_eq!(
        reading(&server, "a").await,
        None,
        "read while its operation ran"
    );

    let end = OpEnd {
        outcome: OperationOutcome::Completed,
        finished_at: started_at,
        duration_ms: 10,
        tail: "redfish: 1 attempt(s) in 10 ms, verified off, no escalation".into(),
    };
    assert!(
        store
            .end_operation(&group(), &name("a"), started_at, &end)
            .await
            .unwrap()
    );
    wait_for(&server, "a", BmcState::Off, Duration::from_secs(20)).await;
}

#[tokio::test]
async fn an_unreachable_bmc_reads_unknown_with_its_reason_and_the_slot_keeps_its_heartbeat() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    // A port nobody listens on: every connection is refused.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, config_text(dir.path(), &endpoint, &["n1"])).unwrap();
    // The machine is on by its heartbeat, and claimed before the controller starts, so the law
    // wants it on (pending, on: the readiness gate) and fires nothing at its BMC.
    presence(&server)
        .await
        .beat(&beat("n1", Duration::from_secs(120)))
        .await
        .unwrap();
    request_claim(&server, "g", "n1", "n1-1").await;
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--lease",
        "1s",
        "--bmc-interval",
        "200ms",
    ];
    let mut serve = Serve::start("serve", &server, &path, &args);
    serve.log(&["became the leader"]).await;
    serve.log(&["claim moved", "slot=n1", "to=ready"]).await;

    let unknown = wait_for(&server, "n1", BmcState::Unknown, Duration::from_secs(20)).await;
    let why = unknown.why.clone().unwrap_or_default();
    assert!(
        why.contains(&endpoint) && why.contains("unreachable"),
        "{why}"
    );
    assert!(!why.contains("s3cret"), "no password in the reason: {why}");

    // Its heartbeat is what counts: still on, still ready, and nothing was fired at it.
    let row = slot_row(&server, "n1");
    assert_eq!(row["power"], "on", "{row:#}");
    assert_eq!(row["phase"], "ready", "{row:#}");
    assert_eq!(row["bmc"]["state"], "unknown", "{row:#}");
    assert!(
        row["bmc"]["reason"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{row:#}"
    );
    assert_eq!(fleet(&server, &["live"]), "n1\n");
    let read = ClaimStore::new(conn(&server).await, Keys::default())
        .read_groups(&[group()])
        .await
        .unwrap();
    assert!(
        read[0].operations.by_slot.is_empty(),
        "{:?}",
        read[0].operations
    );

    let table = fleet(&server, &["slots"]);
    let line = table.lines().find(|l| l.contains("n1")).unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert!(cells.windows(2).any(|w| w == ["on", "unknown"]), "{table}");
    let described = fleet(&server, &["describe", "n1"]);
    let bmc = described
        .lines()
        .find(|l| l.starts_with("BMC:"))
        .unwrap_or_else(|| panic!("{described}"));
    assert!(
        bmc.contains("unknown, read ") && bmc.contains("unreachable"),
        "{described}"
    );
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("Power:") && l.contains("on")),
        "{described}"
    );
    let lines = serve.stop().await;
    assert!(!lines.iter().any(|l| l.contains(" ERROR ")), "{lines:#?}");
}

#[tokio::test]
async fn a_slot_without_a_bmc_shows_none_and_a_foreign_reading_spoils_only_its_own_column() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    // A Wake-on-LAN machine beside the Redfish one: its own driver, of another type.
    let wol = Driver::wol().mac("52:54:00:12:34:56").off("agent");
    let text = Fixture::new()
        .group(redfish_group(dir.path(), "http://127.0.0.1:1", 2))
        .slots("g", ["n1"])
        .slot(Slot::new("mini", "g").driver(wol))
        .yaml();
    let config = parse(&text);
    Catalog::of(&config)
        .publish(&mut conn(&server).await, &Keys::default())
        .await
        .unwrap();
    let _: () = raw(&server, &["SET", "{fleet:g}:bmc:n1", "nonsense"]).await;
    let o = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &server.url(), "slots", "-o", "json"])
        .output()
        .unwrap();
    support::contract::check(
        &["slots", "-o", "json"],
        &String::from_utf8_lossy(&o.stdout),
    );
    assert_eq!(o.status.code(), Some(0));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for row in rows.as_array().unwrap() {
        assert_eq!(row["bmc"], serde_json::Value::Null, "{row:#}");
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("warning: the key {fleet:g}:bmc:n1 does not hold a BMC reading: "),
        "{stderr}"
    );
    let table = fleet(&server, &["slots"]);
    let line = table.lines().find(|l| l.contains("mini")).unwrap();
    assert!(line.split_whitespace().any(|c| c == "-"), "{table}");
}

#[tokio::test]
async fn a_bmc_that_reads_on_after_a_completed_shutdown_is_said_once_at_warn() {
    let server = server();
    let sushy = Sushy::start();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(dir.path(), &sushy.endpoint(), &["n1"]);
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, &text).unwrap();
    // The slot's last operation is a shutdown that completed (verified off), and no claim wants
    // the machine; then someone powers it on at its BMC, without its bench beating.
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    assert!(store.raise_fence(&group(), "1").await.unwrap());
    let started_at = fleet::domain::operation::stamp(store.now().await.unwrap());
    let op = SlotOp {
        kind: OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at,
        timeout: Duration::from_secs(60),
        controller: "test".into(),
        streak: 1,
        end: None,
        off_at: None,
    };
    let fenced = store.fenced("1");
    fenced
        .record_unclaimed(&group(), &name("n1"), &op)
        .await
        .unwrap();
    let end = OpEnd {
        outcome: OperationOutcome::Completed,
        finished_at: started_at,
        duration_ms: 10,
        tail: "redfish: 1 attempt(s) in 10 ms, verified off, no escalation".into(),
    };
    assert!(
        store
            .end_operation(&group(), &name("n1"), started_at, &end)
            .await
            .unwrap()
    );
    let config = parse(&text);
    let DriverKind::Redfish(driver) = &config.slots[&name("n1")].driver.as_ref().unwrap().kind
    else {
        panic!("a redfish slot");
    };
    let bmc = fleet::power::drive::redfish(driver).expect("the driver");
    tokio::time::timeout(
        Duration::from_secs(40),
        bmc.power(Intent::On, Duration::from_secs(30)),
    )
    .await
    .expect("the driver's own bound")
    .expect("powered on");

    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--lease",
        "1s",
        "--bmc-interval",
        "200ms",
    ];
    let mut serve = Serve::start("serve", &server, &path, &args);
    serve.log(&["became the leader"]).await;
    let said = serve
        .log(&["WARN", "the BMC reads on after a shutdown", "slot=n1"])
        .await;
    assert!(said.contains(&started_at.to_rfc3339()), "{said}");
    // The heartbeat stays what counts: the slot reads off, and nothing powers it on or off.
    let on = wait_for(&server, "n1", BmcState::On, Duration::from_secs(5)).await;
    let later = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let r = reading(&server, "n1").await.unwrap();
            if (r.at - on.at).num_milliseconds() >= 1_000 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("read again for a second");
    assert_eq!(later.state, BmcState::On);
    let row = slot_row(&server, "n1");
    assert_eq!(row["power"], "off", "{row:#}");
    assert_eq!(row["bmc"]["state"], "on", "{row:#}");
    let lines = serve.stop().await;
    let warned = lines
        .iter()
        .filter(|l| l.contains("the BMC reads on after a shutdown"))
        .count();
    assert_eq!(warned, 1, "said once: {lines:#?}");
    let read = store.read_groups(&[group()]).await.unwrap();
    assert_eq!(
        read[0].operations.by_slot[&name("n1")].started_at,
        started_at,
        "no operation fired since"
    );
}
