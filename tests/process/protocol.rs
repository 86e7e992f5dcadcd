//! The presence protocol followed without fleet's code (docs/protocol.md): the reference reader
//! and agent in Python (examples/python/fleet_protocol.py, standard library only) against a real
//! redis-server, both ways: what it writes fleet reads, what fleet writes (or a foreign writer
//! leaves) it reads as fleet does, its agent's two "at once" rules, and the test vectors read as
//! the protocol says.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support;
use support::*;

fn reference(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/fleet_protocol.py");
    let o = Command::new("python3")
        .arg(&script)
        .args(args)
        .output()
        .expect("python3 runs (scripts/ensure-deps.sh installs it)");
    assert!(
        o.status.success(),
        "fleet_protocol.py {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `fleet state -o json`'s rows by name.
fn fleet_rows(server: &fleet_testing::RedisServer, names: &[&str]) -> Vec<Value> {
    let mut args = vec!["state", "-o", "json"];
    args.extend_from_slice(names);
    let rows: Value = serde_json::from_str(&fleet_ok(server, &args)).unwrap();
    rows.as_array().unwrap().clone()
}

/// The reference reader's rows.
fn reference_rows(server: &fleet_testing::RedisServer, names: &[&str]) -> Vec<Value> {
    let url = server.url();
    let mut args = vec!["read", url.as_str()];
    args.extend_from_slice(names);
    reference(&args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The fields both readers decide alike; `expires_in_ms` moves with the instant each one read,
/// and the error's words are each reader's own (its kind is the protocol's).
fn decided(row: &Value) -> Value {
    let error = row["error"].as_str().map(|e| !e.is_empty());
    serde_json::json!({
        "name": row["name"], "state": row["state"], "hold": row["hold"], "ttl_ms": row["ttl_ms"],
        "load": row["load"], "cores": row["cores"], "error": error,
        "error_kind": row["error_kind"], "requested_hold": row["requested_hold"],
    })
}

#[test]
fn the_test_vectors_read_as_the_protocol_says_in_python_too() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol-vectors.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let total: usize = ["vectors", "time", "names", "requests", "announce", "again"]
        .iter()
        .map(|g| doc[g].as_array().unwrap().len())
        .sum();
    assert!(total > 200, "{total}");
    let said = reference(&["vectors", path.to_str().unwrap()]);
    assert!(
        said.contains(&format!("{total} of {total} vectors")),
        "{said}"
    );
}

#[test]
fn a_beat_written_in_python_reads_in_fleet_and_carries_an_operators_hold() {
    let server = server();
    let url = server.url();
    reference(&[
        "beat", &url, "py-1", "--ttl", "60000", "--load", "2.5", "--cores", "8",
    ]);
    reference(&["beat", &url, "py-2", "--ttl", "60000", "--hold", "firmware"]);
    let rows = fleet_rows(&server, &[]);
    let got: Vec<(&str, &str, Option<&str>, Option<u64>)> = rows
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["state"].as_str().unwrap(),
                r["hold"].as_str(),
                r["ttl_ms"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("py-1", "UP", None, Some(60_000)),
            ("py-2", "HELD", Some("firmware"), Some(60_000))
        ]
    );
    assert_eq!(rows[0]["load"], 2.5);
    assert_eq!(rows[0]["cores"], 8);
    // An operator's request rides the bench's own next beat (the handshake, SPEC §2.4).
    fleet_ok(&server, &["hold", "py-1", "--reason", "drain"]);
    assert_eq!(fleet_rows(&server, &["py-1"])[0]["requested_hold"], "drain");
    reference(&[
        "agent",
        &url,
        "py-1",
        "--ttl",
        "60000",
        "--interval",
        "1",
        "--beats",
        "2",
    ]);
    let row = &fleet_rows(&server, &["py-1"])[0];
    assert_eq!(
        (row["state"].as_str(), row["hold"].as_str()),
        (Some("HELD"), Some("drain"))
    );
    assert_eq!(row["requested_hold"], Value::Null);
    // A TTL of 0: DOWN at once, and fleet says so.
    reference(&["beat", &url, "py-2", "--ttl", "0"]);
    assert_eq!(fleet_rows(&server, &["py-2"])[0]["state"], "DOWN");
}

#[tokio::test]
async fn what_fleet_writes_the_python_reader_reads_as_fleet_does() {
    let server = server();
    fleet_ok(
        &server,
        &[
            "beat", "b-up", "--ttl", "60s", "--load", "21", "--cores", "16",
        ],
    );
    fleet_ok(
        &server,
        &["beat", "b-held", "--ttl", "60s", "--hold", "kernel upgrade"],
    );
    fleet_ok(&server, &["beat", "b-gone", "--ttl", "0"]);
    fleet_ok(&server, &["register", "b-never"]);
    // A foreign value and a key of another type, as another writer may leave them: both readers
    // say DOWN, with an error.
    let _: () = raw(&server, &["SET", "{fleet}:bench:b-junk", "not a beat"]).await;
    let _: () = raw(&server, &["HSET", "{fleet}:bench:b-hash", "f", "v"]).await;
    // Values a careful writer would not leave, each read alike: load and cores out of range
    // dropped (the beat counts), strict JSON, a key written without its expiry.
    let now: Vec<String> = raw(&server, &["TIME"]).await;
    let ms: i64 = now[0].parse::<i64>().unwrap() * 1000;
    let foreign = [
        (
            "b-cores",
            format!(r#"{{"v":1,"at":{ms},"ttl":60000,"cores":0,"load":1e400}}"#),
        ),
        (
            "b-twice",
            format!(r#"{{"v":1,"at":{ms},"ttl":60000,"x":1,"x":1}}"#),
        ),
        (
            "b-lone",
            format!(r#"{{"v":1,"at":{ms},"ttl":60000,"x":"\udc00"}}"#),
        ),
        ("b-float", format!(r#"{{"v":1,"at":{ms},"ttl":6e4}}"#)),
        (
            "b-null",
            format!(r#"{{"v":1,"at":{ms},"ttl":60000,"hold":null,"cores":null}}"#),
        ),
        (
            "b-old",
            format!(r#"{{"v":1,"at":{},"ttl":1000}}"#, ms - 60_000),
        ),
        (
            "b-bidi",
            format!(r#"{{"v":1,"at":{ms},"ttl":60000,"hold":"a\u202eb"}}"#),
        ),
    ];
    for (name, value) in &foreign {
        let _: () = raw(&server, &["SET", &format!("{{fleet}}:bench:{name}"), value]).await;
        fleet_ok(&server, &["register", name]);
    }
    fleet_ok(&server, &["register", "b-junk", "b-hash"]);
    fleet_ok(&server, &["hold", "b-up", "--reason", "drain"]);
    let fleet: Vec<Value> = fleet_rows(&server, &[]).iter().map(decided).collect();
    let python: Vec<Value> = reference_rows(&server, &[]).iter().map(decided).collect();
    assert_eq!(python, fleet, "the whole fleet, read from the registry");
    assert_eq!(fleet.len(), 13, "{fleet:?}");
    let kinds: Vec<(&str, &str, Option<&str>)> = fleet
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["state"].as_str().unwrap(),
                r["error_kind"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("b-bidi", "DOWN", Some("unreadable")),
            ("b-cores", "UP", None),
            ("b-float", "DOWN", Some("unreadable")),
            ("b-gone", "DOWN", None),
            ("b-hash", "DOWN", Some("wrong_type")),
            ("b-held", "HELD", None),
            ("b-junk", "DOWN", Some("unreadable")),
            ("b-lone", "DOWN", Some("unreadable")),
            ("b-never", "DOWN", None),
            ("b-null", "UP", None),
            ("b-old", "DOWN", Some("outlived")),
            ("b-twice", "DOWN", Some("unreadable")),
            ("b-up", "UP", None),
        ]
    );
    assert_eq!(fleet[12]["requested_hold"], "drain");
    let named: Vec<Value> = reference_rows(&server, &["b-held", "b-up"])
        .iter()
        .map(decided)
        .collect();
    let fleet_named: Vec<Value> = fleet_rows(&server, &["b-held", "b-up"])
        .iter()
        .map(decided)
        .collect();
    assert_eq!(named, fleet_named, "named benches");
    assert_eq!(named[0]["state"], "HELD");
    assert_eq!(named[1]["state"], "UP");
}

/// The Python agent, started in the background.
fn reference_agent(args: &[&str]) -> tokio::process::Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/fleet_protocol.py");
    tokio::process::Command::new("python3")
        .arg(&script)
        .args(args)
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs (scripts/ensure-deps.sh installs it)")
}

/// The reference agent beating `name` twice, 1.5 s apart, each beat counting a minute: room for
/// the test to act between the two.
fn two_beats(url: &str, name: &str) -> tokio::process::Child {
    reference_agent(&[
        "agent",
        url,
        name,
        "--ttl",
        "60000",
        "--interval",
        "1500",
        "--beats",
        "2",
    ])
}

/// Waits until `check` holds, looking again every 10 ms, within `bounded`'s bound.
async fn until<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    bounded(what, async {
        while !check().await {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

// docs/protocol.md §5.4: a beat whose reply shows a hold request it did not carry is sent again
// at once, so an operator's hold shows within one interval, not two.
#[tokio::test]
async fn the_python_agent_carries_a_hold_asked_between_its_beats_at_once() {
    let server = server();
    let url = server.url();
    let mut agent = two_beats(&url, "py-1");
    let s = &server;
    until("the first beat", || async move {
        raw::<i64>(s, &["EXISTS", "{fleet}:bench:py-1"]).await == 1
    })
    .await;
    fleet_ok(&server, &["hold", "py-1", "--reason", "drain"]);
    let status = bounded("the agent's two beats", agent.wait())
        .await
        .unwrap();
    assert!(status.success());
    // The second beat carried what its process knew (no request), its reply showed the request,
    // and a beat sent at once carried it: HELD before a third interval.
    let row = &fleet_rows(&server, &["py-1"])[0];
    assert_eq!(
        (row["state"].as_str(), row["hold"].as_str()),
        (Some("HELD"), Some("drain"))
    );
    assert_eq!(row["requested_hold"], Value::Null);
}

// docs/protocol.md §5.4: a beat whose reply shows the key was not as its process wrote it (a
// foreign DEL) announces the change at once, which the beat had not foreseen.
#[tokio::test]
async fn the_python_agent_announces_at_once_a_key_deleted_behind_it() {
    let server = server();
    let url = server.url();
    let mut agent = two_beats(&url, "py-2");
    let s = &server;
    // The first beat announced itself (no key before it).
    until("the first beat's announcement", || async move {
        command_calls(s, "spublish").await == 1
    })
    .await;
    let _: i64 = raw(&server, &["DEL", "{fleet}:bench:py-2"]).await;
    let status = bounded("the agent's two beats", agent.wait())
        .await
        .unwrap();
    assert!(status.success());
    // The second beat foresaw a steady beat over its own key, published nothing with it, found
    // the key gone, and announced at once: one publish more.
    assert_eq!(command_calls(&server, "spublish").await, 2);
    assert_eq!(fleet_rows(&server, &["py-2"])[0]["state"], "UP");
}

// docs/protocol.md §4.1: the whole-fleet read lists the registry's bench names and the legacy join
// set's that one of their own keys proves (an empty heartbeat too), and reports the members that
// are no bench names: the registry's always, the join set's only when one of their keys exists.
#[tokio::test]
async fn both_readers_list_and_report_the_same_members() {
    let server = server();
    let registry = ["SADD", "{fleet}:benches", "good", "BAD", "x y"];
    let _: i64 = raw(&server, &registry).await;
    let joined = [
        "SADD",
        "{fleet}:joined",
        "good2",
        "ghost",
        "empty",
        "Stranger",
        "Lonely",
    ];
    let _: i64 = raw(&server, &joined).await;
    for (k, v) in [
        ("{fleet}:joined:good2", "0"),
        ("{fleet}:bench:empty", ""),
        ("{fleet}:bench:Stranger", "x"),
    ] {
        let _: () = raw(&server, &["SET", k, v]).await;
    }
    let o = run_fleet(&server, &["state", "-o", "json"]);
    assert!(o.status.success());
    let fleet: Value = serde_json::from_slice(&o.stdout).unwrap();
    let fleet_said = String::from_utf8_lossy(&o.stderr).into_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/fleet_protocol.py");
    let py = Command::new("python3")
        .arg(&script)
        .args(["read", &server.url()])
        .output()
        .unwrap();
    assert!(py.status.success());
    let python_said = String::from_utf8_lossy(&py.stderr).into_owned();
    let python: Vec<Value> = String::from_utf8_lossy(&py.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names = |rows: &[Value]| -> Vec<String> {
        rows.iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(fleet.as_array().unwrap()), ["empty", "good", "good2"]);
    assert_eq!(names(&python), ["empty", "good", "good2"]);
    for (member, reported) in [
        ("BAD", true),
        ("x y", true),
        ("Stranger", true),
        ("Lonely", false),
        ("ghost", false),
    ] {
        for (reader, said) in [("fleet", &fleet_said), ("python", &python_said)] {
            assert_eq!(
                said.contains(member),
                reported,
                "{reader} on {member:?}: {said}"
            );
        }
    }
}
