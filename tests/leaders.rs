//! Several `fleet serve` processes on one Redis (SPEC §5.1): one acts; a leader stopped with
//! SIGSTOP past its lease is replaced, and once resumed has every write refused; a leader killed
//! with SIGKILL is replaced within a lease.

mod support;

use std::process::Stdio;

use fleet::testing::RedisServer;
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

fn yaml(server: &RedisServer, log: &std::path::Path) -> String {
    format!(
        r#"groups:
  - name: pool-a
    min_size: 0
    max_size: 1
    readiness_taints: []
    startup: {{ command: ["sh", "-c", "echo \"$FLEET_CLAIM\" >> \"$LOG.startup\"; \"$BIN\" --redis \"$REDIS\" beat \"$FLEET_SLOT\" --ttl 1h"], env: {{ BIN: {bin:?}, REDIS: {redis:?}, LOG: {log:?} }} }}
    shutdown: {{ command: ["sh", "-c", "echo \"$FLEET_CLAIM\" >> \"$LOG.shutdown\"; \"$BIN\" --redis \"$REDIS\" beat \"$FLEET_SLOT\" --ttl 0"], env: {{ BIN: {bin:?}, REDIS: {redis:?}, LOG: {log:?} }} }}
    timings: {{ job_monitor_poll_interval: 100ms }}
slots:
  - {{ name: bench-01, group: pool-a }}
"#,
        bin = env!("CARGO_BIN_EXE_fleet"),
        redis = server.url(),
        log = log.display().to_string(),
    )
}

struct Serve {
    name: &'static str,
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Serve {
    fn start(name: &'static str, server: &RedisServer, config: &std::path::Path) -> Serve {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args(["--redis", &server.url(), "serve", "--config"])
            .arg(config)
            .args([
                "--metrics-addr",
                "127.0.0.1:0",
                "--interval",
                "100ms",
                "--lease",
                "1s",
                "--blind-grace",
                "0s",
                "--holder",
                name,
            ])
            .env("FLEET_LOG", "info")
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        let mut reader = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        Serve { name, child, lines }
    }

    async fn log(&mut self, words: &[&str]) -> String {
        let name = self.name;
        bounded(&format!("{name} to log {words:?}"), async {
            while let Some(line) = self.lines.recv().await {
                if words.iter().all(|w| line.contains(w)) {
                    return line;
                }
            }
            panic!("{name} ended before logging {words:?}");
        })
        .await
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().unwrap().to_string();
        assert!(
            std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    }
}

fn fleet(server: &RedisServer, args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ops(dir: &std::path::Path, kind: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("ops.{kind}")))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test]
async fn a_stopped_leader_is_replaced_and_its_late_writes_are_refused() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml(&server, &dir.path().join("ops"))).unwrap();
    let mut a = Serve::start("a", &server, &config);
    a.log(&["became the leader"]).await;
    let mut b = Serve::start("b", &server, &config);
    b.log(&["fleet serve started"]).await;

    fleet(&server, &["claim", "bench-01"]);
    a.log(&["claim moved", "to=ready"]).await;
    assert_eq!(ops(dir.path(), "startup"), 1);

    // a stops (SIGSTOP) past its lease: b takes over.
    a.signal("-STOP");
    b.log(&["became the leader"]).await;
    let claims: serde_json::Value =
        serde_json::from_str(&fleet(&server, &["claims", "-o", "json"])).unwrap();
    let name = claims[0]["name"].as_str().unwrap().to_owned();
    fleet(&server, &["cancel", &name]);
    b.log(&["claim moved", "to=completed"]).await;
    // a resumes: it finds it lost the lease (or has its first write refused) and acts no more.
    a.signal("-CONT");
    a.log(&["lost leadership"]).await;
    assert_eq!(ops(dir.path(), "startup"), 1, "no second startup");
    assert_eq!(ops(dir.path(), "shutdown"), 1, "one shutdown, by b");

    // b is killed outright: a takes over within a lease.
    b.signal("-KILL");
    a.log(&["became the leader"]).await;
    fleet(&server, &["claim", "bench-01"]);
    a.log(&["claim moved", "to=ready"]).await;
    assert_eq!(ops(dir.path(), "startup"), 2);
    a.signal("-TERM");
    let status = bounded("a to stop", a.child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}
