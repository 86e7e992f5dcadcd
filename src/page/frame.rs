//! What the live page shows, read once for every open page (SPEC §4.13): the views' world
//! (`views::World`: the catalog, the controller's status, the claims, the slots' statuses and
//! BMC readings), each slot's bench as `fleet state` decides it, the last failures with their
//! operation's output, and the energy figures when a group has a draw. The groups' and claims'
//! rows are the views' own rows, so the page and `fleet groups`/`claims` never disagree.
//!
//! A read is kept compact, since it is held between reads and every open page renders from it:
//! a slot is one `Line` (its name, its group's index, its phase, power and bench, and the few
//! words of its BMC reading, hold and claim), not a `SlotRow` and not HTML. At 100 000 slots the
//! read is about 12 MB (some 120 bytes a line, reckoned from the types, not measured apart), where
//! the whole page's HTML it replaced was 75 MB, held twice.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::claim::Phase;
use crate::domain::law::Report;
use crate::domain::name::BenchName;
use crate::domain::state::{self, State};
use crate::store::catalog::ControllerStatus;
use crate::store::keys::Keys;
use crate::store::presence::Presence;
use fleet_redis::conn::Conn;

use crate::views::Error;
use crate::views::{self, ClaimRow, GroupRow, World};

/// How many failed claims the page lists, newest first.
const FAILURES: usize = 6;
/// How many lines of a failed operation's output the page shows.
const TAIL_LINES: usize = 12;
/// How many claims in flight the page lists, oldest first (it counts them all).
pub const IN_FLIGHT: usize = 20;
/// The energy window the page's figures cover.
const ENERGY_SINCE: Duration = Duration::from_secs(30 * 24 * 3600);

/// One read of everything the page shows.
pub struct Frame {
    /// The server's time of the read.
    pub now: DateTime<Utc>,
    pub controller: Option<ControllerStatus>,
    pub groups: Vec<GroupView>,
    /// Each group's energy over the window, where a slot of it has a draw.
    pub energy: HashMap<String, Energy>,
    /// Every slot, in the catalog's order (group by group).
    pub slots: Vec<Line>,
    /// The slots counted by phase, power and bench.
    pub counts: Counts,
    /// The oldest `IN_FLIGHT` claims in flight (live and not ready, or marked for deletion).
    pub in_flight: Vec<ClaimView>,
    /// How many claims are in flight in all.
    pub in_flight_total: usize,
    pub failures: Vec<Failure>,
    /// What the read could not use, in words (a foreign write).
    pub problems: Vec<String>,
}

/// A group's row, and what its slots are doing.
pub struct GroupView {
    pub row: GroupRow,
    /// Its slots that are pending, booting or draining.
    pub in_flight: u32,
    /// Its slots whose last claim failed.
    pub failed: u32,
}

/// A slot as the page shows it: compact, since the page holds every one between reads.
pub struct Line {
    pub name: BenchName,
    /// Its group, as an index into `Frame::groups`.
    pub group: u32,
    /// Its report's phase; `None` is idle (no report yet).
    pub phase: Option<Report>,
    pub power: &'static str,
    /// The BMC's reading in words, where a reader left one.
    pub bmc: Option<Box<str>>,
    pub bench: State,
    /// The hold the bench carries, or the one asked of it and not carried yet.
    pub hold: Option<Box<str>>,
    /// Its live claim's name.
    pub claim: Option<Box<str>>,
    /// Whether its last claim failed.
    pub failed: bool,
}

/// The word a phase is shown and filtered by: the report's, or `idle` without one.
pub fn phase_word(phase: Option<Report>) -> &'static str {
    phase.map_or("idle", Report::as_str)
}

/// Every phase word, in the order the page lists them.
pub const PHASES: [&str; 6] = ["idle", "off", "pending", "booting", "ready", "draining"];
/// Every power word.
pub const POWERS: [&str; 3] = ["on", "off", "unknown"];
/// Every bench state, as the page writes them.
pub const BENCHES: [State; 3] = [State::Up, State::Held, State::Down];

/// The slots counted by each filter's values, for the summary (and its links).
#[derive(Default, Clone, PartialEq, Eq, Debug)]
pub struct Counts {
    pub slots: usize,
    /// By `PHASES`.
    pub phase: [usize; 6],
    /// By `POWERS`.
    pub power: [usize; 3],
    /// By `BENCHES`.
    pub bench: [usize; 3],
    pub failed: usize,
}

impl Counts {
    fn of(lines: &[Line]) -> Counts {
        let mut c = Counts {
            slots: lines.len(),
            ..Counts::default()
        };
        for l in lines {
            let at = |words: &[&str], w: &str| words.iter().position(|x| *x == w).unwrap_or(0);
            c.phase[at(&PHASES, phase_word(l.phase))] += 1;
            c.power[at(&POWERS, l.power)] += 1;
            c.bench[BENCHES.iter().position(|b| *b == l.bench).unwrap_or(2)] += 1;
            c.failed += usize::from(l.failed);
        }
        c
    }
}

/// A claim in flight, with when it was made and its deadline (the page shows the time elapsed
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
        let slots = lines(&world, &conn, keys).await?;
        let failures = failures(&world).await;
        let energy = energy(&world, conn, keys).await?;
        let mut flying: Vec<_> = world
            .claims
            .iter()
            .filter(|c| {
                c.phase.is_live() && (c.phase != Phase::Ready || c.marked_for_deletion.is_some())
            })
            .collect();
        flying.sort_by_key(|c| c.requested_at);
        let in_flight = flying
            .iter()
            .take(IN_FLIGHT)
            .map(|c| ClaimView {
                row: views::claim_row(c, &world),
                made: c.requested_at,
                deadline: c.deadline_at,
                past: c.deadline_at.is_some_and(|d| d <= world.now),
            })
            .collect();
        let mut groups: Vec<GroupView> = views::group_rows(&world)
            .into_iter()
            .map(|row| GroupView {
                row,
                in_flight: 0,
                failed: 0,
            })
            .collect();
        for l in &slots {
            if let Some(g) = groups.get_mut(l.group as usize) {
                g.in_flight += u32::from(matches!(
                    l.phase,
                    Some(Report::Pending | Report::Booting | Report::Draining)
                ));
                g.failed += u32::from(l.failed);
            }
        }
        Ok(Frame {
            now: world.now,
            controller: world.controller.clone(),
            counts: Counts::of(&slots),
            groups,
            energy,
            slots,
            in_flight,
            in_flight_total: flying.len(),
            failures,
            problems: world.problems.clone(),
        })
    }

    /// A group's index in `groups`, by name.
    pub fn group_index(&self, name: &str) -> Option<u32> {
        self.groups
            .iter()
            .position(|g| g.row.name == name)
            .and_then(|i| u32::try_from(i).ok())
    }
}

/// Every slot's line with its bench's state: one named presence read of every slot.
async fn lines(world: &World, conn: &Conn, keys: &Keys) -> Result<Vec<Line>, Error> {
    if world.slots.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<BenchName> = world.slots.iter().map(|(_, n, ..)| n.clone()).collect();
    let snapshot = Presence::new(conn.clone(), keys.clone())
        .read(&names)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    drop(names);
    let benches: HashMap<&str, _> = snapshot
        .benches
        .iter()
        .map(|b| (b.name.as_str(), b))
        .collect();
    let group_of: HashMap<_, u32> = world
        .catalog
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| (&g.name, u32::try_from(i).unwrap_or(u32::MAX)))
        .collect();
    Ok(world
        .slots
        .iter()
        .map(|(group, name, status, last)| {
            let bench = benches.get(name.as_str());
            let verdict = bench.map(|b| state::decide(&b.reading, snapshot.now));
            let carried = verdict.as_ref().and_then(|v| v.hold.clone());
            let asked = bench.and_then(|b| b.requested_hold.as_ref());
            let power = status.as_ref().and_then(|s| s.power);
            Line {
                name: name.clone(),
                group: group_of.get(group).copied().unwrap_or(u32::MAX),
                phase: status.as_ref().and_then(|s| s.phase()),
                power: views::power_word(power),
                bmc: world.bmc.get(name).map(|r| {
                    match &r.why {
                        Some(why) => format!("{} ({why})", r.state.as_str()),
                        None => r.state.as_str().to_owned(),
                    }
                    .into_boxed_str()
                }),
                bench: verdict.as_ref().map_or(State::Down, |v| v.state),
                hold: carried
                    .map(|r| r.to_string())
                    .or_else(|| asked.map(|h| format!("asked: {}", h.reason)))
                    .map(String::into_boxed_str),
                claim: world
                    .live_claim(name)
                    .map(|c| c.name.as_str().to_owned().into_boxed_str()),
                failed: last.as_ref().is_some_and(|l| l.phase == Phase::Failed),
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
        // The script's words, shown as text exactly as `fleet describe` shows them: a control or
        // a bidi control in them reaches the page as its `\u{…}` form (SPEC §7 S7).
        let lines: Vec<String> = crate::domain::text::escaped_lines(&tail)
            .map(std::borrow::Cow::into_owned)
            .collect();
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
