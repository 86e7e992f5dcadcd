//! The presence protocol followed without fleet's code (docs/protocol.md): the reference reader
//! and agent in Python (examples/python/fleet_protocol.py, standard library only) against a real
//! redis-server, both ways: what it writes fleet reads, what fleet writes it reads, and the test
//! vectors read as the protocol says.

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

/// The fields both readers decide alike; `expires_in_ms` moves with the instant each one read.
fn decided(row: &Value) -> Value {
    let error = row["error"].as_str().map(|e| !e.is_empty());
    serde_json::json!({
        "name": row["name"], "state": row["state"], "hold": row["hold"], "ttl_ms": row["ttl_ms"],
        "load": row["load"], "cores": row["cores"], "error": error,
    })
}

#[test]
fn the_test_vectors_read_as_the_protocol_says_in_python_too() {
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol-vectors.json");
    let said = reference(&["vectors", vectors.to_str().unwrap()]);
    assert!(said.contains("26 of 26 vectors"), "{said}");
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
    fleet_ok(&server, &["register", "b-junk", "b-hash"]);
    let fleet: Vec<Value> = fleet_rows(&server, &[]).iter().map(decided).collect();
    let python: Vec<Value> = reference_rows(&server, &[]).iter().map(decided).collect();
    assert_eq!(python, fleet, "the whole fleet, read from the registry");
    assert_eq!(fleet.len(), 6, "{fleet:?}");
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
