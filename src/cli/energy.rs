//! `fleet energy [--since 30d] [GROUP] [-o table|json]`: what each slot's machine drew and what
//! powering it off saved against an always-on baseline, from the energy ledgers (SPEC §4.12).
//!
//! The window is whole UTC days, from the day `--since` ago through today, by the Redis server's
//! clock. The figures are the stored buckets, so they stand as of each ledger's mark (at most a
//! minute behind while a controller leads); nothing here extrapolates. A slot without a draw
//! (`template.power` or its own `power`) shows its hours and activations only.

use std::io::Write;
use std::time::Duration;

use crate::domain::name::GroupName;
use crate::store::catalog::Catalog;
use crate::views::energy::{Report, read_report};

use super::output::grid;
use super::output::{Format, TABLE_JSON};
use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this group.
    pub group: Option<GroupName>,
    /// How far back: whole UTC days from the day this long ago through today (like 30d, 12h;
    /// the ledger keeps 400 days).
    #[arg(long, default_value = "30d", value_parser = super::args::since)]
    pub since: Duration,
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = Format::offered(TABLE_JSON))]
    pub format: Format,
}

#[derive(tabled::Tabled)]
struct Line {
    #[tabled(rename = "GROUP")]
    group: String,
    #[tabled(rename = "SLOT")]
    slot: String,
    #[tabled(rename = "HOURS ON")]
    hours_on: String,
    #[tabled(rename = "HOURS OFF")]
    hours_off: String,
    #[tabled(rename = "KWH")]
    kwh: String,
    #[tabled(rename = "KWH SAVED")]
    kwh_saved: String,
    #[tabled(rename = "COST SAVED")]
    cost_saved: String,
    #[tabled(rename = "ACTIVATIONS")]
    activations: u64,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let mut conn = ctx.endpoint.open().await?;
        let catalog = Catalog::read(&mut conn, &ctx.keys)
            .await
            .map_err(|e| Error::Runtime(e.into()))?;
        if let Some(g) = &self.group
            && catalog.group(g).is_none()
        {
            return Err(Error::usage(format!(
                "no group {g}: list them with `fleet groups`"
            )));
        }
        let groups: Vec<_> = catalog
            .groups
            .iter()
            .filter(|g| self.group.as_ref().is_none_or(|want| &g.name == want))
            .collect();
        let report = read_report(conn, &ctx.keys, &groups, self.since).await?;
        if self.format.is_json() {
            return Ok(super::output::json_doc(out, "energy", &report, false)?);
        }
        for p in &report.problems {
            writeln!(out, "warning: {p}").map_err(|e| Error::Runtime(e.into()))?;
        }
        writeln!(
            out,
            "From {} through {} (UTC days), as of each ledger's last step:",
            report.since, report.until
        )
        .map_err(|e| Error::Runtime(e.into()))?;
        grid(out, lines(&report))?;
        Ok(())
    }
}

/// The table: each group's slots, then its total as slot `(total)` (no slot name has
/// parentheses).
fn lines(report: &Report) -> Vec<Line> {
    let num = |v: Option<f64>, places: usize| {
        v.map_or_else(|| "-".to_owned(), |v| format!("{v:.places$}"))
    };
    let mut out = Vec::new();
    for g in &report.groups {
        for s in &g.slots {
            out.push(Line {
                group: g.group.to_string(),
                slot: s.slot.to_string(),
                hours_on: num(Some(s.hours_on), 2),
                hours_off: num(Some(s.hours_off), 2),
                kwh: num(s.kwh, 3),
                kwh_saved: num(s.kwh_saved, 3),
                cost_saved: num(s.cost_saved, 2),
                activations: s.activations,
            });
        }
        let t = &g.total;
        out.push(Line {
            group: g.group.to_string(),
            slot: "(total)".to_owned(),
            hours_on: num(Some(t.hours_on), 2),
            hours_off: num(Some(t.hours_off), 2),
            kwh: num(t.kwh, 3),
            kwh_saved: num(t.kwh_saved, 3),
            cost_saved: num(t.cost_saved, 2),
            activations: t.activations,
        });
    }
    out
}
