//! The read model the verbs and the live page share (SPEC §4.7). What the views read: the catalog
//! (with the controller's status), every group's claims, every slot's status with each group's
//! last scaling call, and every slot's BMC reading, in four round trips whatever the number of
//! groups, and the rows built from them. Rows are built from domain values. Beside them, the energy
//! report (`energy`), the rows of the views that are not the world's and the TSV of any row
//! (`rows`), how times read for people (`time`), and what a verb or an action runs with and how it
//! fails (`ctx`: `Ctx`, `Error`).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::claim::{Claim, LastClaim, Phase, Reason};
use crate::domain::history::{self, GroupStatus, SlotSummary};
use crate::domain::law::{Power, Report};
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::store::bmc::{BmcReading, BmcStore};
use crate::store::catalog::{Catalog, ControllerStatus};
use crate::store::claims::{ClaimStore, LastScale, SlotStatus, SlotWaiting};
use fleet_redis::conn::Conn;

mod ctx;
pub mod energy;
pub mod rows;
pub mod time;

pub use ctx::{Ctx, Error, request_error};

/// Everything the views show, read once.
pub struct World {
    pub catalog: Catalog,
    /// The controller's status as its leader last published it; `None` when none did within its
    /// TTL (no `fleet serve` leads under this prefix).
    pub controller: Option<ControllerStatus>,
    pub claims: Vec<Claim>,
    pub slots: Vec<(GroupName, BenchName, Option<SlotStatus>, Option<LastClaim>)>,
    /// Each group's last scaling call.
    pub scales: std::collections::HashMap<GroupName, LastScale>,
    /// Each slot's BMC reading, where its leader's reader left one that has not lapsed
    /// (SPEC §4.10): a report shown beside the heartbeat, never its power.
    pub bmc: std::collections::HashMap<BenchName, BmcReading>,
    /// The BMC readings that cannot be read (a foreign write), each naming its key.
    pub problems: Vec<String>,
    pub store: ClaimStore<Conn>,
    pub now: DateTime<Utc>,
    /// Where each slot is in `slots`, and each slot's live claim in `claims`: a row finds its
    /// slot or claim in one lookup, so building every row is linear in the fleet, not
    /// quadratic (100 000 slots with 50 000 claims was 5·10⁹ comparisons).
    index: Index,
}

#[derive(Default)]
struct Index {
    slot: std::collections::HashMap<BenchName, usize>,
    live: std::collections::HashMap<BenchName, usize>,
}

impl Index {
    fn of(
        slots: &[(GroupName, BenchName, Option<SlotStatus>, Option<LastClaim>)],
        claims: &[Claim],
    ) -> Index {
        let slot = slots
            .iter()
            .enumerate()
            .map(|(i, (_, name, ..))| (name.clone(), i))
            .collect();
        let mut live = std::collections::HashMap::<BenchName, usize>::new();
        for (i, c) in claims.iter().enumerate() {
            if !c.phase.is_live() {
                continue;
            }
            // The newest live claim of its slot, as a scan for the greatest `requested_at`
            // finds it (the last of equals, as `max_by_key` keeps it).
            match live.get(&c.slot) {
                Some(&j) if claims[j].requested_at > c.requested_at => {}
                _ => {
                    live.insert(c.slot.clone(), i);
                }
            }
        }
        Index { slot, live }
    }
}

impl World {
    pub async fn read(ctx: &Ctx) -> Result<World, Error> {
        let conn = ctx.endpoint.open().await?;
        World::read_on(conn, &ctx.keys).await
    }

    /// `read` over a connection the caller holds (the live page's reader keeps one).
    pub async fn read_on(mut conn: Conn, keys: &crate::store::keys::Keys) -> Result<World, Error> {
        let (catalog, controller) = Catalog::read_with_status(&mut conn, keys)
            .await
            .map_err(|e| Error::Runtime(e.into()))?;
        let readings = BmcStore::new(conn.clone(), keys.clone());
        let store = ClaimStore::new(conn, keys.clone()).without_scripts();
        let read = store
            .read_groups(&catalog.group_names())
            .await
            .map_err(|e| Error::Runtime(e.into()))?;
        let now = read.first().map_or_else(Utc::now, |g| g.now);
        let claims = (read.into_iter())
            .flat_map(|g| std::sync::Arc::unwrap_or_clone(g.claims))
            .collect();
        let asked: Vec<(GroupName, Vec<BenchName>)> = catalog
            .groups
            .iter()
            .map(|g| {
                (
                    g.name.clone(),
                    g.slots.iter().map(|s| s.name.clone()).collect(),
                )
            })
            .collect();
        let views = store
            .read_views(&asked)
            .await
            .map_err(|e| Error::Runtime(e.into()))?;
        let (bmc, problems) = read_bmc(&readings, &asked).await?;
        let mut slots = Vec::new();
        let mut scales = std::collections::HashMap::new();
        for ((group, names), view) in asked.into_iter().zip(views) {
            if let Some(scale) = view.last_scale {
                scales.insert(group.clone(), scale);
            }
            for (name, (status, last)) in names.into_iter().zip(view.slots) {
                slots.push((group.clone(), name, status, last));
            }
        }
        let claims: Vec<Claim> = claims;
        let index = Index::of(&slots, &claims);
        Ok(World {
            index,
            catalog,
            controller,
            claims,
            slots,
            scales,
            bmc,
            problems,
            store,
            now,
        })
    }

    pub fn live_claim(&self, slot: &BenchName) -> Option<&Claim> {
        self.index.live.get(slot).map(|&i| &self.claims[i])
    }

    /// A slot's status, as the last pass wrote it.
    pub fn status_of(&self, slot: &BenchName) -> Option<&SlotStatus> {
        self.index
            .slot
            .get(slot)
            .and_then(|&i| self.slots[i].2.as_ref())
    }
}

/// Every slot's BMC reading in one round trip, and the readings that cannot be read, in words.
async fn read_bmc(
    readings: &BmcStore<Conn>,
    asked: &[(GroupName, Vec<BenchName>)],
) -> Result<
    (
        std::collections::HashMap<BenchName, BmcReading>,
        Vec<String>,
    ),
    Error,
> {
    let read = readings
        .read_all(asked)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    let mut bmc = std::collections::HashMap::new();
    let mut problems = Vec::new();
    for ((_, slots), readings) in asked.iter().zip(read) {
        for (slot, reading) in slots.iter().zip(readings) {
            match reading {
                Some(Ok(r)) => {
                    bmc.insert(slot.clone(), r);
                }
                Some(Err(e)) => problems.push(e.to_string()),
                None => {}
            }
        }
    }
    Ok((bmc, problems))
}

/// A slot's BMC reading as the views show it (SPEC §4.10): what the BMC said, when (the
/// server's time) and how long ago, and why it is unknown.
#[derive(Clone, Debug, Serialize)]
pub struct BmcRow {
    pub state: &'static str,
    pub at: String,
    pub age_ms: u64,
    pub reason: Option<String>,
    /// `at` as a time, for tables.
    #[serde(skip)]
    pub time: DateTime<Utc>,
}

impl BmcRow {
    fn of(r: &BmcReading, now: DateTime<Utc>) -> BmcRow {
        BmcRow {
            state: r.state.as_str(),
            at: rfc3339(r.at),
            age_ms: (now - r.at).num_milliseconds().max(0).unsigned_abs(),
            reason: r.why.clone(),
            time: r.at,
        }
    }
}

/// A row of `fleet slots -o json`.
#[derive(Clone, Debug, Serialize)]
pub struct SlotRow {
    pub name: String,
    pub group: String,
    pub phase: Option<Report>,
    pub power: &'static str,
    /// The BMC's reading beside the heartbeat's power (Redfish, IPMI); `None` for a slot without
    /// a BMC, or whose reading lapsed.
    pub bmc: Option<BmcRow>,
    /// `None` while the controller is blind to the slot: usability is unknown, not false.
    pub usable: Option<bool>,
    pub claim: Option<String>,
    pub attempt: Option<u32>,
    pub activations_total: u64,
    pub activations_24h: u32,
    pub last_transition_time: Option<String>,
    pub previous_phase: Option<Report>,
    pub last_claim: Option<LastClaimRow>,
    /// The hold the bench carries while it holds (the phase stays what it was).
    pub held: Option<String>,
    /// Why the slot's live claim waits, when it does (times in RFC 3339).
    pub waiting: Option<String>,
    /// The same for tables, with local clock times.
    #[serde(skip)]
    pub waiting_local: Option<String>,
    /// `last_transition_time` as a time, for tables.
    #[serde(skip)]
    pub since: Option<DateTime<Utc>>,
}

/// The last-claim digest as the views show it: times in RFC 3339 with milliseconds, like every
/// time of every view.
#[derive(Clone, Debug, Serialize)]
pub struct LastClaimRow {
    pub name: ClaimName,
    pub phase: Phase,
    pub attempt: u32,
    pub group: GroupName,
    pub reason: Option<Reason>,
    pub requested_at: String,
    pub deadline_at: Option<String>,
    pub finished_at: Option<String>,
    pub reached_ready: bool,
    pub streak_reset_at: Option<String>,
    pub call: Option<&'static str>,
}

impl From<&LastClaim> for LastClaimRow {
    fn from(l: &LastClaim) -> Self {
        LastClaimRow {
            name: l.name.clone(),
            phase: l.phase,
            attempt: l.attempt,
            group: l.group.clone(),
            reason: l.reason,
            requested_at: rfc3339(l.requested_at),
            deadline_at: l.deadline_at.map(rfc3339),
            finished_at: l.finished_at.map(rfc3339),
            reached_ready: l.reached_ready,
            streak_reset_at: l.streak_reset_at.map(rfc3339),
            call: l.call.map(|c| c.as_str()),
        }
    }
}

/// Why a claim waits, in words (SPEC §4.7), its deadline written by `time`: RFC 3339 in JSON,
/// the local clock in tables.
pub fn waiting_text(w: &SlotWaiting, time: fn(DateTime<Utc>) -> String) -> String {
    match w {
        SlotWaiting::PoweringOff => {
            "the machine is powering off; it is started again once it is off".to_owned()
        }
        SlotWaiting::Held { reason } => format!("the bench holds ({reason})"),
        SlotWaiting::StartupRunning => "the startup is running".to_owned(),
        SlotWaiting::PowerBudget => {
            "the power-on budget: as many machines are powering on as it allows".to_owned()
        }
        SlotWaiting::Start => "to be started (another operation of the slot first)".to_owned(),
        SlotWaiting::FirstBeat { until } => {
            format!("the bench's first beat, until {}", time(*until))
        }
        SlotWaiting::Usable { until } => {
            format!("the machine to be usable, until {}", time(*until))
        }
        SlotWaiting::NotUsable => "the machine is on and not usable".to_owned(),
    }
}

/// Both renderings of why a claim waits: `(JSON, table)`.
fn waiting_texts(w: Option<&SlotWaiting>) -> (Option<String>, Option<String>) {
    (
        w.map(|w| waiting_text(w, rfc3339)),
        w.map(|w| waiting_text(w, time::clock)),
    )
}

pub fn slot_rows(world: &World) -> Vec<SlotRow> {
    world
        .slots
        .iter()
        .map(|(group, name, status, last)| {
            let status = status.clone().unwrap_or_default();
            let live = world.live_claim(name);
            let (waiting, waiting_local) = waiting_texts(status.waiting.as_ref());
            SlotRow {
                name: name.to_string(),
                group: group.to_string(),
                phase: status.phase(),
                power: power_word(status.power),
                bmc: world.bmc.get(name).map(|r| BmcRow::of(r, world.now)),
                usable: status.power.map(|_| status.usable),
                claim: live.map(|c| c.name.to_string()),
                attempt: live.map(|c| c.attempt).or(last.as_ref().map(|l| l.attempt)),
                activations_total: status.history.activations_total(),
                activations_24h: status.history.activations_last_24h(),
                last_transition_time: status.history.last_transition_time().map(rfc3339),
                previous_phase: status.history.previous_phase(),
                last_claim: last.as_ref().map(LastClaimRow::from),
                held: status.held.clone(),
                waiting,
                waiting_local,
                since: status.history.last_transition_time(),
            }
        })
        .collect()
}

/// A slot's power as the views write it: `unknown` while the controller is blind to it.
pub fn power_word(power: Option<Power>) -> &'static str {
    match power {
        Some(Power::On) => "on",
        Some(Power::Off) => "off",
        None => "unknown",
    }
}

/// A row of `fleet claims -o json`.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimRow {
    pub name: ClaimName,
    pub slot: BenchName,
    pub group: GroupName,
    pub phase: Phase,
    pub reason: Option<Reason>,
    pub attempt: u32,
    pub shutdown_attempts: u32,
    pub marked_for_deletion: bool,
    pub requested_at: String,
    pub deadline_at: Option<String>,
    pub finished_at: Option<String>,
    pub operation: Option<String>,
    /// Why it waits, when it is its slot's live claim and waits (times in RFC 3339).
    pub waiting: Option<String>,
    /// The same for tables, with local clock times.
    #[serde(skip)]
    pub waiting_local: Option<String>,
    /// The call that made it.
    pub call: Option<&'static str>,
}

pub fn claim_row(c: &Claim, world: &World) -> ClaimRow {
    let waiting = world
        .status_of(&c.slot)
        .filter(|s| s.claim.as_ref() == Some(&c.name))
        .and_then(|s| s.waiting.as_ref());
    let (waiting, waiting_local) = waiting_texts(waiting);
    ClaimRow {
        waiting,
        waiting_local,
        call: c.call.map(|call| call.as_str()),
        name: c.name.clone(),
        slot: c.slot.clone(),
        group: c.group.clone(),
        phase: c.phase,
        reason: c.reason.or(c.marked_for_deletion),
        attempt: c.attempt,
        shutdown_attempts: c.shutdown_attempts,
        marked_for_deletion: c.marked_for_deletion.is_some(),
        requested_at: rfc3339(c.requested_at),
        deadline_at: c.deadline_at.map(rfc3339),
        finished_at: c.finished_at.map(rfc3339),
        operation: c.operation.as_ref().map(|op| {
            let state = match op.outcome {
                None => "running".to_owned(),
                Some(o) => format!("{o:?}").to_lowercase(),
            };
            format!("{} {state}", op.kind.as_str())
        }),
    }
}

/// A row of `fleet groups -o json`.
#[derive(Clone, Debug, Serialize)]
pub struct GroupRow {
    pub name: String,
    pub min_size: u32,
    pub max_size: u32,
    /// Live claims not marked for deletion: what cluster-autoscaler sees as the target size.
    pub target: u32,
    #[serde(flatten)]
    pub status: GroupStatus,
}

pub fn group_rows(world: &World) -> Vec<GroupRow> {
    // Each group's slots and target in one walk of the slots and one of the claims.
    let mut summaries: std::collections::HashMap<&GroupName, Vec<SlotSummary>> =
        std::collections::HashMap::new();
    for (group, _, status, last) in &world.slots {
        summaries.entry(group).or_default().push(SlotSummary {
            power: status.as_ref().and_then(|s| s.power),
            last_claim_failed: last.as_ref().is_some_and(|l| l.phase == Phase::Failed),
        });
    }
    let mut targets: std::collections::HashMap<&GroupName, usize> =
        std::collections::HashMap::new();
    for c in world.claims.iter().filter(|c| c.wants_machine()) {
        *targets.entry(&c.group).or_default() += 1;
    }
    world
        .catalog
        .groups
        .iter()
        .map(|g| {
            let summaries = summaries.remove(&g.name).unwrap_or_default();
            let target = targets.get(&g.name).copied().unwrap_or(0);
            GroupRow {
                name: g.name.to_string(),
                min_size: g.min_size,
                max_size: g.max_size,
                target: u32::try_from(target).unwrap_or(u32::MAX),
                status: history::group_status(
                    &summaries,
                    world.scales.get(&g.name).map(|s| (s.at, s.action, s.count)),
                ),
            }
        })
        .collect()
}

/// The output of a claim's last operation that said anything (`fleet claim --wait` on a claim
/// that ended, the live page's failures). A timeline that cannot be read gives none: the caller
/// says the failure anyway.
pub async fn last_output(store: &ClaimStore<Conn>, group: &GroupName, claim: &ClaimName) -> String {
    store
        .timeline(group, claim)
        .await
        .ok()
        .and_then(|t| {
            t.into_iter()
                .rev()
                .find(|e| e.operation.is_some() && e.detail.is_some())
        })
        .and_then(|e| e.detail)
        .unwrap_or_default()
}

/// The store, the catalog, the named claim and the server's time: what a verb on one claim needs.
pub async fn find_claim(
    ctx: &Ctx,
    name: &ClaimName,
) -> Result<(ClaimStore<Conn>, Catalog, Claim, DateTime<Utc>), Error> {
    let mut conn = ctx.endpoint.open().await?;
    let catalog = Catalog::read(&mut conn, &ctx.keys)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    let store = ClaimStore::new(conn, ctx.keys.clone());
    let c = crate::requests::find_claim(&store, &catalog.group_names(), name)
        .await
        .map_err(request_error)?;
    let now = store.now().await.map_err(|e| Error::Runtime(e.into()))?;
    Ok((store, catalog, c, now))
}

/// What a request on one slot needs: the store, the slot's group as published, the server's
/// time, and the controller's status (to say when it will not act yet). A slot no group has is a
/// usage error.
pub struct SlotRequest {
    pub store: ClaimStore<Conn>,
    pub group: crate::store::catalog::CatalogGroup,
    pub now: DateTime<Utc>,
    pub controller: Option<ControllerStatus>,
}

pub async fn slot_request(ctx: &Ctx, slot: &BenchName) -> Result<SlotRequest, Error> {
    let mut conn = ctx.endpoint.open().await?;
    let (catalog, controller) = Catalog::read_with_status(&mut conn, &ctx.keys)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    let Some(group) = catalog.group_of(slot).cloned() else {
        return Err(Error::usage(format!(
            "no slot {slot}: list them with `fleet slots`"
        )));
    };
    let store = ClaimStore::new(conn, ctx.keys.clone());
    let now = store.now().await.map_err(|e| Error::Runtime(e.into()))?;
    Ok(SlotRequest {
        store,
        group,
        now,
        controller,
    })
}

/// What an operator must know about the controller before reading a view (SPEC §4.7): that it
/// is blind (why, and until when), or that none reports at all. `None` when it acts normally.
pub fn controller_notice(
    controller: Option<&ControllerStatus>,
    now: DateTime<Utc>,
) -> Option<String> {
    let Some(status) = controller else {
        return Some(format!(
            "no fleet serve has reported under this prefix within {}: nothing acts on the claims",
            humantime::format_duration(crate::store::catalog::STATUS_TTL)
        ));
    };
    let blind = status.blind.as_ref()?;
    Some(match blind.until {
        Some(until) => format!(
            "blind until {} ({}): {}; no machine is powered on or off until then",
            time::clock(until),
            time::relative(until, now),
            blind.why
        ),
        None => format!("blind: {}; no machine is powered on or off", blind.why),
    })
}

/// Writes the controller notice where a person sees it: above a table, on stderr beside JSON
/// (which stays exactly the rows).
pub fn notice(
    out: &mut (dyn std::io::Write + Send),
    world: &World,
    json: bool,
) -> std::io::Result<()> {
    if let Some(text) = controller_notice(world.controller.as_ref(), world.now) {
        if json {
            eprintln!("warning: {text}");
        } else {
            writeln!(out, "{text}")?;
        }
    }
    // A foreign write spoils only its own slot's BMC column, and is said where a person looks.
    for problem in &world.problems {
        eprintln!("warning: {problem}");
    }
    Ok(())
}

pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_a_claim_waits_is_rfc3339_in_json_and_a_clock_in_tables() {
        let until = DateTime::parse_from_rfc3339("2026-11-30T14:02:11.250Z")
            .unwrap()
            .with_timezone(&Utc);
        for w in [
            SlotWaiting::FirstBeat { until },
            SlotWaiting::Usable { until },
        ] {
            let (json, table) = waiting_texts(Some(&w));
            let json = json.unwrap();
            assert!(json.ends_with("until 2026-11-30T14:02:11.250Z"), "{json}");
            let table = table.unwrap();
            assert!(
                table.ends_with(&format!("until {}", time::clock(until))),
                "{table}"
            );
        }
        assert_eq!(waiting_texts(None), (None, None));
    }
}
