//! Writing a view's rows for programs: as tab-separated values whose columns are the row's own
//! fields, named and ordered as its JSON names them, so the TSV and the JSON of a view can never
//! disagree on a column (SPEC §2.6). Every `-o json` row is a type of the read model: this
//! folder's (`SlotRow`, `ClaimRow`, `GroupRow`, the describe and energy rows, `LiveRow`, the
//! provider's rows), and the presence row `domain::state::Row`, which is the decision's own output.

use std::io::{self, Write};

use serde::Serialize;
use serde::de::{self, Deserialize, Visitor};

use crate::domain::name::BenchName;
use crate::domain::state::State;

use crate::store::claims::Entry;

use super::{ClaimRow, SlotRow, rfc3339};

/// The fields of the row type `T` in order, as serde names them: read from its `Deserialize`
/// (which names every field it takes), without a row at hand, so a view of no rows still has its
/// header.
pub fn columns<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut named = Fields(None);
    let _ = T::deserialize(&mut named);
    named.0.unwrap_or(&[])
}

/// A deserializer that answers nothing but records the fields a struct asks for.
struct Fields(Option<&'static [&'static str]>);

/// How the introspection stops once it has the names: an error no row ever sees.
#[derive(Debug)]
struct Named;

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the fields are named")
    }
}

impl std::error::Error for Named {}

impl de::Error for Named {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Named
    }
}

impl<'de> de::Deserializer<'de> for &mut Fields {
    type Error = Named;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Named> {
        self.0 = Some(fields);
        Err(Named)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Named> {
        Err(Named)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// Writes `rows` as TSV: a header of the row type's columns, then a line a row. A cell is the
/// value as its JSON gives it, a string unquoted, null empty, tabs and line breaks folded into
/// spaces so a cell never splits a row.
pub fn tsv<T>(out: &mut dyn Write, rows: &[T]) -> io::Result<()>
where
    T: Serialize + for<'de> Deserialize<'de>,
{
    let columns = columns::<T>();
    writeln!(out, "{}", columns.join("\t"))?;
    for row in rows {
        let value = serde_json::to_value(row).map_err(io::Error::other)?;
        let cells: Vec<String> = columns.iter().map(|c| cell(value.get(c))).collect();
        writeln!(out, "{}", cells.join("\t"))?;
    }
    Ok(())
}

/// A JSON value as a TSV cell. A number is written as Rust writes it (`21`, not `21.0`).
fn cell(value: Option<&serde_json::Value>) -> String {
    use serde_json::Value;
    let text = match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (None, Some(i), _) => i.to_string(),
            (None, None, Some(f)) => f.to_string(),
            (None, None, None) => n.to_string(),
        },
        Some(other) => other.to_string(),
    };
    text.replace(['\t', '\n', '\r'], " ")
}

/// `fleet live -o json`'s row: a present bench.
#[derive(Debug, Serialize)]
pub struct LiveRow<'a> {
    pub name: &'a BenchName,
    pub state: State,
    pub hold: Option<String>,
}

/// `fleet describe -o json`: a slot in full.
#[derive(Serialize)]
pub struct Description {
    pub slot: SlotRow,
    pub recent_transitions: Vec<TransitionRow>,
    /// The ledger of boots in the last 24 hours.
    pub activations: Vec<String>,
    pub claim: Option<ClaimRow>,
    /// How the claim's deadline was set.
    pub deadline: Option<String>,
    pub timeline: Vec<EntryRow>,
}

/// A history row as the views show it: times in RFC 3339 with milliseconds.
#[derive(Serialize)]
pub struct TransitionRow {
    pub at: String,
    pub from: Option<crate::domain::law::Report>,
    pub to: crate::domain::law::Report,
}

/// A timeline entry as the views show it: its fields, times in RFC 3339 with milliseconds.
#[derive(Serialize)]
pub struct EntryRow {
    pub at: String,
    pub event: crate::store::claims::Event,
    pub phase: crate::domain::claim::Phase,
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::domain::claim::Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<crate::domain::claim::OperationKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl From<&Entry> for EntryRow {
    fn from(e: &Entry) -> Self {
        EntryRow {
            at: rfc3339(e.at),
            event: e.event,
            phase: e.phase,
            attempt: e.attempt,
            reason: e.reason,
            operation: e.operation,
            deadline_at: e.deadline_at.map(rfc3339),
            duration_ms: e.duration_ms,
            detail: e.detail.clone(),
        }
    }
}

/// A group as cluster-autoscaler's NodeGroups and NodeGroupTargetSize give it (`fleet
/// autoscaler groups`).
#[derive(Clone, Debug, Serialize)]
pub struct AutoscalerGroupRow {
    pub id: String,
    pub min_size: i32,
    pub max_size: i32,
    pub target_size: i32,
}

/// An instance as cluster-autoscaler reads it: an error counts only with a code.
#[derive(Clone, Debug, Serialize)]
pub struct AutoscalerInstanceRow {
    pub id: String,
    pub state: &'static str,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub error_class: Option<&'static str>,
}

/// The template Node, decoded.
#[derive(Clone, Debug, Serialize)]
pub struct AutoscalerTemplateRow {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub taints: Vec<String>,
    pub capacity: std::collections::BTreeMap<String, String>,
    pub conditions: Vec<String>,
    /// Whether legacy field 1 carries the same bytes as field 2.
    pub legacy_field_matches: bool,
    /// The DRA devices of `resourceSliceBytes`, one `driver/device` each.
    pub devices: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize)]
    struct Sample {
        name: String,
        #[serde(rename = "load_avg")]
        load: Option<f64>,
        count: u32,
    }

    #[test]
    fn the_columns_are_the_rows_fields_as_its_json_names_them() {
        assert_eq!(columns::<Sample>(), ["name", "load_avg", "count"]);
        let mut out = Vec::new();
        let rows = [
            Sample {
                name: "a\tb".into(),
                load: Some(21.0),
                count: 3,
            },
            Sample {
                name: "c".into(),
                load: None,
                count: 0,
            },
        ];
        tsv(&mut out, &rows).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "name\tload_avg\tcount\na b\t21\t3\nc\t\t0\n"
        );
        let mut out = Vec::new();
        tsv::<Sample>(&mut out, &[]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "name\tload_avg\tcount\n");
    }
}
