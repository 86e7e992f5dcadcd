//! Redis ACLs (SPEC §2.11): the file `fleet acl` prints, loaded by a real redis-server with
//! `--aclfile`, and every user through the real binary over `redis://user:password@host:port/`.
//!
//! A bench's user beats and can change no other bench's heartbeat, hold or registration, runs no
//! script and adds nothing to anything shared; the viewer runs every view with plain reads and
//! writes nothing; the controller runs `fleet serve` (a claim to ready through its startup
//! operation, the provider, a clean stop) and the writing verbs. An agent of this release beats
//! under the previous release's ACL file, and one of the previous release under that file is
//! still read (SPEC §2.11, the upgrade order).

use crate::support;

use std::time::Duration;

use fleet::agent::{Agent, Config as AgentConfig, Event};
use fleet::store::keys::Keys;
use fleet_redis::connect::Endpoint;
use fleet_testing::Fixture;
use fleet_testing::fixture::{Group, Op};
use support::acl::*;
use support::*;

const USERS: [&str; 4] = ["fleet-controller", "fleet-viewer", "bench-a", "bench-b"];

#[tokio::test]
async fn a_bench_beats_as_itself_and_can_change_no_other_benchs_heartbeat_hold_or_registration() {
    let acl = Acl::start();
    let keys = Keys::default();
    let scripts = command_calls(&acl.server, "eval").await;
    acl.ok("bench-b", &["beat", "bench-b", "--ttl", "1h"]);
    acl.ok(
        "fleet-controller",
        &["hold", "bench-b", "--reason", "repairs"],
    );
    let carried = acl.ok("bench-b", &["beat", "bench-b", "--ttl", "1h"]);
    assert!(carried.contains("holding (repairs)"), "{carried}");
    // The beat ran no script, and added its name to nothing shared.
    assert_eq!(
        command_calls(&acl.server, "eval").await - scripts,
        1,
        "the hold's script alone"
    );
    let joined: i64 = raw(&acl.server, &["EXISTS", &keys.joined()]).await;
    assert_eq!(joined, 0);
    acl.ok("bench-a", &["beat", "bench-a", "--ttl", "1h"]);
    let heartbeat: Option<String> =
        raw(&acl.server, &["GET", &keys.heartbeat(&name("bench-a"))]).await;
    assert!(heartbeat.is_some_and(|v| v.contains(r#""ttl":3600000"#)));
    let before = acl.ok("fleet-viewer", &["state", "-o", "json"]);
    assert_eq!(
        states(&before),
        [row("bench-a", "UP", None), row("bench-b", "HELD", None)]
    );
    let b_key = keys.heartbeat(&name("bench-b"));
    let b_value: String = raw(&acl.server, &["GET", &b_key]).await;
    let b_request: String = raw(&acl.server, &["HGET", &keys.hold_requests(), "bench-b"]).await;

    // Through fleet's own verbs, with bench-a's credentials.
    acl.refused("bench-a", &["beat", "bench-b"]);
    acl.refused("bench-a", &["hold", "bench-a", "--reason", "forged"]);
    acl.refused("bench-a", &["hold", "bench-b", "--reason", "forged"]);
    acl.refused("bench-a", &["release", "bench-b"]);
    acl.refused("bench-a", &["forget", "bench-b"]);
    acl.refused("bench-a", &["forget", "bench-a"]);

    // Raw, as a tool holding bench-a's credentials would try.
    let mut c = acl.conn("bench-a").await;
    let holds = keys.hold_requests();
    let registry = keys.registry();
    let joined = keys.joined();
    let b_join = keys.joined_key(&name("bench-b"));
    for args in [
        // Another bench's heartbeat.
        &["SET", &b_key, "{}"][..],
        &["DEL", &b_key],
        &["PEXPIRE", &b_key, "1"],
        &["EVAL", "return redis.call('DEL', KEYS[1])", "1", &b_key],
        &["EVAL", "return redis.call('DEL', ARGV[1])", "0", &b_key],
        // No code of its choosing runs in Redis (SPEC §7): a script that never ends would answer
        // BUSY to every other bench, the views and the controller.
        &["EVAL", "while true do end", "0"],
        &["EVAL_RO", "while true do end", "0"],
        &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
        &["FCALL", "f", "0"],
        &["SCRIPT", "LOAD", "return 1"],
        &["FUNCTION", "LIST"],
        // A hold request, for itself or another.
        &["HSET", &holds, "bench-a", r#"{"reason":"forged"}"#],
        &["HSET", &holds, "bench-b", r#"{"reason":"forged"}"#],
        &["HDEL", &holds, "bench-b"],
        &["DEL", &holds],
        &[
            "EVAL",
            "return redis.call('HDEL', ARGV[1], 'bench-b')",
            "0",
            &holds,
        ],
        // Removing a bench: the registries, their version, a join key.
        &["SREM", &registry, "bench-b"],
        &["SREM", &joined, "bench-b"],
        &["DEL", &joined],
        &["DEL", &b_join],
        &["INCR", &keys.registry_version()],
        // Another bench's registration, or its own, or any name in anything shared (SPEC §7: a
        // user that may add one name to a set may add millions).
        &["SADD", &registry, "bench-b"],
        &["SADD", &registry, "bench-a"],
        &["SADD", &joined, "bench-z"],
        &["SADD", &joined, "bench-a"],
        &["SET", &b_join, "0"],
        &["SPUBLISH", "{fleet}:other", "x"],
        // Anything past presence.
        &["GET", &keys.leader()],
        &["KEYS", "*"],
        &["FLUSHALL"],
        &["CONFIG", "GET", "save"],
    ] {
        nope(&mut c, args).await;
    }
    // bench-b is as it was: its key, its hold request, its row.
    let b_after: String = raw(&acl.server, &["GET", &b_key]).await;
    assert_eq!(b_after, b_value);
    let request_after: String = raw(&acl.server, &["HGET", &holds, "bench-b"]).await;
    assert_eq!(request_after, b_request);
    assert_eq!(
        states(&acl.ok("fleet-viewer", &["state", "-o", "json"])),
        states(&before)
    );

    // A forgotten bench that beats as its own user is not registered again by its beat: fleet's
    // users register it (`fleet serve` its slots, at its next start or reload).
    acl.ok("fleet-controller", &["forget", "bench-b"]);
    acl.ok("bench-b", &["beat", "bench-b", "--ttl", "1h"]);
    let after = acl.ok("fleet-viewer", &["state", "-o", "json"]);
    assert_eq!(states(&after), [row("bench-a", "UP", None)]);
    acl.ok("fleet-controller", &["register", "bench-b"]);
    let again = acl.ok("fleet-viewer", &["state", "-o", "json"]);
    assert_eq!(
        states(&again),
        [row("bench-a", "UP", None), row("bench-b", "UP", None)]
    );
}

#[tokio::test]
async fn the_agent_beats_and_stops_through_a_url_with_its_benchs_user_and_password() {
    let acl = Acl::start();
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let agent = Agent::new(
        AgentConfig {
            name: name("bench-a"),
            interval: Duration::from_millis(200),
            ttl: Duration::from_secs(60),
            final_ttl: Duration::ZERO,
            final_hold: None,
            power_off: None,
        },
        Endpoint::new(acl.url("bench-a"), Duration::from_secs(10)),
        Keys::default(),
    )
    .with_events(tx);
    let task = tokio::spawn(agent.run(shutdown.clone()));
    for _ in 0..2 {
        match bounded("a beat", events.recv()).await {
            Some(Event::Beat(receipt)) => assert_eq!(receipt.hold, None),
            other => panic!("expected a beat, got {other:?}"),
        }
    }
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\n");
    shutdown.cancel();
    loop {
        match bounded("the final beat", events.recv()).await {
            Some(Event::Final(result)) => {
                assert!(result.is_ok(), "{result:?}");
                break;
            }
            Some(Event::Beat(_)) => continue,
            other => panic!("expected the final beat, got {other:?}"),
        }
    }
    bounded("the agent to stop", task).await.unwrap();
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "");
    // The same agent as another bench's user is refused, and says why.
    let o = acl.fleet("bench-b", &["beat", "bench-a"]);
    assert_eq!(o.status.code(), Some(1));
}

/// Starts `fleet serve` as the controller user, with a claim on bench-a driven to ready by its
/// startup operation (which beats as bench-a); returns the process and the provider's address.
async fn serving(acl: &Acl) -> (Serve, String) {
    let args = QUICK_SERVE;
    let mut serve = Serve::start_at("serve", &acl.url("fleet-controller"), &acl.config(), &args);
    let started = serve.log(&["fleet serve started"]).await;
    let grpc = started
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .expect("the start line names the provider's address")
        .to_owned();
    serve.log(&["became the leader"]).await;
    acl.ok("fleet-controller", &["claim", "bench-a"]);
    serve.log(&["claim moved", "to=ready"]).await;
    (serve, grpc)
}

#[tokio::test]
async fn the_controller_runs_fleet_serve_the_provider_and_the_writing_verbs_as_its_user() {
    let acl = Acl::start();
    let (mut serve, grpc) = serving(&acl).await;
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\n");
    // The provider's scale-up: a claim on bench-b, booted by its operation as bench-b.
    acl.ok(
        "fleet-controller",
        &[
            "autoscaler",
            "--grpc-addr",
            &grpc,
            "increase",
            "pool-a",
            "1",
        ],
    );
    serve
        .log(&["claim moved", "slot=bench-b", "to=ready"])
        .await;
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\nbench-b\n");
    // The writing verbs.
    acl.ok(
        "fleet-controller",
        &["hold", "bench-a", "--reason", "firmware"],
    );
    acl.ok("fleet-controller", &["release", "bench-a"]);
    let claims: serde_json::Value =
        serde_json::from_str(&acl.ok("fleet-viewer", &["claims", "-o", "json"])).unwrap();
    let on_b = claims
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["slot"] == "bench-b")
        .expect("a claim on bench-b");
    acl.ok(
        "fleet-controller",
        &["cancel", on_b["name"].as_str().unwrap()],
    );
    // The cancel powers bench-b off: its shutdown operation beats TTL 0 as bench-b.
    serve
        .log(&["claim moved", "slot=bench-b", "to=completed"])
        .await;
    let lines = serve.stop().await;
    let status = bounded("exit", serve.child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0), "{lines:#?}");
    // Nothing the controller does is refused, but the persistence check it does without.
    let refused: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("NOPERM") || l.contains("may not") || l.contains("no permissions"))
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
    assert!(
        lines.iter().any(|l| l.contains("CONFIG GET refused")),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn the_viewer_runs_every_view_and_every_write_it_tries_is_refused() {
    let acl = Acl::start();
    let (mut serve, _) = serving(&acl).await;
    // A request bench-a has not carried yet (its operation beat once, before it).
    acl.ok(
        "fleet-controller",
        &["hold", "bench-a", "--reason", "firmware"],
    );

    let state = acl.ok("fleet-viewer", &["state", "-o", "json"]);
    assert_eq!(
        states(&state),
        [
            row("bench-a", "UP", Some("firmware")),
            row("bench-b", "DOWN", None)
        ]
    );
    let table = acl.ok("fleet-viewer", &["state"]);
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("bench-a")),
        "{table}"
    );
    assert!(table.contains("LAST SEEN"), "{table}");
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\n");
    assert_eq!(
        acl.ok("fleet-viewer", &["live", "bench-a", "bench-x"]),
        "bench-a\n"
    );
    let slots: serde_json::Value =
        serde_json::from_str(&acl.ok("fleet-viewer", &["slots", "-o", "json"])).unwrap();
    let slot_names: Vec<&str> = slots
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(slot_names, ["bench-a", "bench-b"]);
    assert_eq!(slots[0]["phase"], "ready");
    let claims: serde_json::Value =
        serde_json::from_str(&acl.ok("fleet-viewer", &["claims", "-o", "json"])).unwrap();
    assert_eq!(claims.as_array().unwrap().len(), 1);
    assert_eq!(claims[0]["slot"], "bench-a");
    assert_eq!(claims[0]["phase"], "ready");
    let claim = claims[0]["name"].as_str().unwrap().to_owned();
    let groups: serde_json::Value =
        serde_json::from_str(&acl.ok("fleet-viewer", &["groups", "-o", "json"])).unwrap();
    assert_eq!(groups[0]["name"], "pool-a");
    assert_eq!(groups[0]["target"], 1);
    let described: serde_json::Value =
        serde_json::from_str(&acl.ok("fleet-viewer", &["describe", "bench-a", "-o", "json"]))
            .unwrap();
    assert_eq!(described["claim"]["name"], claim.as_str());
    assert!(
        !described["timeline"].as_array().unwrap().is_empty(),
        "{described}"
    );
    let by_claim = acl.ok("fleet-viewer", &["describe", &claim]);
    assert!(by_claim.contains("bench-a"), "{by_claim}");
    // A watch: its first frame, then it is stopped.
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args([
            "--redis",
            &acl.url("fleet-viewer"),
            "state",
            "--watch",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut frames =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));
    let first = bounded("the watch's first frame", frames.next_line())
        .await
        .unwrap()
        .unwrap();
    support::contract::check(&["state", "-o", "json"], &first);
    assert_eq!(states(&first), states(&state));
    watch.kill().await.unwrap();
    // Nothing the views sent was refused, and none ran a script (SPEC §7): Redis logs every
    // refusal and counts every call.
    let log: redis::Value = raw(&acl.server, &["ACL", "LOG"]).await;
    assert!(!format!("{log:?}").contains("\"fleet-viewer\""), "{log:?}");
    let user: redis::Value = raw(&acl.server, &["ACL", "GETUSER", "fleet-viewer"]).await;
    assert!(!format!("{user:?}").contains("eval"), "{user:?}");

    // Every write is refused, through the verbs and raw.
    for args in [
        &["beat", "bench-a"][..],
        &["hold", "bench-b", "--reason", "x"],
        &["release", "bench-a"],
        &["forget", "bench-a"],
        &["claim", "bench-b"],
        &["cancel", &claim],
    ] {
        acl.refused("fleet-viewer", args);
    }
    let keys = Keys::default();
    let mut c = acl.conn("fleet-viewer").await;
    let a_key = keys.heartbeat(&name("bench-a"));
    for args in [
        &["SET", &a_key, "{}"][..],
        &["DEL", &a_key],
        &["HSET", &keys.hold_requests(), "bench-b", "{}"],
        &["SADD", &keys.joined(), "bench-z"],
        &["SET", &keys.leader(), "me 1"],
        &["EVAL", "return 1", "0"],
        &["EVAL_RO", "return redis.call('DEL', KEYS[1])", "1", &a_key],
        &["EVAL_RO", "while true do end", "0"],
        &["FCALL_RO", "f", "0"],
        &["SCRIPT", "LOAD", "return 1"],
        &["FLUSHALL"],
    ] {
        let said = match nope_or_ro(&mut c, args).await {
            Some(said) => said,
            None => panic!("{args:?} was allowed"),
        };
        assert!(!said.is_empty());
    }
    let still: Option<String> = raw(&acl.server, &["GET", &a_key]).await;
    assert!(still.is_some(), "bench-a's heartbeat is untouched");
    serve.stop().await;
}

#[test]
fn fleet_acl_names_every_password_file_it_lacks_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    // The file of one group with one slot, `slot`.
    let one_slot = |slot: &str| {
        let noop = || Op::command(["true"]);
        Fixture::new()
            .group(Group::new("pool-a").max(1).startup(noop()).shutdown(noop()))
            .slots("pool-a", [slot])
            .write(dir.path())
    };
    let config = one_slot("bench-a");
    let passwords = dir.path().join("passwords");
    std::fs::create_dir(&passwords).unwrap();
    std::fs::write(passwords.join("fleet-viewer"), "s3cret\n").unwrap();
    let o = acl_verb(&config, &passwords);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "no half file");
    let err = text(&o.stderr);
    for user in ["fleet-controller", "bench-a"] {
        let file = passwords.join(user).display().to_string();
        assert!(
            err.contains(&format!(
                "{file}: missing: write the password of the Redis user {user} there"
            )),
            "{err}"
        );
    }
    assert!(!err.contains("fleet-viewer:"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");

    // A slot named like one of fleet's own users would take its place.
    let config = one_slot("fleet-viewer");
    let o = acl_verb(&config, &passwords);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("the slot fleet-viewer has the name of a Redis user"),
        "{}",
        text(&o.stderr)
    );
    // A configuration that cannot be read is bad input too.
    let o = acl_verb(&dir.path().join("nowhere.yaml"), &passwords);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("nowhere.yaml"));
}

// SPEC §2.4: a beat clears a lapsed hold request only when its user may write the requests. A
// bench's own user may not: the lapsed field stays, carried by no beat and shown by no reader,
// until the operator's next verb for that bench clears it.
#[tokio::test]
async fn a_lapsed_request_is_not_carried_and_waits_for_the_operator_to_clear_it() {
    let acl = Acl::start();
    let holds = Keys::default().hold_requests();
    acl.ok("bench-a", &["beat", "bench-a", "--ttl", "1h"]);
    acl.ok(
        "fleet-controller",
        &["hold", "bench-a", "--reason", "short", "--for", "1ms"],
    );
    bounded("the request to lapse", async {
        loop {
            let state = acl.ok("fleet-viewer", &["state", "bench-a", "-o", "json"]);
            if states(&state) == [row("bench-a", "UP", None)] {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    let beat = acl.ok("bench-a", &["beat", "bench-a", "--ttl", "1h"]);
    assert_eq!(beat, "bench-a: beat written, ttl 1h\n");
    let left: Option<String> = raw(&acl.server, &["HGET", &holds, "bench-a"]).await;
    assert!(
        left.is_some_and(|r| r.contains("short")),
        "the bench could not clear it"
    );
    acl.ok("fleet-controller", &["release", "bench-a"]);
    let left: Option<String> = raw(&acl.server, &["HGET", &holds, "bench-a"]).await;
    assert_eq!(left, None);
}

// SPEC §4.10, §2.11: a bench's user reads its own power-off request (in its beat) and writes its
// own answer, and nothing of another bench's; the controller's user writes the requests. The
// agent, as its bench's user, answers and powers "off".
#[tokio::test]
async fn a_bench_reads_its_own_power_off_request_and_answers_it_and_no_other_benchs() {
    use fleet::store::power_off::{Answer, OffAck, PowerOff};
    let acl = Acl::start();
    let keys = Keys::default();
    let controller = PowerOff::new(acl.conn("fleet-controller").await, keys.clone());
    controller
        .ask(&name("bench-a"), "na", Duration::from_secs(60))
        .await
        .unwrap();
    controller
        .ask(&name("bench-b"), "nb", Duration::from_secs(60))
        .await
        .unwrap();
    let b_request: String = raw(&acl.server, &["GET", &keys.off_request(&name("bench-b"))]).await;

    let mark = acl.dir.path().join("bench-a.off");
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let agent = Agent::new(
        AgentConfig {
            name: name("bench-a"),
            interval: Duration::from_millis(100),
            ttl: Duration::from_secs(60),
            final_ttl: Duration::ZERO,
            final_hold: None,
            power_off: Some(format!("echo off > '{}'", mark.display())),
        },
        Endpoint::new(acl.url("bench-a"), Duration::from_secs(10)),
        keys.clone(),
    )
    .with_events(tx);
    let task = tokio::spawn(agent.run(shutdown.clone()));
    let ran = bounded("the power-off command", async {
        loop {
            match events.recv().await.expect("the agent stopped") {
                Event::OffRan { nonce, result } => return (nonce, result),
                Event::Beat(receipt) => assert_eq!(receipt.off_problem, None),
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(ran, ("na".to_owned(), Ok(())));
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "off\n");
    assert_eq!(
        controller.answer(&name("bench-a")).await.unwrap(),
        Some(Ok(OffAck {
            nonce: "na".into(),
            answer: Answer::Accepted,
            why: None,
        }))
    );
    shutdown.cancel();
    bounded("the agent to stop", task).await.unwrap();

    // Raw, as a tool holding bench-a's credentials would try.
    let mut c = acl.conn("bench-a").await;
    let (a_request, a_ack) = (
        keys.off_request(&name("bench-a")),
        keys.off_ack(&name("bench-a")),
    );
    let (b_key, b_ack) = (
        keys.off_request(&name("bench-b")),
        keys.off_ack(&name("bench-b")),
    );
    for args in [
        // Another bench's request and answer: neither read nor written.
        &["GET", &b_key][..],
        &["SET", &b_key, "{}"],
        &["DEL", &b_key],
        &["GET", &b_ack],
        &["SET", &b_ack, r#"{"v":1,"nonce":"nb","answer":"accepted"}"#],
        &[
            "EVAL",
            "return redis.call('SET', ARGV[1], 'x')",
            "0",
            &b_ack,
        ],
        // Its own request: read only (only fleet's controller asks).
        &["SET", &a_request, "{}"],
        &["DEL", &a_request],
        &["PEXPIRE", &a_request, "1"],
    ] {
        nope(&mut c, args).await;
    }
    // What it may: read its own request, write its own answer.
    let own: Option<String> = redis::cmd("GET")
        .arg(&a_request)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(own.is_some_and(|r| r.contains(r#""nonce":"na""#)));
    let () = redis::cmd("SET")
        .arg(&a_ack)
        .arg(r#"{"v":1,"nonce":"na","answer":"accepted"}"#)
        .query_async(&mut c)
        .await
        .unwrap();
    // bench-b's request stands as the controller wrote it, unanswered.
    let b_after: String = raw(&acl.server, &["GET", &b_key]).await;
    assert_eq!(b_after, b_request);
    assert_eq!(controller.answer(&name("bench-b")).await.unwrap(), None);
}

// SPEC §2.11, README's upgrade order (fleet, then the agents, then the ACL file): the beat of this
// release is made of commands the previous release's file already granted a bench, so an agent
// of this release beats under it (one round trip; its registration refused once, then not sent),
// and answers a power-off with the commands that file grants (SET, GET). An agent of
// the previous release beats under its own file and is read by this release; under this
// release's file its script is refused, which is why the file comes last.
#[tokio::test]
async fn agents_of_either_release_beat_under_the_previous_acl_file() {
    use fleet::store::power_off::{Answer, OffAck, PowerOff};
    let acl = Acl::start();
    let keys = Keys::default();
    set_rules(&acl, "bench-a", &previous_rules(&keys, "bench-a")).await;
    set_rules(&acl, "bench-b", &previous_rules(&keys, "bench-b")).await;
    let counting = fleet_redis::counting::Counting::new(acl.conn("bench-a").await);
    let presence = fleet::store::presence::Presence::new(counting.clone(), keys.clone());
    let receipt = presence
        .beat(&beat("bench-a", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(receipt.off_problem, None);
    assert_eq!(
        counting.trips(),
        2,
        "the first beat of the process: what is there, then the beat"
    );
    presence
        .beat(&beat("bench-a", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(counting.trips(), 3, "one round trip a beat");
    let refused = command_calls(&acl.server, "sadd").await;
    presence
        .beat(&beat("bench-a", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        command_calls(&acl.server, "sadd").await,
        refused,
        "a registration refused once is not sent again"
    );
    // Its power-off answer, under that file: written, and the request read back.
    let controller = PowerOff::new(acl.conn("fleet-controller").await, keys.clone());
    let request = controller
        .ask(&name("bench-a"), "na", Duration::from_secs(60))
        .await
        .unwrap();
    let ack = OffAck {
        nonce: "na".into(),
        answer: Answer::Refused,
        why: Some("test".into()),
    };
    let own = PowerOff::new(acl.conn("bench-a").await, keys.clone());
    assert!(
        own.acknowledge(&name("bench-a"), &request, &ack)
            .await
            .unwrap()
    );
    assert_eq!(
        controller.answer(&name("bench-a")).await.unwrap(),
        Some(Ok(ack))
    );

    // An agent of the previous release, under its file: beats, and is read.
    let mut old = acl.conn("bench-b").await;
    previous_beat(&mut old, &keys, "bench-b", 60_000)
        .await
        .unwrap();
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\nbench-b\n");
    // Under this release's file, its script is refused: the file goes last.
    let file = acl_verb(&acl.config(), &acl.dir.path().join("passwords"));
    let line = text(&file.stdout)
        .lines()
        .find(|l| l.starts_with("user bench-b "))
        .unwrap()
        .to_owned();
    let rules = line.splitn(5, ' ').nth(4).unwrap().to_owned();
    set_rules(&acl, "bench-b", &rules).await;
    let mut old = acl.conn("bench-b").await;
    let err = previous_beat(&mut old, &keys, "bench-b", 60_000)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
}

// README's upgrade order, step 1: this release reads a heartbeat with GETRANGE, which the
// previous file's controller and viewer lack. Under that file alone every reader is blind, saying
// what to do, and reads no bench DOWN (a refused read says nothing of a bench); once the two
// users are given the command (`ACL SETUSER … +getrange`), fleet and the views read the fleet.
#[tokio::test]
async fn this_release_under_the_previous_fleet_users_is_blind_until_they_may_getrange() {
    use fleet::store::presence::{Presence, PresenceError};
    let acl = Acl::start();
    let keys = Keys::default();
    set_rules(&acl, "fleet-controller", &previous_fleet_rules(&keys, true)).await;
    set_rules(&acl, "fleet-viewer", &previous_fleet_rules(&keys, false)).await;
    Presence::new(acl.conn("bench-a").await, keys.clone())
        .beat(&beat("bench-a", Duration::from_secs(60)))
        .await
        .unwrap();
    let controller = Presence::new(acl.conn("fleet-controller").await, keys.clone());
    let err = controller.read(&[name("bench-a")]).await.unwrap_err();
    assert!(matches!(err, PresenceError::Outdated(_)), "{err:?}");
    let o = acl.fleet("fleet-viewer", &["state"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("ACL file is older than this fleet"), "{err}");
    assert!(err.contains("Upgrading"), "{err}");
    assert!(!text(&o.stdout).contains("DOWN"), "{}", text(&o.stdout));
    for user in ["fleet-controller", "fleet-viewer"] {
        let () = raw(&acl.server, &["ACL", "SETUSER", user, "+getrange"]).await;
    }
    let snap = controller.read(&[name("bench-a")]).await.unwrap();
    assert_eq!(
        snap.benches[0].row(snap.now).state,
        fleet::domain::state::State::Up
    );
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\n");
}

// A bench user from an ACL file written before the power-off keys (SPEC §4.10) still beats: the
// beat reads the request, is refused it, says what to repair, and lands.
#[tokio::test]
async fn a_bench_user_from_an_older_acl_file_still_beats_and_is_told_to_renew_it() {
    let acl = Acl::start();
    let keys = Keys::default();
    let old_rules = format!(
        "~{} ~{} -@all +del +eval +get +ping +select +set +time (%R~{} -@all +hget) (~{} -@all +sadd)",
        keys.heartbeat(&name("bench-a")),
        keys.joined_key(&name("bench-a")),
        keys.hold_requests(),
        keys.joined()
    );
    set_rules(&acl, "bench-a", &old_rules).await;
    let counting = fleet_redis::counting::Counting::new(acl.conn("bench-a").await);
    let presence = fleet::store::presence::Presence::new(counting.clone(), keys);
    let receipt = presence
        .beat(&beat("bench-a", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(counting.trips(), 2);
    assert_eq!(receipt.off_request, None);
    let problem = receipt
        .off_problem
        .expect("the beat says what it could not read");
    assert!(
        problem.starts_with("this bench's Redis user may not read its power-off request (")
            && problem.contains("write the ACL file again with `fleet acl`"),
        "{problem}"
    );
    assert_eq!(acl.ok("fleet-viewer", &["live"]), "bench-a\n");
}

#[tokio::test]
async fn every_user_may_read_a_clusters_slot_map_and_the_controller_may_wait_for_replicas() {
    let acl = Acl::start();
    // A Redis Cluster connection reads the slot map as it connects; this server is no cluster,
    // so the command fails, but on its mode, not on the user's permission.
    for user in USERS {
        let mut conn = acl.conn(user).await;
        let err = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<redis::Value>(&mut conn)
            .await
            .expect_err("no cluster");
        assert_eq!(err.code(), Some("ERR"), "{user}: {err}");
        assert!(
            err.to_string().contains("cluster support disabled"),
            "{user}: {err}"
        );
    }
    // The replica gate (SPEC §5.6): INCR of its counter, then WAIT.
    let mut conn = acl.conn("fleet-controller").await;
    let (_, acked): (i64, i64) = redis::pipe()
        .cmd("INCR")
        .arg(Keys::default().replicated())
        .cmd("WAIT")
        .arg(0)
        .arg(100)
        .query_async(&mut conn)
        .await
        .expect("the controller may wait for replicas");
    assert_eq!(acked, 0);
}

// SPEC §2.11, §7 S9: `fleet acl --prefix P` names its users after the prefix, so two fleets'
// files loaded into one Redis add users rather than replacing each other's, and each fleet's users
// reach only their own prefix's keys and channel, both ways.
#[tokio::test]
async fn two_fleets_on_one_redis_are_apart_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml(0)).unwrap();
    let passwords = dir.path().join("passwords");
    std::fs::create_dir(&passwords).unwrap();
    let team = [
        "team+controller",
        "team+viewer",
        "team+bench.bench-a",
        "team+bench.bench-b",
    ];
    for user in USERS.iter().chain(&team) {
        std::fs::write(passwords.join(user), format!("pw-{user}\n")).unwrap();
    }
    let acl_of = |prefix: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args(prefix)
            .arg("acl")
            .arg("--config")
            .arg(&config)
            .arg("--passwords")
            .arg(&passwords)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        (text(&o.stdout), text(&o.stderr))
    };
    let file = |prefix: &[&str]| {
        let (file, said) = acl_of(prefix);
        assert!(!said.contains("warning"), "{said}");
        file
    };
    let (ours, theirs) = (file(&[]), file(&["--prefix", "team"]));
    // A prefix with ':' is reached by the fleet named by the part before it (its group keys are
    // `{team:*}:*`): said, since no ACL can keep them apart.
    for user in ["controller", "viewer", "bench.bench-a", "bench.bench-b"] {
        std::fs::write(passwords.join(format!("team:a+{user}")), "pw\n").unwrap();
    }
    let (_, said) = acl_of(&["--prefix", "team:a"]);
    assert!(
        said.contains("warning: the prefix team:a holds ':'") && said.contains("prefix team "),
        "{said}"
    );
    let names = |f: &str| -> Vec<String> {
        f.lines()
            .map(|l| l.split_whitespace().nth(1).unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&ours), USERS);
    assert_eq!(names(&theirs), team);
    let aclfile = dir.path().join("users.acl");
    std::fs::write(&aclfile, format!("{ours}{theirs}")).unwrap();
    let server = fleet_testing::RedisServer::with(fleet_testing::Options {
        tcp: true,
        args: vec!["--aclfile".into(), aclfile.display().to_string()],
        ..Default::default()
    })
    .unwrap();
    let port = server.port().unwrap();
    let url = |user: &str| format!("redis://{user}:pw-{user}@127.0.0.1:{port}/");
    let run = |user: &str, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .arg("--redis")
            .arg(url(user))
            .args(args)
            .output()
            .unwrap()
    };
    // Each bench beats in its own fleet.
    let o = run("bench-a", &["beat", "bench-a"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run(
        "team+bench.bench-a",
        &["--prefix", "team", "beat", "bench-a"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // And in neither the other's.
    for (user, prefix) in [
        ("bench-a", &["--prefix", "team"][..]),
        ("team+bench.bench-a", &[][..]),
    ] {
        let mut args = prefix.to_vec();
        args.extend(["beat", "bench-a"]);
        let o = run(user, &args);
        assert_eq!(o.status.code(), Some(1), "{user} {args:?}");
        assert!(
            text(&o.stderr).contains("the user may not do this"),
            "{}",
            text(&o.stderr)
        );
    }
    // The controllers and viewers reach their own prefix alone.
    let (fleet_keys, team_keys) = (Keys::default(), Keys::new("team").unwrap());
    for (user, own, other) in [
        ("fleet-controller", &fleet_keys, &team_keys),
        ("team+controller", &team_keys, &fleet_keys),
        ("fleet-viewer", &fleet_keys, &team_keys),
        ("team+viewer", &team_keys, &fleet_keys),
    ] {
        let mut c = Endpoint::new(url(user), Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        let mine: Option<String> = redis::cmd("GET")
            .arg(own.heartbeat(&name("bench-a")))
            .query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert!(mine.is_some(), "{user}");
        nope(&mut c, &["GET", &other.heartbeat(&name("bench-a"))]).await;
        nope(&mut c, &["SPUBLISH", &other.wake_channel(), "x"]).await;
    }
    let o = run("team+viewer", &["--prefix", "team", "live", "bench-a"]);
    assert_eq!(text(&o.stdout), "bench-a\n", "{}", text(&o.stderr));
}
