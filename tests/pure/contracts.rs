//! The output contracts hold across releases (README, "Output contracts"): version 1 of every
//! `-o json` output, as released (`released/schemas-v1.json`, a frozen copy), is still served by
//! `schemas/v1.json`. Within a version a field may be added and an enum may gain a value; a
//! field removed, renamed or retyped, or a constraint loosened, fails here and needs a new
//! version instead (a `schemas/v2.json` served as `-o json`, with v1 kept as `-o json=v1`).

use serde_json::{Value, json};

const RELEASED_V1: &str = include_str!("released/schemas-v1.json");

/// What `current` breaks of `released`: each problem names its place.
fn breaks(released: &Value, current: &Value, at: &str, problems: &mut Vec<String>) {
    match (released, current) {
        (Value::Object(old), Value::Object(new)) => {
            for (key, was) in old {
                let here = format!("{at}/{key}");
                if key == "description" || key == "title" {
                    continue;
                }
                let Some(now) = new.get(key) else {
                    problems.push(format!("{here} is gone"));
                    continue;
                };
                match key.as_str() {
                    // A value an output may take is still one it may take: an enum only grows.
                    "enum" => {
                        let (was, now) = (was.as_array(), now.as_array());
                        for v in was.into_iter().flatten() {
                            if !now.is_some_and(|now| now.contains(v)) {
                                problems.push(format!("{here} lost {v}"));
                            }
                        }
                    }
                    // A field that was always there still is.
                    "required" => {
                        let now = now.as_array();
                        for v in was.as_array().into_iter().flatten() {
                            if !now.is_some_and(|now| now.contains(v)) {
                                problems.push(format!("{here}: {v} is no longer required"));
                            }
                        }
                    }
                    // Fields, definitions and views may be added; each one there stays as it was.
                    "properties" | "$defs" | "views" => {
                        let now = now.as_object();
                        for (name, shape) in was.as_object().into_iter().flatten() {
                            match now.and_then(|now| now.get(name)) {
                                None => problems.push(format!("{here}/{name} is gone")),
                                Some(s) => breaks(shape, s, &format!("{here}/{name}"), problems),
                            }
                        }
                    }
                    _ => breaks(was, now, &here, problems),
                }
            }
        }
        (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
            for (i, (o, n)) in old.iter().zip(new).enumerate() {
                breaks(o, n, &format!("{at}/{i}"), problems);
            }
        }
        (old, new) if old == new => {}
        (old, new) => problems.push(format!("{at} changed from {old} to {new}")),
    }
}

fn problems(released: &Value, current: &Value) -> Vec<String> {
    let mut found = Vec::new();
    breaks(released, current, "", &mut found);
    found
}

#[test]
fn version_1_of_every_output_is_served_as_it_was_released() {
    let released: Value = serde_json::from_str(RELEASED_V1).unwrap();
    let current: Value = serde_json::from_str(fleet::cli::schema::SCHEMAS_V1).unwrap();
    assert_eq!(
        problems(&released, &current),
        Vec::<String>::new(),
        "schemas/v1.json breaks version 1 as released: serve the change as a new version"
    );
}

#[test]
fn every_view_with_a_json_output_has_a_schema_that_is_one() {
    let current: Value = serde_json::from_str(fleet::cli::schema::SCHEMAS_V1).unwrap();
    let views: Vec<&String> = current["views"].as_object().unwrap().keys().collect();
    for view in views {
        let schema = fleet::cli::schema::of(view).unwrap();
        assert!(jsonschema::meta::is_valid(&schema), "{view}'s schema");
        assert!(
            jsonschema::draft202012::new(&schema).is_ok(),
            "{view}'s schema builds"
        );
    }
}

#[test]
fn the_check_finds_a_field_removed_or_retyped_and_lets_one_be_added() {
    let released: Value = serde_json::from_str(RELEASED_V1).unwrap();
    let change = |f: &dyn Fn(&mut Value)| {
        let mut current = released.clone();
        f(&mut current);
        problems(&released, &current)
    };
    let bench = "/$defs/bench/properties";
    // Removed.
    let removed = change(&|s| {
        s.pointer_mut(bench)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("load");
    });
    assert_eq!(removed, [format!("{bench}/load is gone")]);
    // Retyped.
    let retyped = change(&|s| {
        *s.pointer_mut(&format!("{bench}/cores")).unwrap() = json!({"type": "string"});
    });
    assert!(!retyped.is_empty(), "cores retyped: {retyped:?}");
    // No longer required.
    let optional = change(&|s| {
        let required = s.pointer_mut("/$defs/bench/required").unwrap();
        required.as_array_mut().unwrap().retain(|f| f != "error");
    });
    assert_eq!(
        optional,
        ["/$defs/bench/required: \"error\" is no longer required"]
    );
    // An enum's value lost.
    let narrowed = change(&|s| {
        *s.pointer_mut("/$defs/state/enum").unwrap() = json!(["UP", "DOWN"]);
    });
    assert_eq!(narrowed, ["/$defs/state/enum lost \"HELD\""]);
    // Added: a field, a value of an enum, a view. None breaks version 1.
    let added = change(&|s| {
        s.pointer_mut(bench)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("rack".into(), json!({"type": ["string", "null"]}));
        *s.pointer_mut("/$defs/phase/enum").unwrap() = json!([
            "pending",
            "booting",
            "ready",
            "failed",
            "completed",
            "parked"
        ]);
        s["views"]
            .as_object_mut()
            .unwrap()
            .insert("racks".into(), json!({"type": "array"}));
    });
    assert_eq!(added, Vec::<String>::new());
}
