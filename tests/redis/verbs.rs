//! The controller's views and operator verbs (SPEC §4.6, §4.7), run as library functions with a
//! `Vec<u8>` writer against a real redis-server and an in-process controller.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use fleet::cli::Cli;
use fleet::config;
use fleet::lifecycle::Exec;
use fleet::reconcile::Controller;
use fleet::store::catalog::Catalog;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use fleet_testing::{Fixture, RedisServer};
use support::*;
use tokio_util::sync::CancellationToken;

/// A group of two slots whose startup makes the bench beat (a machine that boots at once) and
/// whose shutdown makes it read DOWN.
fn pool(server: &RedisServer) -> Group {
    Group::new("pool-a")
        .min(0)
        .max(2)
        .ungated()
        .env("BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("REDIS", server.url())
        .startup(Op::sh(BOOTS))
        .shutdown(Op::sh(POWERS_OFF))
        .timing("job_monitor_poll_interval", "100ms")
}

/// The configuration of `group` and its two slots.
fn yaml_of(group: Group) -> String {
    Fixture::new()
        .group(group)
        .slots("pool-a", ["bench-01", "bench-02"])
        .yaml()
}

fn yaml(server: &RedisServer) -> String {
    yaml_of(pool(server))
}

async fn run(server: &RedisServer, args: &[&str]) -> (String, u8) {
    let url = server.url();
    let mut argv = vec!["fleet", "--redis", &url];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let ctx = cli.global.ctx(CancellationToken::new(), false);
    let mut out = Vec::new();
    let code = match bounded("verb", cli.command.run(&ctx, &mut out)).await {
        Ok(()) => 0,
        Err(e) => {
            out.extend_from_slice(format!("error: {e}").as_bytes());
            e.exit_code()
        }
    };
    let out = String::from_utf8(out).unwrap();
    if code == 0 {
        support::contract::check(args, &out);
    }
    (out, code)
}

async fn setup() -> (
    RedisServer,
    Controller<redis::aio::MultiplexedConnection, Exec>,
) {
    let server = server();
    let cfg = config::parse(&yaml(&server), Path::new("t.yaml")).unwrap();
    let mut c = conn(&server).await;
    Catalog::of(&cfg)
        .publish(&mut c, &Keys::default())
        .await
        .unwrap();
    // The controller sees the last value sent; no reload happens in these tests.
    let (_, rx) = tokio::sync::watch::channel(Arc::new(cfg));
    let ctl = Controller::new(
        rx,
        Presence::new(conn(&server).await, Keys::default()),
        ClaimStore::new(conn(&server).await, Keys::default()),
        Arc::new(exec(&server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    (server, ctl)
}

async fn settle(ctl: &mut Controller<redis::aio::MultiplexedConnection, Exec>) {
    for _ in 0..10 {
        let r = ctl.pass().await.unwrap();
        if r.started.is_empty() && r.stopped.is_empty() && r.writes == 0 {
            return;
        }
        while r.started.iter().chain(&r.stopped).any(|s| ctl.running(s)) {
            bounded("operation", ctl.operation_ended()).await;
        }
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn claim_then_views_show_the_slot_ready_with_the_pinned_fields() {
    let (server, mut ctl) = setup().await;
    settle(&mut ctl).await;
    let (out, code) = run(&server, &["claim", "bench-01"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("claim bench-01-"), "{out}");
    settle(&mut ctl).await;

    let slots = json(&run(&server, &["slots", "-o", "json"]).await.0);
    let row = &slots[0];
    for field in [
        "name",
        "group",
        "phase",
        "power",
        "usable",
        "claim",
        "attempt",
        "activations_total",
        "activations_24h",
        "last_transition_time",
        "previous_phase",
        "last_claim",
    ] {
        assert!(row.get(field).is_some(), "slots row lacks {field}: {row}");
    }
    assert_eq!(
        (
            row["name"].as_str(),
            row["phase"].as_str(),
            row["power"].as_str()
        ),
        (Some("bench-01"), Some("ready"), Some("on"))
    );
    assert_eq!(
        (
            row["usable"].as_bool(),
            row["attempt"].as_u64(),
            row["activations_total"].as_u64()
        ),
        (Some(true), Some(1), Some(1))
    );
    assert_eq!(slots[1]["phase"], "off");
    chrono::DateTime::parse_from_rfc3339(row["last_transition_time"].as_str().unwrap()).unwrap();

    let claims = json(&run(&server, &["claims", "-o", "json"]).await.0);
    let c = &claims[0];
    for field in [
        "name",
        "slot",
        "group",
        "phase",
        "reason",
        "attempt",
        "shutdown_attempts",
        "marked_for_deletion",
        "requested_at",
        "deadline_at",
        "finished_at",
    ] {
        assert!(c.get(field).is_some(), "claims row lacks {field}: {c}");
    }
    assert_eq!(
        (c["phase"].as_str(), c["marked_for_deletion"].as_bool()),
        (Some("ready"), Some(false))
    );
    chrono::DateTime::parse_from_rfc3339(c["requested_at"].as_str().unwrap()).unwrap();

    let groups = json(&run(&server, &["groups", "-o", "json"]).await.0);
    assert_eq!(
        (
            groups[0]["name"].as_str(),
            groups[0]["target"].as_u64(),
            groups[0]["on"].as_u64()
        ),
        (Some("pool-a"), Some(1), Some(1))
    );

    let d = json(
        &run(&server, &["describe", "bench-01", "-o", "json"])
            .await
            .0,
    );
    let events: Vec<&str> = d["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["created", "booting", "operation", "ready"]);
    assert_eq!(
        d["recent_transitions"].as_array().unwrap().len(),
        3,
        "off, booting, ready"
    );
    let (table, code) = run(&server, &["describe", "bench-01"]).await;
    assert_eq!(code, 0);
    assert!(
        table.contains("Live claim:  bench-01-") && table.contains("Timeline of"),
        "{table}"
    );
    for view in [
        &["groups"][..],
        &["slots"],
        &["claims", "-o", "wide"],
        &["slots", "pool-a"],
    ] {
        let (out, code) = run(&server, view).await;
        assert_eq!(code, 0, "{view:?}: {out}");
        assert!(out.lines().count() >= 2, "{view:?}: {out}");
    }
}

#[tokio::test]
async fn cancel_deletes_a_pending_claim_and_reverses_a_ready_one() {
    let (server, mut ctl) = setup().await;
    run(&server, &["claim", "bench-02"]).await;
    let pending = json(&run(&server, &["claims", "-o", "json"]).await.0)[0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let (out, code) = run(&server, &["cancel", &pending]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("pending claim cancelled"), "{out}");
    assert_eq!(
        json(&run(&server, &["claims", "-o", "json"]).await.0),
        serde_json::json!([])
    );

    run(&server, &["claim", "bench-01"]).await;
    settle(&mut ctl).await;
    let ready = json(&run(&server, &["claims", "-o", "json"]).await.0)[0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let (out, _) = run(&server, &["cancel", &ready]).await;
    assert!(out.contains("ready claim marked for deletion"), "{out}");
    settle(&mut ctl).await;
    let c = &json(&run(&server, &["claims", "-o", "json"]).await.0)[0];
    assert_eq!(
        (c["phase"].as_str(), c["reason"].as_str()),
        (Some("completed"), Some("DeletedByHand"))
    );
    let (out, code) = run(&server, &["cancel", &ready]).await;
    assert_eq!(code, 2);
    assert!(out.contains("has ended"), "{out}");

    // --since keeps the live claims and those ended within it (make up's view).
    run(&server, &["claim", "bench-02"]).await;
    let names = |out: &str| -> Vec<String> {
        json(out)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let recent = names(
        &run(&server, &["claims", "--since", "1h", "-o", "json"])
            .await
            .0,
    );
    assert_eq!(
        recent.len(),
        2,
        "the ended claim and the live one: {recent:?}"
    );
    let ended_at = chrono::DateTime::parse_from_rfc3339(c["finished_at"].as_str().unwrap())
        .unwrap()
        .with_timezone(&chrono::Utc);
    // Once the server's clock (the view's) is 5 ms past the end, a 1 ms window leaves it out.
    bounded("the server's clock to pass the end", async {
        loop {
            let (secs, micros): (i64, i64) = raw(&server, &["TIME"]).await;
            if secs * 1000 + micros / 1000 > ended_at.timestamp_millis() + 5 {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let live = names(
        &run(&server, &["claims", "--since", "1ms", "-o", "json"])
            .await
            .0,
    );
    assert_eq!(live.len(), 1, "{live:?}");
    assert!(!live.contains(&ready), "{live:?}");
    let refused =
        Cli::try_parse_from(["fleet", "claims", "--since", "-1m"]).expect_err("a negative window");
    assert_eq!(refused.exit_code(), 2);
    assert!(refused.to_string().contains("not negative"), "{refused}");
}

#[tokio::test]
async fn bad_requests_are_refused_with_what_to_do() {
    let (server, mut ctl) = setup().await;
    run(&server, &["claim", "bench-01"]).await;
    settle(&mut ctl).await;
    let cases: &[(&[&str], &str)] = &[
        (&["claim", "bench-01"], "already has a live claim"),
        (&["claim", "nowhere"], "no slot nowhere"),
        (&["cancel", "no-such-claim"], "no claim named no-such-claim"),
        (
            &["reset-shutdown-attempts", "no-such-claim"],
            "no claim named",
        ),
        (&["describe", "nowhere"], "no slot nowhere"),
        (&["slots", "pool-z"], "no group pool-z"),
    ];
    for (args, want) in cases {
        let (out, code) = run(&server, args).await;
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(out.contains(want), "{args:?}: {out}");
    }
    // With no `fleet serve` ever run under a prefix, the views say so.
    let (out, code) = run(&server, &["--prefix", "other", "slots"]).await;
    assert_eq!(code, 1);
    assert!(out.contains("is `fleet serve` running"), "{out}");
}

#[tokio::test]
async fn reset_shutdown_attempts_restarts_the_streak() {
    let (server, mut ctl) = setup().await;
    run(&server, &["claim", "bench-01"]).await;
    settle(&mut ctl).await;
    let name = json(&run(&server, &["claims", "-o", "json"]).await.0)[0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let (out, code) = run(&server, &["reset-shutdown-attempts", &name]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("shutdown attempts reset (was 0)"), "{out}");
    assert_eq!(
        json(&run(&server, &["claims", "-o", "json"]).await.0)[0]["shutdown_attempts"],
        0
    );
}

// `fleet claim` refuses a slot whose machine fleet told to power off and has not
// seen off yet, saying when the shutdown fired and what to wait for; once the machine is
// observed off, the claim is taken.
#[tokio::test]
async fn claim_refuses_a_slot_whose_machine_is_powering_off() {
    let (server, mut ctl) = setup().await;
    // bench-02 is on and no claim wants it: the controller powers it off. The store's record
    // says so until a pass sees the machine off.
    let store = ClaimStore::new(conn(&server).await, Keys::default());
    let group = fleet::domain::name::GroupName::parse("pool-a").unwrap();
    let now = store.now().await.unwrap();
    let op = fleet::domain::operation::SlotOp {
        kind: fleet::domain::claim::OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: fleet::domain::operation::stamp(now),
        timeout: std::time::Duration::from_secs(300),
        controller: "ctl".into(),
        streak: 1,
        end: None,
        off_at: None,
    };
    store
        .record_unclaimed(&group, &name("bench-02"), &op)
        .await
        .unwrap();
    let (out, code) = run(&server, &["claim", "bench-02"]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("bench-02 is powering off"), "{out}");
    assert!(out.contains("`fleet state bench-02` reads DOWN"), "{out}");
    // A pass sees the machine off (it never beat): the slot is free again.
    settle(&mut ctl).await;
    let (out, code) = run(&server, &["claim", "bench-02"]).await;
    assert_eq!(code, 0, "{out}");
}

/// `setup` with a startup that says why it fails and exits 3, and one attempt per slot.
async fn failing_setup() -> (
    RedisServer,
    Controller<redis::aio::MultiplexedConnection, Exec>,
) {
    let server = server();
    let text = yaml_of(
        pool(&server)
            .startup(Op::sh("echo no power on the rack >&2; exit 3"))
            .timing("max_attempts", 1),
    );
    assert!(
        text.contains("exit 3") && text.contains("max_attempts"),
        "{text}"
    );
    let cfg = config::parse(&text, Path::new("t.yaml")).unwrap();
    let mut c = conn(&server).await;
    Catalog::of(&cfg)
        .publish(&mut c, &Keys::default())
        .await
        .unwrap();
    let (_, rx) = tokio::sync::watch::channel(Arc::new(cfg));
    let ctl = Controller::new(
        rx,
        Presence::new(conn(&server).await, Keys::default()),
        ClaimStore::new(conn(&server).await, Keys::default()),
        Arc::new(exec(&server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    (server, ctl)
}

// Why a startup failed is readable without Redis tools. `fleet describe SLOT` shows
// the last claim's timeline once it ended (not only a live claim's), with the operation's exit
// status and output; `fleet describe CLAIM` works for a claim still kept; `fleet claims --slot`
// lists the ended ones; the boots ledger and the last scaling call are shown.
#[tokio::test]
async fn describe_shows_why_an_operation_failed_by_slot_and_by_claim() {
    let (server, mut ctl) = failing_setup().await;
    let (out, code) = run(&server, &["claim", "bench-01"]).await;
    assert_eq!(code, 0, "{out}");
    settle(&mut ctl).await;
    let (table, code) = run(&server, &["describe", "bench-01"]).await;
    assert_eq!(code, 0, "{table}");
    assert!(table.contains("Timeline of bench-01-"), "{table}");
    assert!(
        table.contains("Output of the startup") && table.contains("no power on the rack"),
        "{table}"
    );
    assert!(table.contains("exit status: 3"), "{table}");
    let claims = json(
        &run(&server, &["claims", "--slot", "bench-01", "-o", "json"])
            .await
            .0,
    );
    let name = claims[0]["name"].as_str().unwrap().to_owned();
    assert_eq!(claims[0]["phase"], "failed");
    assert_eq!(claims[0]["reason"], "StartupJobFailed");
    let (by_claim, code) = run(&server, &["describe", &name]).await;
    assert_eq!(code, 0, "{by_claim}");
    assert!(by_claim.contains("no power on the rack"), "{by_claim}");
    let d = json(&run(&server, &["describe", &name, "-o", "json"]).await.0);
    assert_eq!(d["slot"]["name"], "bench-01");
    assert_eq!(d["activations"].as_array().unwrap().len(), 1, "{d}");
    let at = d["timeline"][0]["at"].as_str().unwrap();
    assert_eq!(
        at.len(),
        "2026-11-30T16:29:28.123Z".len(),
        "milliseconds: {at}"
    );
    let (out, code) = run(&server, &["claims", "--slot", "nowhere"]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no slot nowhere"), "{out}");
    let groups = json(&run(&server, &["groups", "-o", "json"]).await.0);
    let scaled_at = groups[0]["last_scale_at"].as_str().unwrap();
    assert_eq!(
        scaled_at.len(),
        "2026-11-30T16:29:28.123Z".len(),
        "milliseconds: {scaled_at}"
    );
    assert_eq!(groups[0]["last_scale_action"][0], "increase", "{groups}");
    let (wide, _) = run(&server, &["claims", "-o", "wide"]).await;
    assert!(
        wide.contains("(now)") && wide.contains("(in 11m)"),
        "tables show relative times: {wide}"
    );
}

// `fleet claim` on a slot that spent its attempts is refused (exit 1) with when it
// rests until and the command that resets it; nothing is started.
#[tokio::test]
async fn claim_refuses_a_spent_slot_saying_until_when_and_how_to_reset_it() {
    let (server, mut ctl) = failing_setup().await;
    run(&server, &["claim", "bench-01"]).await;
    settle(&mut ctl).await;
    let (out, code) = run(&server, &["claim", "bench-01"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("spent its attempts") && out.contains("fleet reset-attempts bench-01"),
        "{out}"
    );
    let claims = json(&run(&server, &["claims", "-o", "json"]).await.0);
    assert_eq!(
        claims.as_array().unwrap().len(),
        1,
        "no second claim: {claims}"
    );
    let (_, code) = run(&server, &["reset-attempts", "bench-01"]).await;
    assert_eq!(code, 0);
    let (out, code) = run(&server, &["claim", "bench-01"]).await;
    assert_eq!(code, 0, "{out}");
}

// `fleet claim --wait` follows the claim: a line per step, exit 0 on ready; exit 1
// on failed, with the reason and the output of its last operation.
#[tokio::test]
async fn claim_wait_follows_the_claim_to_ready_or_failed() {
    let (server, ctl) = setup().await;
    let stop = CancellationToken::new();
    let running = tokio::spawn(ctl.run(Duration::from_millis(100), Duration::ZERO, stop.clone()));
    let (out, code) = run(&server, &["claim", "bench-01", "--wait"]).await;
    assert_eq!(code, 0, "{out}");
    // A line per step it saw, in the order of the phases: the controller may move the claim
    // past pending before the first look (a CI run saw it booting 5 ms after it was made).
    let seen: Vec<&str> = out
        .lines()
        .filter_map(|l| {
            ["pending", "booting", "ready"]
                .into_iter()
                .find(|p| l.contains(&format!(": {p} after")))
        })
        .collect();
    assert!(
        seen.windows(2).all(|w| w[0] != w[1])
            && seen
                .is_sorted_by_key(|p| ["pending", "booting", "ready"].iter().position(|q| q == p)),
        "{out}"
    );
    assert!(
        out.lines().last().unwrap().contains(": ready after"),
        "{out}"
    );
    stop.cancel();
    running.await.unwrap();

    let (server, ctl) = failing_setup().await;
    let stop = CancellationToken::new();
    let running = tokio::spawn(ctl.run(Duration::from_millis(100), Duration::ZERO, stop.clone()));
    let (out, code) = run(&server, &["claim", "bench-01", "--wait"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(": failed after"), "{out}");
    assert!(out.contains("no power on the rack"), "{out}");
    assert!(out.contains("StartupJobFailed"), "{out}");
    stop.cancel();
    running.await.unwrap();

    // Interrupted (Ctrl-C) before ready: exit 1, never the 0 of ready; the claim lives on.
    let (server, _ctl) = setup().await;
    let url = server.url();
    let cli =
        Cli::try_parse_from(["fleet", "--redis", &url, "claim", "bench-02", "--wait"]).unwrap();
    let interrupted = CancellationToken::new();
    interrupted.cancel();
    let ctx = cli.global.ctx(interrupted, false);
    let mut out = Vec::new();
    let err = bounded("an interrupted wait", cli.command.run(&ctx, &mut out))
        .await
        .expect_err("an interrupted wait is not a success");
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("stopped waiting"), "{err}");
    assert!(String::from_utf8_lossy(&out).contains(": pending after"));
    let (claims, _) = run(&server, &["claims", "-o", "json"]).await;
    assert_eq!(json(&claims).as_array().unwrap().len(), 1, "{claims}");
}

// `--watch` on the views: each frame redrawn, JSON one document a line.
#[tokio::test]
async fn views_watch_like_state_does() {
    let (server, mut ctl) = setup().await;
    run(&server, &["claim", "bench-01"]).await;
    settle(&mut ctl).await;
    for (view, token) in [
        (&["slots"][..], "bench-01"),
        (&["claims"], "bench-01"),
        (&["groups"], "pool-a"),
        (&["live"], "bench-01"),
    ] {
        let url = server.url();
        let mut argv = vec!["fleet", "--redis", &url];
        argv.extend_from_slice(view);
        argv.extend(["--watch", "--interval", "100ms"]);
        let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let shutdown = CancellationToken::new();
        let ctx = cli.global.ctx(shutdown.clone(), false);
        let mut out = Frames {
            buf: Vec::new(),
            blank_lines: 0,
            shutdown,
        };
        bounded("watch", cli.command.run(&ctx, &mut out))
            .await
            .unwrap();
        let text = String::from_utf8(out.buf).unwrap();
        assert!(
            text.matches(token).count() >= 2,
            "{view:?} drew twice: {text}"
        );
    }
}

/// A writer that stops a watch after two frames (a frame ends with a blank line).
struct Frames {
    buf: Vec<u8>,
    blank_lines: usize,
    shutdown: CancellationToken,
}

impl std::io::Write for Frames {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if data == b"\n" && self.buf.ends_with(b"\n\n") {
            self.blank_lines += 1;
            if self.blank_lines >= 2 {
                self.shutdown.cancel();
            }
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// Describe explains the deadline from the span the claim was given; where the
// group's timings changed since, it says the span as it was and the budget as it is.
#[tokio::test]
async fn describe_explains_the_deadline_as_it_was_set() {
    let (server, _ctl) = setup().await;
    run(&server, &["claim", "bench-01"]).await;
    let (table, code) = run(&server, &["describe", "bench-01"]).await;
    assert_eq!(code, 0, "{table}");
    let budget = table
        .split("= requested + max(attempt budget ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("{table}"))
        .to_owned();
    let changed = yaml_of(pool(&server).timing("readiness_gate_timeout", "1m"));
    let cfg = config::parse(&changed, Path::new("t.yaml")).unwrap();
    Catalog::of(&cfg)
        .publish(&mut conn(&server).await, &Keys::default())
        .await
        .unwrap();
    let (table, _) = run(&server, &["describe", "bench-01"]).await;
    assert!(
        table.contains(&format!("= requested + {budget} (the attempt budget or max_node_provision_time when it was made; the group's attempt budget is")),
        "{table}"
    );
}
