//! The presence protocol's test vectors (docs/protocol.md, `docs/protocol-vectors.json`) run
//! through fleet's own decision: the bounded read's reading of one key, then `state::decide` at
//! the vector's server time. A reader in another language runs the same file
//! (examples/python/fleet_protocol.py); both agreeing with it is what "the protocol" means.

use chrono::DateTime;
use fleet::domain::heartbeat::{Found, Read, read};
use fleet::domain::state::{Defect, decide};
use serde_json::Value;

const VECTORS: &str = include_str!("../../docs/protocol-vectors.json");

/// The error's kind as the vectors name it: implementations agree on the kind, not the words.
fn kind(defect: Option<&Defect>) -> Option<&'static str> {
    defect.map(|d| d.kind().as_str())
}

#[test]
fn every_test_vector_reads_as_the_protocol_says() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(
        vectors.len() >= 20,
        "the vectors cover §2.2's rows and the value's rules"
    );
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let bytes = v["value"].as_str().map(str::as_bytes);
        // What `GETRANGE key 0 2048` returns of the value: its first 2049 bytes at most.
        let bounded = bytes.map(|b| &b[..b.len().min(fleet::store::presence::MAX_VALUE + 1)]);
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
        let now = DateTime::from_timestamp_millis(v["now_ms"].as_i64().unwrap()).unwrap();
        let verdict = decide(&reading, now);
        let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis() as u64);
        assert_eq!(verdict.state.as_str(), v["state"], "{name}: state");
        assert_eq!(
            verdict.hold.as_ref().map(|h| h.as_str()),
            v["hold"].as_str(),
            "{name}: hold"
        );
        assert_eq!(ms(verdict.ttl), v["ttl_ms"].as_u64(), "{name}: ttl");
        assert_eq!(
            ms(verdict.expires_in),
            v["expires_in_ms"].as_u64(),
            "{name}: expires_in"
        );
        assert_eq!(
            kind(verdict.defect.as_ref()),
            v["error"].as_str(),
            "{name}: error ({:?})",
            verdict.defect
        );
        if let Some(want) = v.get("load") {
            assert_eq!(load, want.as_f64(), "{name}: load");
        }
        if let Some(want) = v.get("cores") {
            assert_eq!(cores.map(u64::from), want.as_u64(), "{name}: cores");
        }
    }
}
