//! The BMC's reading (SPEC §4.10), which runs with the controller: while this process leads, every slot whose driver is Redfish
//! or IPMI has its machine's power read from its BMC about once a period (60 s by default,
//! jittered), and the reading stored for the views (`bmc: on|off|unknown` beside the heartbeat,
//! `store::bmc`), with a TTL of a few periods so a reading nobody renews lapses.
//!
//! What it must not do: make a machine count as on, or a BMC it cannot reach count as off. The
//! heartbeat stays the observation of record; no decision of the claim model reads this reading.
//! A BMC that cannot be read reads `unknown`, with the error's words (never a secret: the
//! drivers' errors carry none).
//!
//! One request at a time per BMC: the reader reads the slots behind one BMC one after the other,
//! each read bounded by a hard timeout, and skips a slot while its operation is running (read from
//! the slot's operation record just before each read), since that operation's driver, in the
//! wrapper's own process, is polling the same BMC. A round reads at most [`CONCURRENT_BMCS`]
//! BMCs at once, and the next round starts a jittered period after the last one ended, so rounds
//! never overlap.
//!
//! Confirming a shutdown: the drivers verify an off themselves (the operation is Completed only
//! when a reading showed Off, and its audit says `verified off`). Past that, a slot whose last
//! operation is a completed shutdown, with no live claim, whose BMC reads on twice in a row, is
//! said once at WARN ("the BMC reads on after a shutdown"): someone powered it on, or the off did
//! not hold. It changes nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use rand::Rng;
use redis::aio::ConnectionLike;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::config::Config;
use crate::domain::claim::{Claim, OperationKind, OperationOutcome};
use crate::domain::name::{BenchName, GroupName};
use crate::domain::operation::{REPORT_SLACK, SlotOp};
use crate::power::Driver;
use crate::store::bmc::{BmcError, BmcState, BmcStore};
use crate::store::claims::{ClaimStore, GroupClaims};
use crate::store::keys::Keys;

use crate::power::PowerState;
use crate::power::drive::{bmc_of, read_state};

/// How often each BMC is read by default.
pub const EVERY: Duration = Duration::from_secs(60);

/// The hard bound on one reading: past it the BMC reads `unknown` (each driver bounds its own
/// requests well inside it: Redfish 20 s, IPMI its call timeout).
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How many BMCs a round reads at once.
pub const CONCURRENT_BMCS: usize = 32;

/// A reading stands for this many periods (plus one read's timeout): a reader that stopped
/// leaves nothing behind after that.
const LAPSE_PERIODS: u32 = 3;

/// Why a slot was not read when its operation record could not be asked for.
const UNREAD: &str = "the store could not be read";

/// The share of a period a wait moves by, either way.
const JITTER: f64 = 0.2;

/// The BMC readings of the leader, over the store.
pub struct Reader<C> {
    claims: ClaimStore<C>,
    readings: BmcStore<C>,
    config: watch::Receiver<Arc<Config>>,
    every: Duration,
    timeout: Duration,
}

/// One slot to read: its BMC's identity, its place and its driver.
#[derive(Clone, Debug)]
struct Target {
    group: GroupName,
    slot: BenchName,
    driver: Driver,
}

/// What one slot's turn came to.
#[derive(Debug)]
enum Turn {
    /// Not read: its operation is running, its record cannot be read, or the store could not be
    /// asked.
    Skipped { slot: BenchName, why: &'static str },
    /// Read, and recorded unless `recorded` says otherwise.
    Read {
        slot: BenchName,
        state: BmcState,
        /// The completed shutdown after which the machine should read off, if any.
        after_shutdown: Option<DateTime<Utc>>,
        recorded: Result<(), BmcError>,
    },
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Reader<C> {
    /// A reader over `conn` that follows `config` (reloads take effect at the next round).
    pub fn new(conn: C, keys: Keys, config: watch::Receiver<Arc<Config>>) -> Self {
        Reader {
            claims: ClaimStore::new(conn.clone(), keys.clone()),
            readings: BmcStore::new(conn, keys),
            config,
            every: EVERY,
            timeout: READ_TIMEOUT,
        }
    }

    /// Reads every `every` (at least 100 ms) instead of [`EVERY`].
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(100));
        self
    }

    /// How long a reading stands: a few periods and one read's timeout.
    pub fn lapse(&self) -> Duration {
        self.every * LAPSE_PERIODS + self.timeout
    }

    /// Reads while `leadership` holds a token (the controller's leadership signal,
    /// `store::lease::Signal`), its writes fenced by that token, until `shutdown` or until the
    /// signal's sender is gone. A round in flight when the leadership changes is dropped.
    pub async fn run(
        self,
        mut leadership: watch::Receiver<Option<String>>,
        shutdown: CancellationToken,
    ) {
        let mut confirm = Confirm::default();
        loop {
            let token = leadership.borrow_and_update().clone();
            let Some(token) = token else {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    changed = leadership.changed() => if changed.is_err() { return },
                }
                continue;
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = leadership.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                turns = self.round(&token) => report(&turns, &mut confirm),
            }
            let wait = jittered(self.every, rand::rng().random_range(-JITTER..=JITTER));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = leadership.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One round: every BMC slot of the configuration as it is now, the slots of one BMC one
    /// after the other, at most [`CONCURRENT_BMCS`] BMCs at once.
    async fn round(&self, token: &str) -> Vec<Turn> {
        let config = self.config.borrow().clone();
        let readings = self.readings.fenced(token);
        let chains = chains(&config);
        futures::stream::iter(chains.into_values())
            .map(|chain| {
                let readings = readings.clone();
                async move {
                    let mut turns = Vec::with_capacity(chain.len());
                    for target in &chain {
                        turns.push(self.turn(&readings, target).await);
                    }
                    turns
                }
            })
            .buffer_unordered(CONCURRENT_BMCS)
            .flat_map(futures::stream::iter)
            .collect()
            .await
    }

    /// One slot: its operation record read first (one round trip), then its BMC unless an
    /// operation is running, then the reading recorded.
    async fn turn(&self, readings: &BmcStore<C>, target: &Target) -> Turn {
        let skipped = |why| Turn::Skipped {
            slot: target.slot.clone(),
            why,
        };
        let read = self
            .claims
            .read_groups(std::slice::from_ref(&target.group))
            .await;
        let Some(group) = read.ok().and_then(|mut r| r.pop()) else {
            return skipped(UNREAD);
        };
        if let Some(why) = skip(&group, &target.slot) {
            return skipped(why);
        }
        let (state, why) =
            match tokio::time::timeout(self.timeout, read_state(&target.driver)).await {
                Ok(Some(Ok(state))) => (bmc_state(state), None),
                Ok(Some(Err(e))) => (BmcState::Unknown, Some(e.to_string())),
                Ok(None) => return skipped("the driver has no reading"),
                Err(_) => (
                    BmcState::Unknown,
                    Some(format!(
                        "no answer within {}",
                        humantime::format_duration(self.timeout)
                    )),
                ),
            };
        let recorded = readings
            .record(
                &target.group,
                &target.slot,
                state,
                why.as_deref(),
                self.lapse(),
            )
            .await
            .map(drop);
        Turn::Read {
            slot: target.slot.clone(),
            state,
            after_shutdown: after_shutdown(&group, &target.slot),
            recorded,
        }
    }
}

/// Logs what a round came to: a write that failed (once a round), the BMCs that read on after a
/// shutdown, and a summary at DEBUG.
fn report(turns: &[Turn], confirm: &mut Confirm) {
    let (mut read, mut skipped, mut unknown, mut unread) = (0, 0, 0, false);
    let mut failed = None;
    for turn in turns {
        match turn {
            Turn::Skipped { slot, why } => {
                skipped += 1;
                unread |= *why == UNREAD;
                debug!(%slot, why, "bmc reading skipped");
            }
            Turn::Read {
                slot,
                state,
                after_shutdown,
                recorded,
            } => {
                read += 1;
                unknown += usize::from(*state == BmcState::Unknown);
                if let Err(e) = recorded {
                    failed.get_or_insert(e);
                }
                if confirm.step(slot, *after_shutdown, *state) {
                    warn!(
                        %slot,
                        shutdown = %after_shutdown.map(|t| t.to_rfc3339()).unwrap_or_default(),
                        "the BMC reads on after a shutdown: the machine was powered on since, or \
                         the off did not hold; the heartbeat stays what counts"
                    );
                }
            }
        }
    }
    match failed {
        Some(BmcError::Fenced { group }) => {
            debug!(%group, "bmc reading refused by the fence: a newer leader reads")
        }
        Some(e) => warn!(
            error = fleet_redis::connect::chain(e),
            "recording a bmc reading failed; the next round tries again"
        ),
        None if unread => warn!(
            "reading the slots' operation records failed; their BMCs were not read this round"
        ),
        None => {}
    }
    debug!(read, skipped, unknown, "bmc readings taken");
}

/// The slots with a BMC, by BMC (`drive::bmc_of`), so the slots one BMC serves are read one
/// after the other.
fn chains(config: &Config) -> BTreeMap<String, Vec<Target>> {
    let mut chains: BTreeMap<String, Vec<Target>> = BTreeMap::new();
    for slot in config.slots.values() {
        let Some(driver) = &slot.driver else { continue };
        let Some(bmc) = bmc_of(driver) else { continue };
        chains.entry(bmc).or_default().push(Target {
            group: slot.group.clone(),
            slot: slot.name.clone(),
            driver: Driver::clone(driver),
        });
    }
    chains
}

/// Why a slot is not read now: its operation is running (its driver polls the BMC itself, and
/// the BMC gets one request at a time), or its record cannot be read (so nobody can tell). A
/// running operation whose report is overdue is over: its wrapper is gone (SPEC §5.4).
fn skip(group: &GroupClaims, slot: &BenchName) -> Option<&'static str> {
    if group.operations.unreadable.contains(slot) {
        return Some("its operation record cannot be read");
    }
    let op = group.operations.by_slot.get(slot)?;
    (op.running() && !op.report_overdue(group.now, REPORT_SLACK)).then_some("its operation runs")
}

/// The completed shutdown after which the slot's machine should read off: its last operation,
/// with no live claim on the slot since.
fn after_shutdown(group: &GroupClaims, slot: &BenchName) -> Option<DateTime<Utc>> {
    let live = group
        .claims
        .iter()
        .any(|c: &Claim| &c.slot == slot && c.phase.is_live());
    let op: &SlotOp = group.operations.by_slot.get(slot)?;
    let completed = op
        .end
        .as_ref()
        .is_some_and(|e| e.outcome == OperationOutcome::Completed);
    (!live && op.kind == OperationKind::Shutdown && completed).then_some(op.started_at)
}

fn bmc_state(state: PowerState) -> BmcState {
    match state {
        PowerState::On => BmcState::On,
        PowerState::Off => BmcState::Off,
        PowerState::Unknown => BmcState::Unknown,
    }
}

/// `every` moved by `share` of itself (`share` in ±[`JITTER`]), so BMCs are not all asked at
/// the same instant by several fleets.
fn jittered(every: Duration, share: f64) -> Duration {
    every.mul_f64((1.0 + share).max(0.0))
}

/// The consecutive `on` readings of each slot after its completed shutdown, to say once that the
/// BMC reads on after it.
#[derive(Debug, Default)]
struct Confirm {
    /// Per slot: the shutdown (its start), how many `on` in a row since, and whether it was said.
    slots: HashMap<BenchName, (DateTime<Utc>, u32, bool)>,
}

impl Confirm {
    /// Takes one reading; true exactly once per shutdown, at the second `on` in a row.
    fn step(
        &mut self,
        slot: &BenchName,
        after_shutdown: Option<DateTime<Utc>>,
        state: BmcState,
    ) -> bool {
        let Some(shutdown) = after_shutdown else {
            self.slots.remove(slot);
            return false;
        };
        let entry = self
            .slots
            .entry(slot.clone())
            .or_insert((shutdown, 0, false));
        if entry.0 != shutdown {
            *entry = (shutdown, 0, false);
        }
        match state {
            BmcState::On => entry.1 += 1,
            BmcState::Off | BmcState::Unknown => entry.1 = 0,
        }
        let say = entry.1 >= 2 && !entry.2;
        entry.2 |= say;
        say
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(ms)
    }

    #[test]
    fn the_bmc_reading_on_twice_after_a_shutdown_is_said_once() {
        let slot = BenchName::parse("n1").unwrap();
        let mut c = Confirm::default();
        let (on, off, unknown) = (BmcState::On, BmcState::Off, BmcState::Unknown);
        // No completed shutdown: nothing to confirm, whatever the BMC says.
        assert!(!c.step(&slot, None, on));
        assert!(!c.step(&slot, None, on));
        // After one: a single `on` is not enough, an `off` or `unknown` between breaks the run.
        let said: Vec<bool> = [on, off, on, unknown, on, on, on, on]
            .into_iter()
            .map(|s| c.step(&slot, at(1_000), s))
            .collect();
        assert_eq!(
            said,
            [false, false, false, false, false, true, false, false]
        );
        // A new shutdown is a new run.
        assert!(!c.step(&slot, at(2_000), on));
        assert!(c.step(&slot, at(2_000), on));
        // A live claim since (no completed shutdown in force) forgets it.
        assert!(!c.step(&slot, None, on));
        assert!(!c.step(&slot, at(2_000), on));
        assert!(c.step(&slot, at(2_000), on));
    }

    #[test]
    fn a_wait_moves_within_its_jitter() {
        let every = Duration::from_secs(60);
        assert_eq!(jittered(every, 0.0), every);
        assert_eq!(jittered(every, -JITTER), Duration::from_secs(48));
        assert_eq!(jittered(every, JITTER), Duration::from_secs(72));
    }

    #[test]
    fn the_slots_of_one_bmc_are_one_chain_and_wake_on_lan_has_none() {
        let text = r#"
groups:
  - name: g
    max_size: 5
slots:
  - { name: mini, group: g, driver: { type: wol, mac: "52:54:00:12:34:56", off: agent } }
  - { name: r1, group: g, driver: { type: redfish, endpoint: "https://10.0.0.1", system: /redfish/v1/Systems/1, username: u, password_env: P, insecure: true } }
  - { name: r2, group: g, driver: { type: redfish, endpoint: "https://10.0.0.1", system: /redfish/v1/Systems/2, username: u, password_env: P, insecure: true } }
  - { name: i1, group: g, driver: { type: ipmi, host: 10.0.0.9, username: u, password_env: P } }
"#;
        let config = crate::config::parse(text, std::path::Path::new("fleet.yaml")).unwrap();
        let chains: Vec<(String, Vec<String>)> = chains(&config)
            .into_iter()
            .map(|(bmc, t)| (bmc, t.iter().map(|t| t.slot.to_string()).collect()))
            .collect();
        assert_eq!(
            chains,
            [
                (
                    "https://10.0.0.1".to_owned(),
                    vec!["r1".into(), "r2".into()]
                ),
                ("ipmi 10.0.0.9:623".to_owned(), vec!["i1".into()]),
            ]
        );
    }
}
