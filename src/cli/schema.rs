//! `fleet schema [VIEW]`: the JSON Schema (2020-12) of a view's `-o json` output, or the list of
//! views with the name of each one's schema. The schemas are `schemas/v1.json`, built in: one
//! document whose `$defs` hold every shape and whose `views` name each view's; a view's schema is
//! that document with the view's shape at its root, so it stands alone for any validator.

use std::io::Write;

use serde_json::{Map, Value};

use super::Error;
use super::output::{JSON_VERSION, schema_name};

/// Every output schema of version 1, as kept in the repository.
pub const SCHEMAS_V1: &str = include_str!("../../schemas/v1.json");

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The view (state, live, slots, claims, groups, describe, energy, autoscaler-groups,
    /// autoscaler-nodes, autoscaler-template); without it, the list of views.
    pub view: Option<String>,
}

impl Args {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let views = views()?;
        let Some(view) = self.view else {
            for (name, shape) in &views {
                let about = shape.get("description").and_then(Value::as_str);
                writeln!(
                    out,
                    "{name:<20} {:<28} {}",
                    schema_name(name),
                    about.unwrap_or("")
                )?;
            }
            return Ok(());
        };
        let schema = of(&view)?;
        super::output::json(out, &schema, false)?;
        Ok(())
    }
}

/// The built-in schemas document, read once per call, and its `views`.
fn document() -> Result<(Value, Map<String, Value>), Error> {
    let doc: Value = serde_json::from_str(SCHEMAS_V1)
        .map_err(|e| Error::Runtime(anyhow::anyhow!("the built-in schemas are not JSON: {e}")))?;
    let views = doc
        .get("views")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| Error::Runtime(anyhow::anyhow!("the built-in schemas have no views")))?;
    Ok((doc, views))
}

/// The views and their shapes, in the file's order.
fn views() -> Result<Vec<(String, Value)>, Error> {
    Ok(document()?.1.into_iter().collect())
}

/// The standalone schema of `view`'s output: its shape at the root, every definition beside it.
pub fn of(view: &str) -> Result<Value, Error> {
    let (doc, views) = document()?;
    let shape = views.get(view).and_then(Value::as_object).ok_or_else(|| {
        let known: Vec<&str> = views.keys().map(String::as_str).collect();
        Error::usage(format!(
            "no view {view:?}: the views with a JSON output are {}",
            known.join(", ")
        ))
    })?;
    let mut schema = Map::new();
    schema.insert("$schema".into(), doc["$schema"].clone());
    schema.insert(
        "$id".into(),
        Value::String(format!(
            "https://fleet.dev/schemas/v{JSON_VERSION}/{view}.json"
        )),
    );
    schema.insert("title".into(), Value::String(schema_name(view)));
    for (k, v) in shape {
        schema.insert(k.clone(), v.clone());
    }
    schema.insert("$defs".into(), doc["$defs"].clone());
    Ok(Value::Object(schema))
}
