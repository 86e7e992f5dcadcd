//! The presence protocol's test vectors (docs/protocol.md, `docs/protocol-vectors.json`) run
//! through fleet's own rules: each key's reading (`domain::heartbeat::read`) decided at the
//! vector's server time (`state::decide`, through the row `fleet state -o json` prints), and the
//! groups of the other rules: TIME's rounding, bench names, hold requests, the beat's
//! announcement and its beat again at once (`domain::beat`). The reference reader and agent in
//! Python (examples/python/fleet_protocol.py) runs the same file; both agreeing with it is what
//! "the protocol" means.

use chrono::DateTime;
use fleet::domain::beat::{again, carried, changes};
use fleet::domain::heartbeat::{Found, Read, decode_request, read};
use fleet::domain::name::BenchName;
use fleet::domain::state::Bench;
use fleet::store::presence::MAX_VALUE;
use fleet::store::script::server_time;
use serde_json::Value;

const VECTORS: &str = include_str!("../../docs/protocol-vectors.json");

fn doc() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn group<'a>(doc: &'a Value, name: &str) -> &'a Vec<Value> {
    doc[name]
        .as_array()
        .unwrap_or_else(|| panic!("the vectors have a group {name}"))
}

fn text(v: &Value) -> Option<&str> {
    v.as_str()
}

/// The server's time of a vector, in ms, as a reader takes it from `TIME` (its two replies).
fn time_of(time: &Value) -> DateTime<chrono::Utc> {
    let t = time.as_array().unwrap();
    server_time(t[0].as_str().unwrap(), t[1].as_str().unwrap()).unwrap()
}

/// The row of one key vector, as `fleet state -o json` prints it.
fn row_of(v: &Value) -> Value {
    let bytes: Option<Vec<u8>> = match (v.get("value_hex"), text(&v["value"])) {
        (Some(hex), _) => Some(hex_bytes(hex.as_str().unwrap())),
        (None, Some(s)) => Some(s.as_bytes().to_vec()),
        (None, None) => None,
    };
    // What `GETRANGE key 0 2048` returns of the value: its first 2049 bytes at most.
    let bounded = bytes.as_deref().map(|b| &b[..b.len().min(MAX_VALUE + 1)]);
    let found = match v["type"].as_str().unwrap() {
        "none" => Found::Missing,
        "string" => Found::Bytes(bounded.unwrap()),
        _ => Found::OtherType(None),
    };
    let Read {
        reading,
        load,
        cores,
    } = read(found);
    // TIME's replies when the vector gives them, with their microseconds: the decision drops
    // them itself.
    let now = match v.get("time") {
        Some(time) => {
            let now = time_of(time);
            assert_eq!(
                now.timestamp_millis(),
                v["now_ms"].as_i64().unwrap(),
                "{}: now_ms is TIME's value in ms",
                v["name"]
            );
            now
        }
        None => DateTime::from_timestamp_millis(v["now_ms"].as_i64().unwrap()).unwrap(),
    };
    let bench = Bench {
        name: BenchName::parse("bench-01").unwrap(),
        load,
        cores,
        reading,
        requested_hold: v
            .get("request")
            .and_then(Value::as_str)
            .and_then(|r| decode_request(r.as_bytes())),
    };
    serde_json::to_value(bench.row(now)).unwrap()
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn every_key_vector_reads_as_the_protocol_says() {
    let doc = doc();
    let vectors = group(&doc, "vectors");
    assert!(
        vectors.len() >= 140,
        "the vectors cover §3's rows and every rule of the value"
    );
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let row = row_of(v);
        for (field, want) in [
            ("state", "state"),
            ("hold", "hold"),
            ("ttl_ms", "ttl_ms"),
            ("expires_in_ms", "expires_in_ms"),
            ("error_kind", "error"),
        ] {
            assert_eq!(row[field], v[want], "{name}: {field} ({row})");
        }
        // The prose is fleet's; a row has one exactly when it has a kind.
        assert_eq!(
            row["error"].is_string(),
            row["error_kind"].is_string(),
            "{name}"
        );
        for field in ["load", "cores", "requested_hold"] {
            if let Some(want) = v.get(field) {
                let got = &row[field];
                match (got.as_f64(), want.as_f64()) {
                    (Some(g), Some(w)) => assert_eq!(g, w, "{name}: {field}"),
                    _ => assert_eq!(got, want, "{name}: {field}"),
                }
            }
        }
    }
}

#[test]
fn every_time_vector_rounds_as_the_protocol_says() {
    let doc = doc();
    for v in group(&doc, "time") {
        assert_eq!(
            time_of(&v["time"]).timestamp_millis(),
            v["now_ms"].as_i64().unwrap(),
            "{}",
            v["name"]
        );
    }
}

#[test]
fn every_name_vector_is_a_bench_name_exactly_when_the_protocol_says() {
    let doc = doc();
    for v in group(&doc, "names") {
        let member = v["member"].as_str().unwrap();
        assert_eq!(
            BenchName::parse(member).is_ok(),
            v["bench"].as_bool().unwrap(),
            "{member:?}"
        );
    }
}

#[test]
fn every_request_vector_is_carried_as_the_protocol_says() {
    let doc = doc();
    for v in group(&doc, "requests") {
        let name = v["name"].as_str().unwrap();
        let request = decode_request(v["value"].as_str().unwrap().as_bytes());
        assert_eq!(request.is_some(), v["valid"].as_bool().unwrap(), "{name}");
        let hold = carried(None, request.as_ref(), v["at_ms"].as_i64().unwrap());
        assert_eq!(
            hold.as_ref().map(|h| h.as_str()),
            v["carried"].as_str(),
            "{name}"
        );
    }
}

#[test]
fn every_announce_vector_announces_as_the_protocol_says() {
    let doc = doc();
    for v in group(&doc, "announce") {
        let name = v["name"].as_str().unwrap();
        let before = v["before"].as_str().map(str::as_bytes);
        let after = v["after"]
            .as_object()
            .map(|a| (a["hold"].as_str(), a["deadline_ms"].as_i64().unwrap()));
        assert_eq!(
            changes(before, after, v["now_ms"].as_i64().unwrap()),
            v["announce"].as_bool().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn every_again_vector_beats_again_as_the_protocol_says() {
    let doc = doc();
    for v in group(&doc, "again") {
        let name = v["name"].as_str().unwrap();
        let own = v["own"]
            .as_str()
            .map(|h| fleet::domain::name::Reason::parse(h).unwrap());
        let request = v["request"]
            .as_str()
            .and_then(|r| decode_request(r.as_bytes()));
        let reply = v["reply_ms"].as_i64().unwrap();
        let due = carried(own.as_ref(), request.as_ref(), reply);
        assert_eq!(
            again(
                v["at_ms"].as_i64().unwrap(),
                reply,
                v["carried"].as_str(),
                due.as_ref().map(|h| h.as_str())
            ),
            v["again"].as_bool().unwrap(),
            "{name}"
        );
    }
}

// The file says what changed in each of its versions, and names no vector twice.
#[test]
fn the_vectors_file_names_its_version_and_each_vector_once() {
    let doc = doc();
    let version = doc["version"].as_u64().unwrap();
    assert_eq!(version, 2);
    assert!(doc["changes"][version.to_string()].is_string());
    let names: Vec<&str> = group(&doc, "vectors")
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
}
