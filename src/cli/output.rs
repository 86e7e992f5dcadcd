//! Rendering rows: a table for people, JSON and TSV for programs (SPEC §2.6).
//!
//! The TSV page is an output only: nothing in fleet reads it back (SPEC §2.8, held by
//! `tests/pure/hygiene.rs`).

use std::io::{self, Write};

use chrono::{DateTime, Utc};

use crate::domain::state::Row;

// How times read for people: shared with the live page, so they live in the read model.
pub use crate::views::time::{clock, human_ms, moment, relative, time};

/// What a verb writes (`-o`): one type for every verb, each verb offering the formats it can
/// write ([`Format::offered`]), so `--help` lists exactly those and another is refused by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table for people.
    Table,
    /// The table with more columns.
    Wide,
    /// JSON of the current version; `json=v1` asks for version 1 by name.
    Json,
    /// Tab-separated values, one row a line after a header, for `cut` and `awk`.
    Tsv,
    /// One name a line: what a shell loop reads.
    Names,
}

/// The formats of a view with a table and JSON.
pub const TABLE_JSON: &[Format] = &[Format::Table, Format::Json];
/// The formats of a view that also has a wide table.
pub const WIDE_JSON: &[Format] = &[Format::Table, Format::Wide, Format::Json];

impl Format {
    pub fn is_json(self) -> bool {
        self == Format::Json
    }

    fn value(self) -> clap::builder::PossibleValue {
        use clap::builder::PossibleValue;
        match self {
            Format::Table => PossibleValue::new("table").help("a table for people"),
            Format::Wide => PossibleValue::new("wide").help("the table with more columns"),
            Format::Json => PossibleValue::new("json")
                .alias("json=v1")
                .help("JSON of the current version; `json=v1` asks for version 1 by name"),
            Format::Tsv => PossibleValue::new("tsv").help("tab-separated values after a header"),
            Format::Names => PossibleValue::new("names").help("one name a line"),
        }
    }

    /// The `-o` parser of a verb that writes the formats `offered`.
    pub fn offered(offered: &'static [Format]) -> clap::builder::ValueParser {
        use clap::builder::TypedValueParser;
        let values: Vec<clap::builder::PossibleValue> = offered.iter().map(|f| f.value()).collect();
        clap::builder::PossibleValuesParser::new(values)
            .map(move |name: String| {
                *offered
                    .iter()
                    .find(|f| f.value().matches(&name, false))
                    .expect("clap took only an offered format")
            })
            .into()
    }
}

/// Writes `rows` in `format`. JSON is one array: pretty when standalone, one line per frame
/// under `--watch` (`compact`).
pub fn rows(out: &mut dyn Write, format: Format, rows: &[Row], compact: bool) -> io::Result<()> {
    match format {
        Format::Json => json_rows(out, "state", rows, compact),
        Format::Tsv => crate::views::rows::tsv(out, rows),
        Format::Table | Format::Wide | Format::Names => {
            state_table(out, rows, Utc::now(), &std::collections::HashMap::new())
        }
    }
}

/// The presence table of `fleet state`.
#[derive(tabled::Tabled)]
struct StateLine {
    #[tabled(rename = "NAME")]
    name: String,
    #[tabled(rename = "STATE")]
    state: String,
    #[tabled(rename = "HOLD")]
    hold: String,
    #[tabled(rename = "LOAD")]
    load: String,
    #[tabled(rename = "CORES")]
    cores: String,
    #[tabled(rename = "TTL")]
    ttl: String,
    #[tabled(rename = "EXPIRES IN")]
    expires_in: String,
    #[tabled(rename = "LAST SEEN")]
    last_seen: String,
    #[tabled(rename = "ERROR")]
    error: String,
}

/// The table of `fleet state`: a counted beat's age, or when a DOWN bench last beat (`seen`,
/// where the store still knows).
pub fn state_table(
    out: &mut dyn Write,
    rows: &[Row],
    now: DateTime<Utc>,
    seen: &std::collections::HashMap<String, DateTime<Utc>>,
) -> io::Result<()> {
    grid(
        out,
        rows.iter().map(|r| StateLine {
            last_seen: match (r.ttl_ms, r.expires_in_ms) {
                (Some(ttl), Some(left)) => human_ms(ttl.saturating_sub(left)) + " ago",
                _ => seen
                    .get(&r.name)
                    .map_or("-".to_owned(), |at| relative(*at, now)),
            },
            name: r.name.clone(),
            state: r.state.to_string(),
            hold: match (&r.hold, &r.requested_hold) {
                (Some(h), _) => h.clone(),
                (None, Some(asked)) => format!("(requested: {asked})"),
                (None, None) => "-".to_owned(),
            },
            load: r.load.map_or("-".to_owned(), |l| format!("{l:.2}")),
            cores: r.cores.map_or("-".to_owned(), |c| c.to_string()),
            ttl: r.ttl_ms.map_or("-".to_owned(), human_ms),
            expires_in: r.expires_in_ms.map_or("-".to_owned(), human_ms),
            error: r.error.clone().unwrap_or_default(),
        }),
    )
}

/// The version of every `-o json` output (README, "Output contracts"; `schemas/v1.json`). A field
/// may be added within it; removing, renaming or retyping one makes a new version, and the old
/// one stays served as `-o json=v1`.
pub const JSON_VERSION: u32 = 1;

/// A value of a view's output with the name of its schema first: `"schema": "fleet/state/v1"`.
/// Every row of an array view carries it, as every object of a Kubernetes list carries its
/// `apiVersion`, so a row read alone still says what it is.
#[derive(serde::Serialize)]
struct Versioned<'a, T: serde::Serialize + ?Sized> {
    schema: &'a str,
    #[serde(flatten)]
    value: &'a T,
}

/// The schema name of `view`'s output: `fleet/<view>/v<JSON_VERSION>`.
pub fn schema_name(view: &str) -> String {
    format!("fleet/{view}/v{JSON_VERSION}")
}

/// Writes a view's rows as one JSON array, each row carrying its schema's name.
pub fn json_rows<T: serde::Serialize>(
    out: &mut dyn Write,
    view: &str,
    rows: &[T],
    compact: bool,
) -> io::Result<()> {
    let schema = schema_name(view);
    let rows: Vec<Versioned<'_, T>> = rows
        .iter()
        .map(|value| Versioned {
            schema: &schema,
            value,
        })
        .collect();
    json(out, &rows, compact)
}

/// Writes a view's one document as JSON, carrying its schema's name.
pub fn json_doc<T: serde::Serialize>(
    out: &mut dyn Write,
    view: &str,
    value: &T,
    compact: bool,
) -> io::Result<()> {
    let schema = schema_name(view);
    json(
        out,
        &Versioned {
            schema: &schema,
            value,
        },
        compact,
    )
}

/// Writes `value` as JSON and a newline: the `-o json` of every view, pretty, or on one line
/// (`compact`, under `--watch`: one document a line).
pub fn json<T: serde::Serialize + ?Sized>(
    out: &mut dyn Write,
    value: &T,
    compact: bool,
) -> io::Result<()> {
    if compact {
        serde_json::to_writer(&mut *out, value)?;
    } else {
        serde_json::to_writer_pretty(&mut *out, value)?;
    }
    writeln!(out)
}

/// Writes rows for people (SPEC §4.7): a header line and one line per row, columns aligned and
/// two spaces apart, no borders, nothing trailing (rendered by `tabled` from the row type).
pub fn grid<T: tabled::Tabled>(
    out: &mut dyn Write,
    rows: impl IntoIterator<Item = T>,
) -> io::Result<()> {
    use tabled::settings::{Padding, Style};
    let mut table = tabled::Table::new(rows);
    table.with(Style::empty()).with(Padding::new(0, 2, 0, 0));
    for line in table.to_string().lines() {
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::state::State;

    fn row() -> Row {
        Row {
            name: "bench-01".into(),
            state: State::Held,
            hold: Some("kernel upgrade".into()),
            requested_hold: None,
            load: Some(21.0),
            cores: Some(16),
            ttl_ms: Some(30_000),
            expires_in_ms: Some(12_345),
            error: None,
            error_kind: None,
        }
    }

    #[test]
    fn tsv_has_a_header_and_empty_cells_for_null() {
        let mut out = Vec::new();
        crate::views::rows::tsv(&mut out, &[row()]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "name\tstate\thold\trequested_hold\tload\tcores\tttl_ms\texpires_in_ms\terror\terror_kind\n\
             bench-01\tHELD\tkernel upgrade\t\t21\t16\t30000\t12345\t\t\n"
        );
        let mut out = Vec::new();
        let outlived = Row {
            state: State::Down,
            hold: None,
            ttl_ms: None,
            expires_in_ms: None,
            error: Some("heartbeat key outlived its TTL".into()),
            error_kind: Some(crate::domain::state::ErrorKind::Outlived),
            ..row()
        };
        crate::views::rows::tsv(&mut out, &[outlived]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.ends_with("\theartbeat key outlived its TTL\toutlived\n"),
            "{text}"
        );
    }

    #[test]
    fn json_has_exactly_the_pinned_fields() {
        let mut out = Vec::new();
        rows(&mut out, Format::Json, &[row()], true).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let obj = value[0].as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort();
        // The TSV's columns and the schema's name (schemas/v1.json), nothing else.
        let mut want = crate::views::rows::columns::<Row>().to_vec();
        want.push("schema");
        want.sort();
        assert_eq!(keys, want);
        assert_eq!(obj["schema"], "fleet/state/v1");
        assert_eq!(obj["state"], "HELD");
        assert_eq!(obj["requested_hold"], serde_json::Value::Null);
    }

    #[test]
    fn table_aligns_columns_and_shows_requests() {
        let mut r = row();
        r.hold = None;
        r.state = State::Up;
        r.requested_hold = Some("drain".into());
        let mut out = Vec::new();
        state_table(&mut out, &[r], Utc::now(), &Default::default()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME      STATE  HOLD"), "{text}");
        assert!(lines[1].contains("(requested: drain)"), "{text}");
        assert!(lines[1].contains("  12s"), "{text}");
        assert_eq!(human_ms(30_000), "30s");
        assert_eq!(human_ms(4_689), "4.7s");
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(3_599_000), "59m59s");
    }
}
