//! `fleet serve` as a process (SPEC §4.5, §4.8): configuration errors, the lifecycle through the
//! CLI, metrics and health over HTTP, reload (a bad version refused, a good one taken, SIGHUP),
//! and a clean stop.

use crate::support;

use std::time::Duration;

use fleet_testing::fixture::{BOOTS, Driver, Group, Op, POWERS_OFF, Slot};
use fleet_testing::{Fixture, RedisServer};
use support::*;

/// The group pool-a, of two machines that boot at once, and `slots` of it.
fn fixture(server: &RedisServer, slots: &[&str]) -> Fixture {
    let pool = Group::new("pool-a")
        .min(0)
        .max(2)
        .ungated()
        .env("BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("REDIS", server.url())
        .startup(Op::sh(BOOTS))
        .shutdown(Op::sh(POWERS_OFF))
        .timing("job_monitor_poll_interval", "100ms");
    Fixture::new().group(pool).slots("pool-a", slots)
}

fn yaml(server: &RedisServer, slots: &[&str]) -> String {
    fixture(server, slots).yaml()
}

/// GETs `path` until `done` holds for the answer, within the test bound; returns the body.
async fn get_until(addr: &str, path: &str, done: impl Fn(&(u16, String)) -> bool) -> String {
    bounded(&format!("{path} to answer as expected"), async {
        loop {
            let (a, p) = (addr.to_owned(), path.to_owned());
            let answer = tokio::task::spawn_blocking(move || http_get(&a, &p))
                .await
                .unwrap();
            if done(&answer) {
                return answer.1;
            }
            // Polling an HTTP endpoint of another process: nothing to wake this test sooner.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[test]
fn an_invalid_config_exits_2_listing_every_problem() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(
        &path,
        "groups:\n  - name: Pool_A\n    min_size: 3\n    max_size: 1\n    startup: { command: [] }\n    shutdown: { command: [off] }\nslots:\n  - { name: b1, group: nowhere }\n",
    )
    .unwrap();
    let o = run_fleet(&server, &["serve", "--config", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "Pool_A",
        "min_size",
        "command",
        "nowhere",
        path.to_str().unwrap(),
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    let o = run_fleet(&server, &["serve", "--config", "/nonexistent/fleet.yaml"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a file that cannot be read is bad input"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/fleet.yaml"));
}

// SPEC §4.5: a fleet serve started before its Redis (a host booting, a Deployment
// whose Redis comes up second, a loaded host slow to answer) waits for it, as a running one does,
// rather than exiting; it starts and leads once Redis answers. Stopped while it waits, it exits 1
// naming what it waited for.
#[tokio::test]
async fn serve_started_before_redis_waits_for_it_and_leads_once_it_answers() {
    let mut server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, yaml(&server, &["bench-01"])).unwrap();
    server.kill();
    let mut serve = Serve::start("serve", &server, &path, &QUICK_SERVE);
    serve
        .log(&["Redis does not answer yet", "waits for it"])
        .await;
    server.restart().unwrap();
    serve.log(&["Redis answers: starting"]).await;
    serve.log(&["became the leader"]).await;
    serve.stop().await;
    assert_eq!(serve.child.wait().await.unwrap().code(), Some(0));

    server.kill();
    let mut waiting = Serve::start("waiting", &server, &path, &QUICK_SERVE);
    waiting.log(&["Redis does not answer yet"]).await;
    let said = waiting.stop().await;
    assert_eq!(waiting.child.wait().await.unwrap().code(), Some(1));
    assert!(
        said.iter().any(|l| l.contains("cannot reach Redis at")),
        "{said:#?}"
    );
}

#[tokio::test]
async fn serve_drives_a_claim_to_ready_reports_metrics_reloads_and_stops_cleanly() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, yaml(&server, &["bench-01", "bench-02"])).unwrap();
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--lease",
        "1s",
    ];
    let mut serve = Serve::start("serve", &server, &path, &args);
    let started = serve.log(&["fleet serve started"]).await;
    let addr = started
        .split_whitespace()
        .find_map(|w| w.strip_prefix("metrics="))
        .expect("the start line names the metrics address")
        .to_owned();

    let o = run_fleet(&server, &["claim", "bench-01"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serve.log(&["claim moved", "to=ready"]).await;
    let live = run_fleet(&server, &["live"]);
    assert_eq!(String::from_utf8_lossy(&live.stdout), "bench-01\n");

    // The gauges are set later in the pass that logged the move: wait for them.
    let body = get_until(&addr, "/metrics", |(status, body)| {
        *status == 200 && body.contains(r#"fleet_claims{group="pool-a",phase="ready"} 1"#)
    })
    .await;
    assert!(
        body.contains(r#"fleet_operations_total{operation="startup",outcome="completed"} 1"#),
        "{body}"
    );
    assert!(body.contains("fleet_leader 1"), "{body}");
    // Ready means a pass within the last few intervals: wait for one rather than assume it.
    let body = get_until(&addr, "/readyz", |(status, _)| *status == 200).await;
    assert_eq!(body, "ready\n");
    let health = addr.clone();
    assert_eq!(
        tokio::task::spawn_blocking(move || http_get(&health, "/healthz"))
            .await
            .unwrap()
            .0,
        200
    );

    // A bad new version is refused; the running one is kept, and the refusal is counted and
    // shown on /readyz.
    std::fs::write(&path, "groups: [ this is not yaml").unwrap();
    serve.log(&["new configuration refused"]).await;
    let slots = run_fleet(&server, &["slots", "-o", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&slots.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    let body = get_until(&addr, "/metrics", |(_, body)| {
        body.contains(r#"fleet_config_reloads_total{result="refused"} 1"#)
    })
    .await;
    assert!(!body.contains(r#"result="applied""#), "{body}");
    let body = get_until(&addr, "/readyz", |(status, _)| *status == 200).await;
    assert!(
        body.starts_with(
            "ready\nwarning: the last configuration reload was refused; the running one is kept:"
        ),
        "{body}"
    );
    assert!(
        body.contains(path.to_str().unwrap()),
        "names the file: {body}"
    );
    // A good one (bench-02 removed) is taken, on SIGHUP at the latest; its max_size (2) is now
    // above its one slot, which is said.
    std::fs::write(&path, yaml(&server, &["bench-01"])).unwrap();
    serve.signal("-HUP");
    serve.log(&["configuration reloaded", "slots=1"]).await;
    serve
        .log(&["group pool-a: max_size 2 is above its 1 slot(s)"])
        .await;
    get_until(&addr, "/metrics", |(_, body)| {
        body.contains(r#"fleet_config_reloads_total{result="applied"} 1"#)
    })
    .await;
    let body = get_until(&addr, "/readyz", |(status, _)| *status == 200).await;
    assert_eq!(body, "ready\n", "an applied reload clears the warning");

    serve.signal("-TERM");
    serve.log(&["fleet serve stopped"]).await;
    let status = bounded("exit", serve.child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}

/// A kubeconfig whose API server is a closed port on this machine.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: here\nclusters:\n- name: here\n  cluster: { server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true }\nusers:\n- name: me\n  user: { token: t }\ncontexts:\n- name: here\n  context: { cluster: here, user: me, namespace: fleet-test }\n",
    )
    .unwrap();
    path
}

// SPEC §3.12: without --kubernetes nothing of Kubernetes is built, and a configuration that
// needs it is refused (exit 2) naming the flag and every setting; the Kubernetes flags need
// --kubernetes; a kubeconfig that cannot be read is bad input naming the file.
#[test]
fn kubernetes_settings_need_the_flag_and_a_readable_kubeconfig() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    let text = fixture(&server, &[])
        .slot(Slot::new("bench-01", "pool-a").kubernetes_node("node-01"))
        .yaml();
    std::fs::write(&path, text).unwrap();
    let config = path.to_str().unwrap();
    let o = run_fleet(&server, &["serve", "--config", config]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--kubernetes") && err.contains("slot bench-01: kubernetes_node"),
        "{err}"
    );

    let o = run_fleet(
        &server,
        &["serve", "--config", config, "--kubeconfig", "/x"],
    );
    assert_eq!(o.status.code(), Some(2), "--kubeconfig needs --kubernetes");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--kubernetes"));

    let o = run_fleet(
        &server,
        &[
            "serve",
            "--config",
            config,
            "--kubernetes",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
}

// SPEC §3.12: an API server out of reach at start is not fatal: fleet serves, its bound slots
// blind (`fleet_kubernetes_blind 1`), and its namespace is the kubeconfig context's.
#[tokio::test]
async fn an_api_server_out_of_reach_at_start_is_blindness_not_a_failed_start() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, yaml(&server, &["bench-01"])).unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--lease",
        "1s",
        "--kubernetes",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ];
    let mut serve = Serve::start("serve", &server, &path, &args);
    serve.log(&["Kubernetes", "namespace=fleet-test"]).await;
    let started = serve.log(&["fleet serve started"]).await;
    let addr = started
        .split_whitespace()
        .find_map(|w| w.strip_prefix("metrics="))
        .expect("the start line names the metrics address")
        .to_owned();
    let body = get_until(&addr, "/metrics", |(status, body)| {
        *status == 200 && body.contains("fleet_kubernetes_blind 1")
    })
    .await;
    assert!(body.contains("fleet_leader 1"), "it leads, blind: {body}");
    let o = run_fleet(&server, &["slots", "-o", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["usable"], serde_json::Value::Null, "usable unknown");
    serve.stop().await;
}

// SPEC §4.10: what the file cannot show about a driver is checked at start and on every reload:
// a password file that cannot be read, or a password its driver cannot take, is refused naming
// the slot (exit 2 at start; the running configuration kept on reload), and no password is ever
// shown.
#[tokio::test]
async fn a_drivers_password_is_checked_at_start_and_on_reload_and_never_shown() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    let secret = dir.path().join("ipmi-pass");
    let ipmi = Driver::ipmi("10.0.0.31")
        .username("admin")
        .password_file(&secret);
    let text = fixture(&server, &["bench-01"])
        .slot(Slot::new("ipmi-1", "pool-a").driver(ipmi))
        .yaml();
    std::fs::write(&path, &text).unwrap();
    let config = path.to_str().unwrap();

    let o = run_fleet(&server, &["serve", "--config", config]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "slots (ipmi-1).driver: password_file {}: cannot be read (No such file or directory",
            secret.display()
        )),
        "{err}"
    );
    // A password IPMI 2.0 cannot carry (past 20 bytes): the driver's own words, not the password.
    let long = "correct-horse-battery-staple";
    std::fs::write(&secret, format!("{long}\n")).unwrap();
    let o = run_fleet(&server, &["serve", "--config", config]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "slots (ipmi-1).driver: ipmi: the password is 28 bytes, and IPMI 2.0 takes at most 20"
        ),
        "{err}"
    );
    assert!(!err.contains(long), "{err}");

    std::fs::write(&secret, "hunter22\n").unwrap();
    let args = ["--metrics-addr", "127.0.0.1:0", "--interval", "100ms"];
    let mut serve = Serve::start("serve", &server, &path, &args);
    serve.log(&["fleet serve started"]).await;
    std::fs::remove_file(&secret).unwrap();
    serve.signal("-HUP");
    let refused = serve.log(&["new configuration refused"]).await;
    assert!(
        refused.contains("slots (ipmi-1).driver: password_file"),
        "{refused}"
    );
    std::fs::write(&secret, "hunter22\n").unwrap();
    serve.signal("-HUP");
    serve.log(&["configuration reloaded", "slots=2"]).await;
    let lines = serve.stop().await;
    assert!(
        !lines.iter().any(|l| l.contains("hunter22")),
        "a password in the log: {lines:#?}"
    );
}
