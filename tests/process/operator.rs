//! What an operator meets, with real `fleet serve` processes, a real redis-server and
//! the `fleet` binary's views: a wiped store, blindness said in words, holds fleet set and lifts.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use fleet_testing::{Fixture, RedisServer};
use support::*;

/// The group pool-a, of up to four machines that boot at once, and `slots` of it.
fn yaml(server: &RedisServer, slots: &[&str]) -> String {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(4)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", server.url())
                .startup(Op::sh(BOOTS).timeout("10s"))
                .shutdown(Op::sh(POWERS_OFF).timeout("10s"))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool-a", slots)
        .yaml()
}

fn start(server: &RedisServer, config: &Path, grace: &str) -> Serve {
    Serve::start(
        "serve",
        server,
        config,
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--interval",
            "100ms",
            "--lease",
            "1s",
            "--blind-grace",
            grace,
        ],
    )
}

fn fleet(server: &RedisServer, args: &[&str]) -> Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .env("FLEET_REDIS_URL", server.url())
        .args(args)
        .output()
        .unwrap();
    support::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

// FLUSHALL under running machines (or a Redis that restarts without
// persistence) killed every view (`no catalog is published under this prefix`) until `fleet
// serve` restarted, and the blindness that follows was invisible. The leader publishes the
// catalog again within a pass; every view answers within 2 s, says the controller is blind, why
// and until when, and shows the adopted claims once the grace ends.
#[tokio::test]
async fn a_wiped_store_keeps_every_view_alive_and_says_why_the_controller_is_blind() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(
        &config,
        yaml(&server, &["bench-01", "bench-02", "bench-03"]),
    )
    .unwrap();
    let mut serve = start(&server, &config, "3s");
    serve.log(&["became the leader"]).await;
    // The first start on an empty store is blind for the grace, and says so once the first
    // pass has reported (the leadership is logged before that pass ends).
    let o = bounded("the first pass's report", async {
        loop {
            let o = fleet(&server, &["slots"]);
            if !stdout(&o).contains("no fleet serve has reported") {
                return o;
            }
            // Another process's report: nothing to wake this test sooner.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).contains("blind until") && stdout(&o).contains("first start"),
        "{}",
        stdout(&o)
    );
    for slot in ["bench-01", "bench-02"] {
        assert!(fleet(&server, &["claim", slot]).status.success());
    }
    serve
        .logs(&[&["to=ready", "bench-01"], &["to=ready", "bench-02"]])
        .await;

    let _: () = raw(&server, &["FLUSHALL"]).await;
    let wiped = Instant::now();
    // The machines keep beating, as their agents do.
    let p = presence(&server).await;
    for slot in ["bench-01", "bench-02"] {
        p.beat(&beat(slot, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    for view in [
        &["claims"][..],
        &["slots"],
        &["groups"],
        &["describe", "bench-01"],
    ] {
        bounded("the view to answer", async {
            while !fleet(&server, view).status.success() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
    assert!(
        wiped.elapsed() < Duration::from_secs(2),
        "the views answered {:?} after the wipe",
        wiped.elapsed()
    );
    let groups = stdout(&fleet(&server, &["groups"]));
    assert!(
        groups.contains("blind until") && groups.contains("the store came back empty"),
        "{groups}"
    );
    // A claim made now is told it waits for the grace.
    let claim = stdout(&fleet(&server, &["claim", "bench-03"]));
    assert!(
        claim.contains("claim bench-03-") && claim.contains("note: blind until"),
        "{claim}"
    );
    // Once the grace ends the machines found on are adopted.
    serve
        .logs(&[&["adopted", "bench-01"], &["adopted", "bench-02"]])
        .await;
    let claims: serde_json::Value =
        serde_json::from_str(&stdout(&fleet(&server, &["claims", "-o", "json"]))).unwrap();
    let adopted: Vec<&str> = claims
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["reason"] == "Adopted")
        .map(|c| c["slot"].as_str().unwrap())
        .collect();
    assert_eq!(adopted, ["bench-01", "bench-02"]);
    serve.log(&["to=ready", "bench-03"]).await;
    let groups = stdout(&fleet(&server, &["groups"]));
    assert!(!groups.contains("blind"), "{groups}");
}
