//! The output contracts (README, "Output contracts"; `schemas/v1.json`): every `-o json` output a
//! test reads is validated against its view's schema, as `fleet schema VIEW` prints it, by a
//! real JSON Schema validator (2020-12, formats checked). The runners of `tests/support` call
//! [`check`] on what they ran, so a test that reads JSON cannot skip it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

/// Whether `args` ask for JSON output (`-o json`, `--output json`, `-o json=v1`, ...).
pub fn asks_json(args: &[&str]) -> bool {
    args.windows(2)
        .any(|w| matches!(w[0], "-o" | "--output") && w[1].starts_with("json"))
        || args
            .iter()
            .any(|a| a.starts_with("-ojson") || a.starts_with("--output=json"))
}

/// Validates `stdout` of a fleet run with `args`, when they asked for JSON and it printed some:
/// every document (one, or one a line under `--watch`) against the schema its rows name.
pub fn check(args: &[&str], stdout: &str) {
    if !asks_json(args) || stdout.trim().is_empty() {
        return;
    }
    for doc in serde_json::Deserializer::from_str(stdout).into_iter::<Value>() {
        let Ok(doc) = doc else {
            // A stream cut short (a watch stopped mid-line) is the test's to judge.
            return;
        };
        validate(&doc);
    }
}

/// Validates one JSON document of a view against the schema it names.
pub fn validate(doc: &Value) {
    let named = match doc {
        Value::Array(rows) => match rows.first() {
            None => return,
            Some(row) => row.get("schema"),
        },
        other => other.get("schema"),
    };
    let name = named
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("a JSON output without its schema's name: {doc}"));
    let view = name
        .strip_prefix("fleet/")
        .and_then(|v| v.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("schema {name:?} is not fleet/VIEW/v1"));
    let validator = validator(view);
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "the output breaks its schema {name}:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(doc).unwrap_or_default()
    );
}

/// The validator of `view`'s schema, built once per test process.
fn validator(view: &str) -> Arc<jsonschema::Validator> {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    built
        .entry(view.to_owned())
        .or_insert_with(|| {
            let schema = fleet::cli::schema::of(view)
                .unwrap_or_else(|e| panic!("no schema for view {view}: {e}"));
            Arc::new(
                jsonschema::draft202012::options()
                    .should_validate_formats(true)
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("the schema of {view} is not a schema: {e}")),
            )
        })
        .clone()
}
