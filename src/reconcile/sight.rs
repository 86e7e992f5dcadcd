//! What the controller can see (SPEC §5.2, §5.3), judged once per pass before any slot: blind
//! while presence cannot be read, for the grace after sight returns, after a wipe, and when many
//! wanted machines vanish at once; and the status it publishes for the views. The rules are
//! `domain::sight`'s; this is their executor.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::domain::claim::OperationKind;
use crate::domain::law::Power;
use crate::domain::name::{BenchName, GroupName};
use crate::domain::sight;
use crate::domain::state::State;
use crate::lifecycle::Runner;
use crate::store::catalog::{Blindness, Catalog, ControllerStatus, STATUS_TTL};
use crate::store::claims::GroupClaims;
use crate::store::lease::Generation;
use crate::store::presence::Snapshot;

use super::cursor::Benches;
use super::pass::Observed;
use super::{Controller, Nodes, Set, Sight};

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Whether the controller may act this pass (SPEC §5.2, §5.3): blind while presence cannot
    /// be read, for the grace after sight returns, after a wipe, and when many wanted machines
    /// vanish at once. Publishes the controller's status for the views. Returns blind.
    pub(super) async fn judge_sight(&mut self, config: &Config, o: &Observed) -> bool {
        let now = o.now;
        let wiped = self.generation(config, now).await;
        let now_ms = now.timestamp_millis();
        self.seeing.adopting = wiped.is_some_and(|w| w.adopting(now_ms));
        if let Some(until) = wiped.and_then(|w| w.blind_until(now_ms)) {
            self.blind_for(
                until,
                "the store came back empty (or this is its first start): machines found on will be adopted",
            );
        }
        // Sight lost, then back: blind for the grace, so benches that beat through the outage
        // are heard again before anything is judged off.
        if o.snapshot.is_some() {
            let seen = match self.seeing.sight {
                Sight::Clear => sight::Sight::Clear,
                Sight::Lost => sight::Sight::Lost,
                Sight::Back(at) => sight::Sight::Back { ago: at.elapsed() },
            };
            let left = sight::grace_left(seen, self.faults.blind_grace);
            if !left.is_zero() {
                self.blind_for(
                    sight::grace_end(now, left),
                    "Redis could not be read: benches are heard again before anything is judged",
                );
                warn!(grace = ?left, "presence readable again: blind for the grace");
            }
            self.seeing.sight = Sight::Clear;
        }
        if let Some(snap) = &o.snapshot
            && let Some(v) = self.mass_vanishing(config, snap, &o.read)
        {
            warn!(
                vanished = v.vanished,
                on = v.on,
                "many wanted machines vanished in one pass: blind for the grace, no power action"
            );
            self.blind_for(
                sight::grace_end(now, self.faults.blind_grace),
                &format!(
                    "{} machines that claims want vanished in one pass: more likely a fault of \
                     the observation than of the machines",
                    v.vanished
                ),
            );
        }
        let verdict = sight::verdict(o.snapshot.is_some(), self.seeing.blind_until.take(), now);
        self.seeing.blind_until = verdict.window;
        self.metrics.blind.set(i64::from(verdict.blind));
        self.publish_status(verdict.blindness, now).await;
        verdict.blind
    }

    /// The store's generation marker (SPEC §5.3): a store that came back without its data is
    /// blind for the grace, then adopts; the wipe record is in the store, so a leader that takes
    /// over during the grace keeps it. The catalog the views read is published again when a
    /// wipe took it.
    async fn generation(&mut self, config: &Config, now: DateTime<Utc>) -> Option<sight::Wipe> {
        let lease = self.leading.lease.clone()?;
        let fresh = format!("{}-{}", lease.id(), now.timestamp_micros());
        let adopt_window = self.faults.blind_grace.max(Duration::from_secs(60));
        let Generation {
            marker,
            wiped,
            catalog,
            rolled_back,
        } = match lease
            .generation(
                &fresh,
                self.faults.blind_grace,
                adopt_window,
                self.seeing.written.take().as_deref(),
            )
            .await
        {
            Ok(g) => g,
            Err(e) => {
                warn!(
                    error = fleet_redis::connect::chain(&e),
                    "cannot read the generation marker"
                );
                return None;
            }
        };
        if !catalog {
            let mut conn = self.base_store.conn();
            match Catalog::of(config)
                .publish(&mut conn, self.presence.keys())
                .await
            {
                Ok(()) => info!("the catalog was missing from the store; published it again"),
                Err(e) => warn!(
                    error = fleet_redis::connect::chain(&e),
                    "publishing the catalog again failed"
                ),
            }
        }
        if rolled_back {
            warn!(
                "the store lost writes this controller made (a failover to a replica that had not received them): blind for the grace, then machines found on are adopted"
            );
            self.memory.forget_store();
        }
        if self.seeing.generation.as_deref() != Some(marker.as_str()) {
            if marker == fresh {
                warn!(
                    generation = marker,
                    "the store has no generation marker (first start, or Redis came back empty): blind for the grace, then machines found on are adopted"
                );
            }
            self.memory.forget_store();
            self.seeing.generation = Some(marker);
        }
        wiped.map(|(blind_until_ms, adopt_until_ms)| sight::Wipe {
            blind_until_ms,
            adopt_until_ms,
        })
    }

    /// The mass-vanishing rule (SPEC §5.2, [`sight::mass_vanishing`]) over this pass's
    /// observation: "was on" is this controller's own observation at its last pass, never the
    /// report it publishes; "powering off" is a shutdown in flight or not yet seen to take effect.
    fn mass_vanishing(
        &self,
        config: &Config,
        snap: &Snapshot,
        read: &[GroupClaims],
    ) -> Option<sight::Vanished> {
        let wanted: Set<(&GroupName, &BenchName)> = read
            .iter()
            .flat_map(|g| g.claims.iter())
            .filter(|c| c.wants_machine())
            .map(|c| (&c.group, &c.slot))
            .collect();
        let powering_off: Set<(&GroupName, &BenchName)> = read
            .iter()
            .flat_map(|g| {
                let settle = config
                    .group(&g.group)
                    .map_or(Duration::ZERO, |g| g.timings.job_monitor_poll_interval);
                g.operations
                    .by_slot
                    .iter()
                    .filter(move |(_, op)| {
                        op.kind == OperationKind::Shutdown
                            && (op.running() || op.going_down(snap.now, settle))
                    })
                    .map(move |(slot, _)| (&g.group, slot))
            })
            .collect();
        // The configured slots last seen on in the group they are in: the rule counts no other
        // (`was_on`). Walked in name order beside the snapshot's benches, which are sorted too,
        // so a slot's bench is found in a step rather than a search (a 100 000-slot pass spent a
        // third of its time here looking up every slot in the configuration and the snapshot).
        let mut benches = Benches::new(snap);
        let seen = config.slots.iter().filter_map(move |(name, slot)| {
            let bench = benches.find(name);
            match self.memory.last_power.get(name) {
                Some((group, Power::On)) if *group == slot.group => {}
                _ => return None,
            }
            let key = (&slot.group, name);
            let wanted = wanted.contains(&key);
            let powering_off = wanted && powering_off.contains(&key);
            // The verdict only where the rule counts the slot: the rule reads nothing else of
            // a slot that is not wanted or is being powered off.
            let counted = wanted && !powering_off;
            Some(sight::Seen {
                was_on: true,
                wanted,
                powering_off,
                now_off: counted && bench.is_none_or(|b| b.verdict(snap.now).state == State::Down),
            })
        });
        sight::mass_vanishing(seen, self.faults.vanish_min, self.faults.vanish_ratio)
    }

    /// Blind until `until` at least, for `why` (the latest end, and its reason, win).
    fn blind_for(&mut self, until: DateTime<Utc>, why: &str) {
        self.seeing.blind_until = sight::later(self.seeing.blind_until.take(), until, why);
    }

    /// Publishes the controller's status for the views when it changed, and well inside its TTL
    /// otherwise (SPEC §4.7). A report: nothing reads it to decide.
    async fn publish_status(&mut self, blind: Option<Blindness>, now: DateTime<Utc>) {
        let holder = self
            .leading
            .lease
            .as_ref()
            .map_or_else(|| "fleet serve".to_owned(), |l| l.id().to_owned());
        let fresh = self.seeing.published.as_ref().is_some_and(|(s, at)| {
            s.holder == holder && s.blind == blind && at.elapsed() < STATUS_TTL / 3
        });
        if fresh {
            return;
        }
        let status = ControllerStatus {
            holder,
            updated_at: now,
            blind,
        };
        let mut conn = self.base_store.conn();
        match status.publish(&mut conn, self.presence.keys()).await {
            Ok(()) => self.seeing.published = Some((status, Instant::now())),
            Err(e) => debug!(
                error = fleet_redis::connect::chain(&e),
                "publishing the controller's status failed"
            ),
        }
    }

    /// Sets the written mark after a pass's writes, so the next pass can tell whether the store
    /// kept them (SPEC §5.3). Without one set, the next pass expects none.
    pub(super) async fn mark_written(&mut self) {
        let (Some(lease), Some(token)) = (self.leading.lease.clone(), self.leading.token.clone())
        else {
            return;
        };
        self.seeing.passes_written += 1;
        let mark = format!("{token}:{}", self.seeing.passes_written);
        match lease.mark_written(&token, &mark).await {
            Ok(true) => self.seeing.written = Some(mark),
            Ok(false) => self.seeing.written = None,
            Err(e) => {
                self.seeing.written = None;
                debug!(
                    error = fleet_redis::connect::chain(&e),
                    "setting the written mark failed; the next pass checks none"
                );
            }
        }
    }
}
