//! `fleet energy [--since 30d] [GROUP] [-o table|json]`: what each slot's machine drew and what
//! powering it off saved against an always-on baseline, from the energy ledgers (SPEC §4.12).
//!
//! The window is whole UTC days, from the day `--since` ago through today, by the Redis server's
//! clock. The figures are the stored buckets, so they stand as of each ledger's mark (at most a
//! minute behind while a controller leads); nothing here extrapolates. A slot without a draw
//! (`template.power` or its own `power`) shows its hours and activations only.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::domain::energy::{self, Figures};
use crate::domain::name::{BenchName, GroupName};
use crate::store::catalog::{Catalog, CatalogGroup};
use crate::store::energy::{EnergyStore, Stored};

use super::output::grid;
use super::{Ctx, Error, ViewFormat};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this group.
    pub group: Option<GroupName>,
    /// How far back: whole UTC days from the day this long ago through today (like 30d, 12h;
    /// the ledger keeps 400 days).
    #[arg(long, default_value = "30d", value_parser = super::args::since)]
    pub since: Duration,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ViewFormat::Table)]
    pub format: ViewFormat,
}

/// One slot's figures; the energy ones are `None` without a draw.
#[derive(Debug, Serialize)]
struct SlotEnergy {
    group: GroupName,
    slot: BenchName,
    hours_on: f64,
    hours_off: f64,
    kwh: Option<f64>,
    kwh_saved: Option<f64>,
    cost_saved: Option<f64>,
    activations: u64,
    /// The instant the ledger stands at (its mark), if it has one.
    as_of: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Serialize)]
pub(super) struct GroupEnergy {
    pub(super) group: GroupName,
    slots: Vec<SlotEnergy>,
    /// The sum of the slots; the energy figures sum the slots that have a draw.
    pub(super) total: Total,
}

#[derive(Debug, Serialize)]
pub(super) struct Total {
    pub(super) hours_on: f64,
    pub(super) hours_off: f64,
    pub(super) kwh: Option<f64>,
    pub(super) kwh_saved: Option<f64>,
    pub(super) cost_saved: Option<f64>,
    pub(super) activations: u64,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    /// The first day of the window and today (UTC, `YYYY-MM-DD`).
    pub(super) since: String,
    pub(super) until: String,
    pub(super) groups: Vec<GroupEnergy>,
    /// Ledger fields that could not be read (a foreign write), each left out with its reason.
    pub(super) problems: Vec<String>,
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
            return Ok(super::output::json(out, &report, false)?);
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

/// The report of `groups` over the whole UTC days from `since` ago through today, by the
/// server's clock: one round trip (`fleet energy`, and the live page's figures).
pub(super) async fn read_report(
    conn: crate::store::conn::Conn,
    keys: &crate::store::keys::Keys,
    groups: &[&CatalogGroup],
    since: Duration,
) -> Result<Report, Error> {
    let asked: Vec<(GroupName, Vec<BenchName>)> = groups
        .iter()
        .map(|g| {
            (
                g.name.clone(),
                g.slots.iter().map(|s| s.name.clone()).collect(),
            )
        })
        .collect();
    let store = EnergyStore::new(conn, keys.clone());
    let (ledgers, now) = store
        .read_groups(&asked)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    let today = energy::day_of(now);
    let from = energy::day_of(now - chrono::Duration::from_std(since).unwrap_or_default());
    Ok(report(groups, ledgers, from, today))
}

/// The report of `groups` from their stored ledgers, over the days from `from` to `today`.
fn report(
    groups: &[&CatalogGroup],
    ledgers: Vec<Vec<Stored>>,
    from: energy::Day,
    today: energy::Day,
) -> Report {
    let mut report = Report {
        since: day_text(from),
        until: day_text(today),
        groups: Vec::new(),
        problems: Vec::new(),
    };
    for (group, stored) in groups.iter().zip(ledgers) {
        let mut slots = Vec::new();
        for (slot, stored) in group.slots.iter().zip(stored) {
            for why in stored.skipped {
                report
                    .problems
                    .push(format!("slot {} of group {}: {why}", slot.name, group.name));
            }
            let totals = stored.ledger.totals(from);
            let hours = Figures::of(
                totals,
                energy::Draw {
                    watts: 0.0,
                    standby_watts: 0.0,
                    price_per_kwh: 0.0,
                },
            );
            let figures = slot.power.map(|d| Figures::of(totals, d));
            slots.push(SlotEnergy {
                group: group.name.clone(),
                slot: slot.name.clone(),
                hours_on: hours.hours_on,
                hours_off: hours.hours_off,
                kwh: figures.map(|f| f.kwh),
                kwh_saved: figures.map(|f| f.kwh_saved),
                cost_saved: figures.map(|f| f.cost_saved),
                activations: totals.activations,
                as_of: stored.ledger.mark().map(|m| m.at),
            });
        }
        let total = total(&slots);
        report.groups.push(GroupEnergy {
            group: group.name.clone(),
            slots,
            total,
        });
    }
    report
}

fn day_text(day: energy::Day) -> String {
    energy::date_of(day).map_or_else(|| day.to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// A group's total: hours and activations of every slot, energy of the slots with a draw.
fn total(slots: &[SlotEnergy]) -> Total {
    let sum = |f: fn(&SlotEnergy) -> Option<f64>| -> Option<f64> {
        slots
            .iter()
            .filter_map(f)
            .fold(None, |a, v| Some(a.unwrap_or(0.0) + v))
    };
    Total {
        hours_on: slots.iter().map(|s| s.hours_on).sum(),
        hours_off: slots.iter().map(|s| s.hours_off).sum(),
        kwh: sum(|s| s.kwh),
        kwh_saved: sum(|s| s.kwh_saved),
        cost_saved: sum(|s| s.cost_saved),
        activations: slots.iter().map(|s| s.activations).sum(),
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
