//! What the live page shows, read once for every open page (SPEC §4.13): the views' world
//! (`views::World`: the catalog, the controller's status, the claims, the slots' statuses and
//! BMC readings), each slot's bench as `fleet state` decides it, the last failures with their
//! operation's output, and the energy figures when a group has a draw. The rows are the views'
//! own rows, so the page and `fleet slots`/`claims`/`groups` never disagree.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::claim::Phase;
use crate::domain::name::BenchName;
use crate::domain::state::{self, State};
use crate::store::catalog::ControllerStatus;
use crate::store::conn::Conn;
use crate::store::keys::Keys;
use crate::store::presence::Presence;

use crate::views::Error;
use crate::views::{self, ClaimRow, GroupRow, SlotRow, World};

/// How many failed claims the page lists, newest first.
const FAILURES: usize = 6;
/// How many lines of a failed operation's output the page shows.
const TAIL_LINES: usize = 12;
/// The energy window the page's figures cover.
const ENERGY_SINCE: Duration = Duration::from_secs(30 * 24 * 3600);

/// One read of everything the page shows.
pub struct Frame {
    /// The server's time of the read.
    pub now: DateTime<Utc>,
    pub controller: Option<ControllerStatus>,
    pub groups: Vec<GroupRow>,
    /// Each group's energy over the window, where a slot of it has a draw.
    pub energy: HashMap<String, Energy>,
    pub slots: Vec<SlotView>,
    /// The live claims, oldest first.
    pub claims: Vec<ClaimView>,
    pub failures: Vec<Failure>,
    /// What the read could not use, in words (a foreign write).
    pub problems: Vec<String>,
}

/// A slot's row, and its bench as `fleet state` decides it.
pub struct SlotView {
    pub row: SlotRow,
    pub bench: State,
    /// The hold the bench carries, or the one asked of it and not carried yet.
    pub hold: Option<String>,
}

/// A live claim, with when it was made and its deadline (the page shows the time elapsed
/// against it).
pub struct ClaimView {
    pub row: ClaimRow,
    pub made: DateTime<Utc>,
    pub deadline: Option<DateTime<Utc>>,
    /// Whether the read found it past its deadline.
    pub past: bool,
}

/// A failed claim, with why, and its last operation's output.
pub struct Failure {
    pub slot: BenchName,
    pub claim: String,
    pub group: String,
    pub reason: String,
    pub at: Option<DateTime<Utc>>,
    pub tail: Vec<String>,
}

/// A group's energy over the window.
pub struct Energy {
    pub since: String,
    pub hours_on: f64,
    pub kwh: Option<f64>,
    pub kwh_saved: Option<f64>,
    pub cost_saved: Option<f64>,
}

impl Frame {
    /// Reads everything, over `conn`: the views' four round trips, one for the benches, one for
    /// the energy figures, and one timeline per listed failure.
    pub async fn read(conn: Conn, keys: &Keys) -> Result<Frame, Error> {
        let world = World::read_on(conn.clone(), keys).await?;
        let slots = bench_views(&world, &conn, keys).await?;
        let failures = failures(&world).await;
        let energy = energy(&world, conn, keys).await?;
        let mut claims: Vec<ClaimView> = world
            .claims
            .iter()
            .filter(|c| c.phase.is_live())
            .map(|c| ClaimView {
                row: views::claim_row(c, &world),
                made: c.requested_at,
                deadline: c.deadline_at,
                past: c.deadline_at.is_some_and(|d| d <= world.now),
            })
            .collect();
        claims.sort_by(|a, b| a.row.requested_at.cmp(&b.row.requested_at));
        Ok(Frame {
            now: world.now,
            controller: world.controller.clone(),
            groups: views::group_rows(&world),
            energy,
            slots,
            claims,
            failures,
            problems: world.problems.clone(),
        })
    }
}

/// Each slot's row with its bench's state: one named presence read of every slot.
async fn bench_views(world: &World, conn: &Conn, keys: &Keys) -> Result<Vec<SlotView>, Error> {
    let rows = views::slot_rows(world);
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<BenchName> = world.slots.iter().map(|(_, n, ..)| n.clone()).collect();
    let snapshot = Presence::new(conn.clone(), keys.clone())
        .read(&names)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    let benches: HashMap<&str, _> = snapshot
        .benches
        .iter()
        .map(|b| (b.name.as_str(), b))
        .collect();
    Ok(rows
        .into_iter()
        .map(|row| {
            let bench = benches.get(row.name.as_str());
            let verdict = bench.map(|b| state::decide(&b.reading, snapshot.now));
            let carried = verdict.as_ref().and_then(|v| v.hold.clone());
            let asked = bench.and_then(|b| b.requested_hold.as_ref());
            SlotView {
                bench: verdict.as_ref().map_or(State::Down, |v| v.state),
                hold: carried
                    .map(|r| r.to_string())
                    .or_else(|| asked.map(|h| format!("asked: {}", h.reason))),
                row,
            }
        })
        .collect())
}

/// The newest failed claims (each slot's last claim, when it failed), with their last
/// operation's output. A timeline that cannot be read shows no output; the failure still shows.
async fn failures(world: &World) -> Vec<Failure> {
    let mut failed: Vec<_> = world
        .slots
        .iter()
        .filter_map(|(_, slot, _, last)| Some((slot, last.as_ref()?)))
        .filter(|(_, last)| last.phase == Phase::Failed)
        .collect();
    failed.sort_by_key(|(_, last)| std::cmp::Reverse(last.finished_at));
    let mut out = Vec::new();
    for (slot, last) in failed.into_iter().take(FAILURES) {
        let tail = views::last_output(&world.store, &last.group, &last.name).await;
        let lines: Vec<String> = tail.lines().map(str::to_owned).collect();
        out.push(Failure {
            slot: slot.clone(),
            claim: last.name.to_string(),
            group: last.group.to_string(),
            reason: last
                .reason
                .map_or_else(|| "failed".to_owned(), |r| r.to_string()),
            at: last.finished_at,
            tail: lines[lines.len().saturating_sub(TAIL_LINES)..].to_vec(),
        });
    }
    out
}

/// Each group's energy over the window, for the groups with a slot that has a draw.
async fn energy(world: &World, conn: Conn, keys: &Keys) -> Result<HashMap<String, Energy>, Error> {
    let drawn: Vec<_> = world
        .catalog
        .groups
        .iter()
        .filter(|g| g.slots.iter().any(|s| s.power.is_some()))
        .collect();
    if drawn.is_empty() {
        return Ok(HashMap::new());
    }
    let report = crate::views::energy::read_report(conn, keys, &drawn, ENERGY_SINCE).await?;
    Ok(report
        .groups
        .into_iter()
        .map(|g| {
            let t = g.total;
            (
                g.group.to_string(),
                Energy {
                    since: report.since.clone(),
                    hours_on: t.hours_on,
                    kwh: t.kwh,
                    kwh_saved: t.kwh_saved,
                    cost_saved: t.cost_saved,
                },
            )
        })
        .collect())
}
