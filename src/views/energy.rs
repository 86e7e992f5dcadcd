//! The energy report (SPEC §4.12): what each slot's machine drew and what powering it off saved
//! against an always-on baseline, over whole UTC days by the Redis server's clock, read from the
//! ledgers in one round trip. `fleet energy` prints it; the live page shows its totals.

use std::time::Duration;

use serde::Serialize;

use crate::domain::energy::{self, Figures};
use crate::domain::name::{BenchName, GroupName};
use crate::store::catalog::CatalogGroup;
use crate::store::energy::{EnergyStore, Stored};

use super::Error;

/// One slot's figures; the energy ones are `None` without a draw.
#[derive(Debug, Serialize)]
pub struct SlotEnergy {
    pub group: GroupName,
    pub slot: BenchName,
    pub hours_on: f64,
    pub hours_off: f64,
    pub kwh: Option<f64>,
    pub kwh_saved: Option<f64>,
    pub cost_saved: Option<f64>,
    pub activations: u64,
    /// The instant the ledger stands at (its mark), if it has one.
    pub as_of: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Serialize)]
pub struct GroupEnergy {
    pub group: GroupName,
    pub slots: Vec<SlotEnergy>,
    /// The sum of the slots; the energy figures sum the slots that have a draw.
    pub total: Total,
}

#[derive(Debug, Serialize)]
pub struct Total {
    pub hours_on: f64,
    pub hours_off: f64,
    pub kwh: Option<f64>,
    pub kwh_saved: Option<f64>,
    pub cost_saved: Option<f64>,
    pub activations: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// The first day of the window and today (UTC, `YYYY-MM-DD`).
    pub since: String,
    pub until: String,
    pub groups: Vec<GroupEnergy>,
    /// Ledger fields that could not be read (a foreign write), each left out with its reason.
    pub problems: Vec<String>,
}

/// The report of `groups` over the whole UTC days from `since` ago through today, by the
/// server's clock: one round trip (`fleet energy`, and the live page's figures).
pub async fn read_report(
    conn: fleet_redis::conn::Conn,
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
