//! Failover chaos ("Proof"; SPEC §2.7 Sentinel, §5.3, §5.4): scale cycles through two
//! `fleet serve` processes on a Sentinel setup (`fleet_testing::SentinelSet`: one primary, one
//! replica, three sentinels) while the primary is SIGKILLed at seeded random points of a cycle
//! and the sentinels promote the replica; the dead primary then comes back as the new primary's
//! replica, so the next cycle can fail over again. After the cycles it checks, from the
//! operations' own log (`<slot> <claim> <kind> <attempt> <unix ms>`, appended by the startup and
//! shutdown commands) and from the store:
//!
//! - every cycle converged: each slot's claim reached ready, then, cancelled, completed with its
//!   machine off, each within `STAGE`;
//! - no claim's startup fired twice: a claim is one attempt (its `attempt` is seeded once, at
//!   creation, and never rewritten, SPEC §3.5), so at most one startup line per claim name, its
//!   attempt the claim's, and exactly one for a claim the test made that reached ready;
//! - no machine a claim wanted was powered off: a shutdown line naming a claim comes after the
//!   test cancelled that claim, and one naming none (an unclaimed machine) falls in no span
//!   between the test asking for a claim on that slot and cancelling it;
//! - every timeline's moves are legal (`check_move`, SPEC §3.2).
//!
//! Two kinds of kill. A *clean* kill lands with the replica caught up (on loopback the replica
//! applies a write within microseconds of the primary's reply, so a kill at an event the test
//! observed loses nothing): the failover is then an outage of a few seconds. A *lossy* kill
//! first holds the replica's replication (`SentinelSet::hold_replication`) from a seeded point
//! before the event, so the failover loses every write acknowledged since: what asynchronous
//! replication does when a primary dies with writes its replica never got ("Failover
//! safety").
//!
//! CI runs the clean short form. `cargo test --test long sentinel_chaos:: -- --ignored` runs the long
//! forms: 50 cycles of clean kills, and 50 cycles of lossy kills. `FLEET_CHAOS_SEED` replays a
//! seed (`FLEET_CHAOS_CYCLES` stops after that many cycles); every failure message names it and
//! the run's journal. Every wait polls, bounded.

use crate::support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fleet::domain::claim::{Claim, Phase, Reason, check_move};
use fleet::domain::name::{BenchName, ClaimName};
use fleet::domain::state::State;
use fleet::store::catalog::CatalogGroup;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet_redis::conn::Conn;
use fleet_redis::connect::Endpoint;
use fleet_testing::fixture::{self, Group};
use fleet_testing::{Fixture, SentinelSet};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{Serve, bounded, name};

const SLOTS: [&str; 2] = ["bench-01", "bench-02"];
/// The operations' own timeout.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one stage of a cycle (all slots ready; all completed and off) may take: what fleet
/// may wait by design, plus room. A failover that loses an operation's reported outcome (the
/// wrapper reported it to the primary that died) leaves the operation recorded as running, and a
/// leader that did not run it holds its slot for the timeout and the report slack from the
/// operation's start (SPEC §5.4, `operation::unreported`), 40 s here: that wait can fall inside
/// one stage. Beside it a failover (about 3 s, up to 10 s when the sentinels failed over within
/// twice `failover-timeout`), the old primary's return, a boot or a power-off and a few passes.
/// The stage was 45 s, and a CI run on a loaded host failed at it.
const STAGE: Duration =
    Duration::from_secs(OP_TIMEOUT.as_secs() + fleet::lifecycle::REPORT_SLACK.as_secs() + 20);
/// How long a lossy kill waits for an operation the held replica keeps from firing: above the
/// gate's WAIT (three quarters of `fleet serve`'s 2 s call timeout).
const HELD: Duration = Duration::from_secs(3);
/// How often the test looks.
const POLL: Duration = Duration::from_millis(50);
/// The machine's beat: a simulated bench beats every `BEAT_EVERY` with this TTL, as an agent
/// does, so a beat lost in a failover is written again within a beat.
const BEAT_TTL: &str = "2s";

/// The startup powers the machine on: it logs the fire first, then starts the machine (a loop
/// that beats through the Sentinel URL until the machine is switched off) unless it is on.
const STARTUP: &str = r#"echo "$FLEET_SLOT $FLEET_CLAIM startup $FLEET_ATTEMPT $(date +%s%3N)" >> "$LOG"; m="$DIR/$FLEET_SLOT"; touch "$m.on"; if [ -e "$m.pid" ] && kill -0 "$(cat "$m.pid")" 2>/dev/null; then exit 0; fi; ( while [ -e "$m.on" ]; do "$BIN" --redis "$REDIS" --timeout 1s beat "$FLEET_SLOT" --ttl "$TTL"; sleep 0.2; done ) >/dev/null 2>&1 & echo $! > "$m.pid""#;
/// The shutdown powers it off: logs the fire, stops the beating loop, waits for it to end, and
/// says the bench is down (a lost `--ttl 0` leaves the last beat to expire within `BEAT_TTL`).
const SHUTDOWN: &str = r#"echo "$FLEET_SLOT ${FLEET_CLAIM:--} shutdown ${FLEET_ATTEMPT:--} $(date +%s%3N)" >> "$LOG"; m="$DIR/$FLEET_SLOT"; rm -f "$m.on"; if [ -e "$m.pid" ]; then p=$(cat "$m.pid"); while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; fi; "$BIN" --redis "$REDIS" --timeout 1s beat "$FLEET_SLOT" --ttl 0 >/dev/null 2>&1; exit 0"#;

fn yaml(url: &str, dir: &Path) -> String {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", url)
                .env("LOG", dir.join("ops.log").display().to_string())
                .env("DIR", dir.display().to_string())
                .env("TTL", BEAT_TTL)
                .startup(fixture::Op::sh(STARTUP).timeout(&format!("{}s", OP_TIMEOUT.as_secs())))
                .shutdown(fixture::Op::sh(SHUTDOWN).timeout(&format!("{}s", OP_TIMEOUT.as_secs())))
                .timing("job_monitor_poll_interval", "100ms")
                .timing("stuck_threshold", "60s"),
        )
        .slots("pool-a", SLOTS)
        .yaml()
}

/// Where in a cycle the primary dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    /// Right after the test asked for the claims.
    Requested,
    /// When the first startup of the cycle fired (its operation was recorded just before).
    Starting,
    /// When every claim of the cycle is ready.
    Ready,
    /// Right after the test cancelled the claims.
    Cancelled,
    /// When the first shutdown of the cycle fired.
    Stopping,
}

const POINTS: [Point; 5] = [
    Point::Requested,
    Point::Starting,
    Point::Ready,
    Point::Cancelled,
    Point::Stopping,
];

/// One kill: where, how long after the event, and, for a lossy kill, from which event on the
/// replica is held back (the writes from there to the kill are lost).
#[derive(Clone, Copy, Debug)]
struct Kill {
    at: Point,
    after: Duration,
    lossy: bool,
}

/// Which kills a run makes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Clean,
    Lossy,
}

/// A line of the operations' log.
#[derive(Debug)]
struct Op {
    slot: String,
    claim: Option<String>,
    kind: String,
    attempt: Option<u32>,
    at_ms: u128,
}

/// A claim the test asked for, with the local times it started and stopped wanting it.
#[derive(Debug)]
struct Asked {
    name: ClaimName,
    slot: BenchName,
    attempt: u32,
    asked_ms: u128,
    cancelled_ms: Option<u128>,
    reached_ready: bool,
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis()
}

struct Run {
    seed: u64,
    set: SentinelSet,
    dir: tempfile::TempDir,
    store: ClaimStore<Conn>,
    presence: Presence<Conn>,
    group: CatalogGroup,
    asked: Vec<Asked>,
    /// What happened, in order: printed with every failure.
    journal: String,
    started: Instant,
    failovers: usize,
    lost_claims: usize,
    /// What the controllers said about leadership, a rolled-back store and power, once they
    /// stopped: printed with a failure of the final checks.
    serve_log: Vec<String>,
    /// The controllers while they run: a failure shows their last lines.
    procs: std::sync::Mutex<Vec<Serve>>,
}

impl Run {
    fn note(&mut self, what: impl std::fmt::Display) {
        let _ = writeln!(
            self.journal,
            "{:>8.3}s {what}",
            self.started.elapsed().as_secs_f64()
        );
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        // Before the end the controllers still run: their last lines, as far as they logged.
        let mut running = String::new();
        if let Ok(mut procs) = self.procs.lock() {
            for p in procs.iter_mut() {
                let name = p.name;
                let seen = p.drain();
                for line in &seen[seen.len().saturating_sub(60)..] {
                    let _ = writeln!(running, "{name}: {line}");
                }
            }
        }
        panic!(
            "seed {} (replay: FLEET_CHAOS_SEED={}): {what}\njournal:\n{}\noperations:\n{}\ncontrollers:\n{}\n{running}\nsentinels:\n{}",
            self.seed,
            self.seed,
            self.journal,
            std::fs::read_to_string(self.log()).unwrap_or_default(),
            self.serve_log.join("\n"),
            self.set.sentinel_logs(60)
        )
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("ops.log")
    }

    fn ops(&self) -> Vec<Op> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(w.len(), 5, "a log line of five words: {l:?}");
                Op {
                    slot: w[0].to_owned(),
                    claim: (w[1] != "-").then(|| w[1].to_owned()),
                    kind: w[2].to_owned(),
                    attempt: w[3].parse().ok(),
                    at_ms: w[4].parse().expect("a time in ms"),
                }
            })
            .collect()
    }

    /// The group's claims, or `None` when the read failed (a failover under way).
    async fn claims(&self) -> Option<Vec<Claim>> {
        let mut read = self
            .store
            .read_groups(std::slice::from_ref(&self.group.name))
            .await
            .ok()?;
        Some(std::sync::Arc::unwrap_or_clone(read.pop()?.claims))
    }

    /// Whether the bench of `slot` reads on (UP or HELD), or `None` when the read failed.
    async fn on(&self, slot: &str) -> Option<bool> {
        let snap = self.presence.read(&[]).await.ok()?;
        Some(
            snap.benches
                .iter()
                .any(|b| b.name.as_str() == slot && b.verdict(snap.now).state != State::Down),
        )
    }

    /// The claims of this run's cycles and the benches' states, a line each: CI shows only the
    /// head and tail of a failure's output, so the journal after this must stay in reach.
    async fn now_said(&self) -> String {
        let mut out = String::new();
        match self.claims().await {
            Some(claims) => {
                for c in &claims {
                    let op = c.operation.as_ref().map(|o| {
                        format!(
                            "{:?} started {} outcome {:?} finished {:?}",
                            o.kind,
                            o.started_at.format("%T%.3f"),
                            o.outcome,
                            o.finished_at.map(|t| t.format("%T%.3f").to_string())
                        )
                    });
                    let _ = writeln!(
                        out,
                        "  {} {} {:?} marked {:?} requested {} attempt {} shutdowns {} op {op:?}",
                        c.name,
                        c.phase,
                        c.reason,
                        c.marked_for_deletion,
                        c.requested_at.format("%T%.3f"),
                        c.attempt,
                        c.shutdown_attempts
                    );
                }
            }
            None => out.push_str("  the claims: the read failed\n"),
        }
        match self.presence.read(&[]).await {
            Ok(snap) => {
                for b in &snap.benches {
                    let _ = writeln!(out, "  {}: {:?}", b.name, b.verdict(snap.now));
                }
            }
            Err(e) => {
                let _ = writeln!(out, "  the benches: {e}");
            }
        }
        out
    }

    /// Kills the primary, waits for the promotion, and brings the old primary back as the new
    /// one's replica.
    async fn fail_over(&mut self, kill: Kill) {
        self.note(format!("killing the primary: {kill:?}"));
        let failover = match bounded_long(self.set.kill_primary()).await {
            Ok(f) => f,
            Err(e) => self.fail(format!("the failover: {e}")),
        };
        self.note(format!("failed over {failover:?}"));
        match bounded_long(self.set.restart_old_primary_as_replica()).await {
            Ok(port) => self.note(format!("{port} is back as a replica")),
            Err(e) => self.fail(format!("the old primary's return: {e}")),
        }
        self.failovers += 1;
    }

    /// Holds the replica back when `kill` is lossy and starts at `point`.
    async fn hold_if(&mut self, kill: Option<Kill>, point: Point) {
        if let Some(k) = kill.filter(|k| k.lossy && k.at == point) {
            self.note(format!("holding the replica back before {:?}", k.at));
            if let Err(e) = self.set.hold_replication(Duration::from_secs(30)).await {
                self.fail(format!("holding the replica: {e}"));
            }
        }
    }

    /// Kills the primary when `kill` lands at `point`.
    async fn kill_if(&mut self, kill: Option<Kill>, point: Point) {
        if let Some(k) = kill.filter(|k| k.at == point) {
            // A seeded point a little after the event, not a synchronisation.
            tokio::time::sleep(k.after).await;
            self.fail_over(k).await;
        }
    }

    /// Asks for a claim on every slot that has no live claim.
    async fn ask(&mut self) {
        let Some(claims) = self.claims().await else {
            return;
        };
        for slot in SLOTS {
            let slot = name(slot);
            if claims.iter().any(|c| c.slot == slot && c.phase.is_live()) {
                continue;
            }
            let asked_ms = now_ms();
            let Ok(now) = self.store.now().await else {
                return;
            };
            match fleet::requests::claim_slot(&self.store, &self.group, &slot, now).await {
                Ok(c) => {
                    self.note(format!("asked {} (attempt {})", c.name, c.attempt));
                    self.asked.push(Asked {
                        name: c.name,
                        slot,
                        attempt: c.attempt,
                        asked_ms,
                        cancelled_ms: None,
                        reached_ready: false,
                    });
                }
                Err(e) => self.note(format!("asking for {slot}: {e}")),
            }
        }
    }

    /// Cancels every live claim of the run's slots that is not marked yet.
    async fn cancel(&mut self) {
        let Some(claims) = self.claims().await else {
            return;
        };
        for c in claims
            .iter()
            .filter(|c| c.phase.is_live() && c.marked_for_deletion.is_none())
        {
            let cancelled_ms = now_ms();
            let Ok(now) = self.store.now().await else {
                return;
            };
            let res = fleet::requests::cancel(
                &self.store,
                c,
                Reason::DeletedByHand,
                now,
                Duration::from_secs(3600),
            )
            .await;
            self.note(format!("cancel {} ({}): {res:?}", c.name, c.phase));
            if res.is_ok()
                && let Some(a) = self.asked.iter_mut().find(|a| a.name == c.name)
            {
                a.cancelled_ms.get_or_insert(cancelled_ms);
            }
            if res.is_ok() && !self.asked.iter().any(|a| a.name == c.name) {
                // A claim the test did not make (an adopted machine after a lossy failover):
                // the test asks for nothing it did not ask for, so it ends it like its own.
                self.asked.push(Asked {
                    name: c.name.clone(),
                    slot: c.slot.clone(),
                    attempt: c.attempt,
                    asked_ms: 0,
                    cancelled_ms: Some(cancelled_ms),
                    reached_ready: c.phase == Phase::Ready,
                });
            }
        }
    }

    fn startups_began(&self, since: usize) -> bool {
        self.ops()[since..].iter().any(|o| o.kind == "startup")
    }

    fn shutdowns_began(&self, since: usize) -> bool {
        self.ops()[since..].iter().any(|o| o.kind == "shutdown")
    }

    /// Waits for the first operation of `kind` to fire, the point the kill `k` is timed from.
    /// With the replica held back (a lossy kill), the controller must not fire it at all: it
    /// waits for a replica's acknowledgement first (SPEC §5.6). So a lossy kill waits only
    /// `HELD`, long enough for the gate's WAIT to run out, and kills with the operation held back;
    /// one that fired meanwhile is judged by the checks like any other.
    async fn await_op(&mut self, k: Kill, kind: &str, began: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + if k.lossy { HELD } else { STAGE };
        while !began(self) {
            if Instant::now() > deadline {
                if k.lossy {
                    self.note(format!(
                        "no {kind} fired while the replica is held back (the controller waits for it)"
                    ));
                    return;
                }
                self.fail(format!("no {kind} fired"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// One scale cycle: every slot claimed and ready, then cancelled, completed and off.
    async fn cycle(&mut self, n: usize, kill: Option<Kill>) {
        self.note(format!("cycle {n} (kill: {kill:?})"));
        let logged = self.ops().len();
        self.hold_if(kill, Point::Requested).await;
        self.ask().await;
        self.hold_if(kill, Point::Starting).await;
        self.kill_if(kill, Point::Requested).await;
        if let Some(k) = kill.filter(|k| k.at == Point::Starting) {
            self.await_op(k, "startup", |run| run.startups_began(logged))
                .await;
            self.kill_if(kill, Point::Starting).await;
        }
        // Ready on every slot: a claim the failover took is asked for again, as
        // cluster-autoscaler would.
        let deadline = Instant::now() + STAGE;
        loop {
            if let Some(claims) = self.claims().await {
                let ready = SLOTS.iter().all(|s| {
                    claims.iter().any(|c| {
                        c.slot.as_str() == *s
                            && c.phase == Phase::Ready
                            && c.marked_for_deletion.is_none()
                    })
                });
                if let Some(c) = claims.iter().find(|c| c.phase == Phase::Failed) {
                    self.fail(format!("claim {} failed: {c:#?}", c.name));
                }
                if ready {
                    for c in claims.iter().filter(|c| c.phase == Phase::Ready) {
                        if let Some(a) = self.asked.iter_mut().find(|a| a.name == c.name) {
                            a.reached_ready = true;
                        }
                    }
                    break;
                }
                let asked: Vec<ClaimName> = self.asked.iter().map(|a| a.name.clone()).collect();
                let missing = asked.iter().any(|a| {
                    !claims.iter().any(|c| &c.name == a)
                        && self
                            .asked
                            .iter()
                            .any(|x| &x.name == a && x.cancelled_ms.is_none())
                });
                if missing {
                    // The store lost a claim the test made: it stops wanting it (the claim is
                    // gone) and asks again.
                    for a in self.asked.iter_mut().filter(|a| {
                        a.cancelled_ms.is_none() && !claims.iter().any(|c| c.name == a.name)
                    }) {
                        a.cancelled_ms = Some(now_ms());
                        self.lost_claims += 1;
                    }
                    self.note("a claim the test made is gone from the store");
                    self.ask().await;
                }
            }
            if Instant::now() > deadline {
                let now = self.now_said().await;
                self.fail(format!(
                    "cycle {n}: not every slot ready within {STAGE:?}; now:\n{now}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
        self.note("every slot ready");
        self.hold_if(kill, Point::Ready).await;
        self.kill_if(kill, Point::Ready).await;

        let logged = self.ops().len();
        self.hold_if(kill, Point::Cancelled).await;
        self.cancel().await;
        self.hold_if(kill, Point::Stopping).await;
        self.kill_if(kill, Point::Cancelled).await;
        if let Some(k) = kill.filter(|k| k.at == Point::Stopping) {
            self.await_op(k, "shutdown", |run| run.shutdowns_began(logged))
                .await;
            self.kill_if(kill, Point::Stopping).await;
        }
        // Completed, every claim, and every machine off. A cancel the failover took is made
        // again.
        let deadline = Instant::now() + STAGE;
        loop {
            if let Some(claims) = self.claims().await {
                if let Some(c) = claims.iter().find(|c| c.phase == Phase::Failed) {
                    self.fail(format!("claim {} failed: {c:#?}", c.name));
                }
                let live = claims.iter().any(|c| c.phase.is_live());
                let mut off = true;
                for s in SLOTS {
                    off &= self.on(s).await == Some(false);
                }
                if !live && off {
                    break;
                }
                if claims
                    .iter()
                    .any(|c| c.phase.is_live() && c.marked_for_deletion.is_none())
                {
                    self.cancel().await;
                }
            }
            if Instant::now() > deadline {
                let now = self.now_said().await;
                self.fail(format!(
                    "cycle {n}: not every claim completed and machine off within {STAGE:?}; now:\n{now}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
        self.note(format!("cycle {n} converged"));
    }

    /// The promises, from the operations' log and the store.
    async fn check(&mut self) {
        let ops = self.ops();
        // No claim's startup fired twice; each fired for the claim's own attempt.
        let mut startups: HashMap<&str, usize> = HashMap::new();
        for o in ops.iter().filter(|o| o.kind == "startup") {
            let Some(claim) = o.claim.as_deref() else {
                self.fail(format!("a startup without a claim: {o:?}"));
            };
            *startups.entry(claim).or_default() += 1;
            match self.asked.iter().find(|a| a.name.as_str() == claim) {
                Some(a) if o.attempt == Some(a.attempt) => {}
                Some(a) => self.fail(format!(
                    "{claim}'s startup ran attempt {:?}, the claim is attempt {}",
                    o.attempt, a.attempt
                )),
                None => self.fail(format!("a startup for a claim nobody made: {o:?}")),
            }
        }
        for (claim, n) in &startups {
            if *n > 1 {
                self.fail(format!("claim {claim}'s startup fired {n} times"));
            }
        }
        for a in self
            .asked
            .iter()
            .filter(|a| a.reached_ready && a.asked_ms > 0)
        {
            if !startups.contains_key(a.name.as_str()) {
                self.fail(format!("{} reached ready without a startup", a.name));
            }
        }
        // No machine a claim wanted was powered off.
        for o in ops.iter().filter(|o| o.kind == "shutdown") {
            match &o.claim {
                Some(claim) => match self.asked.iter().find(|a| a.name.as_str() == claim) {
                    Some(a) if a.cancelled_ms.is_some_and(|t| t <= o.at_ms) => {}
                    Some(a) => self.fail(format!(
                        "{claim}'s machine was powered off while the claim wanted it \
                         (cancelled at {:?}): {o:?}",
                        a.cancelled_ms
                    )),
                    None => self.fail(format!("a shutdown for a claim nobody made: {o:?}")),
                },
                None => {
                    if let Some(a) = self.asked.iter().find(|a| {
                        a.slot.as_str() == o.slot
                            && a.asked_ms <= o.at_ms
                            && a.cancelled_ms.is_none_or(|t| o.at_ms < t)
                    }) {
                        self.fail(format!(
                            "an unclaimed shutdown of {} while {} wanted it: {o:?}",
                            o.slot, a.name
                        ));
                    }
                }
            }
        }
        // Every timeline's moves are legal, and every claim still in the store ended completed.
        let claims = match self.claims().await {
            Some(c) => c,
            None => self.claims().await.unwrap_or_default(),
        };
        for c in &claims {
            if c.phase != Phase::Completed {
                self.fail(format!("{} ended {}: {c:#?}", c.name, c.phase));
            }
            let timeline = match self.store.timeline(&self.group.name, &c.name).await {
                Ok(t) => t,
                Err(e) => self.fail(format!("reading {}'s timeline: {e}", c.name)),
            };
            let phases: Vec<Phase> = timeline.iter().map(|e| e.phase).collect();
            for pair in phases.windows(2) {
                if pair[0] != pair[1] && check_move(pair[0], pair[1]).is_err() {
                    self.fail(format!("{}: an illegal move in {phases:?}", c.name));
                }
            }
        }
    }
}

/// Bounds a harness wait that already bounds itself, with room for a slow failover.
async fn bounded_long<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(90), f)
        .await
        .expect("the harness bounds its own waits")
}

/// The kills of a run: one draw per cycle, seeded; a run makes at least one.
fn plan(rng: &mut StdRng, cycles: usize, mode: Mode) -> Vec<Option<Kill>> {
    let mut kills: Vec<Option<Kill>> = (0..cycles)
        .map(|_| {
            rng.random_bool(0.6).then(|| Kill {
                at: POINTS[rng.random_range(0..POINTS.len())],
                after: Duration::from_millis(rng.random_range(0..300)),
                lossy: mode == Mode::Lossy,
            })
        })
        .collect();
    if kills.iter().all(Option::is_none) {
        kills[0] = Some(Kill {
            at: POINTS[rng.random_range(0..POINTS.len())],
            after: Duration::ZERO,
            lossy: mode == Mode::Lossy,
        });
    }
    kills
}

async fn run(cycles: usize, mode: Mode, default_seed: u64) {
    let seed: u64 = std::env::var("FLEET_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_seed);
    // A replay may stop early: `FLEET_CHAOS_CYCLES` runs the first cycles of the seed's plan.
    let cycles: usize = std::env::var("FLEET_CHAOS_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(cycles);
    eprintln!("sentinel chaos: seed {seed}, {cycles} cycles, {mode:?} kills");
    let mut rng = StdRng::seed_from_u64(seed);
    let kills = plan(&mut rng, cycles, mode);
    let started = Instant::now();
    let set = bounded("the sentinel set to start", SentinelSet::start())
        .await
        .expect("starting the sentinel set");
    let url = set.url();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, yaml(&url, dir.path())).unwrap();
    let endpoint = Endpoint::new(url.clone(), Duration::from_secs(5));
    let conn = endpoint
        .open()
        .await
        .expect("connecting through the sentinels");
    let parsed = fleet::config::parse(&yaml(&url, dir.path()), Path::new("t.yaml")).unwrap();
    let group = fleet::store::catalog::Catalog::of(&parsed).groups.remove(0);
    let mut run = Run {
        seed,
        set,
        store: ClaimStore::new(conn.clone(), Keys::default()),
        presence: Presence::new(conn, Keys::default()),
        dir,
        group,
        asked: Vec::new(),
        journal: String::new(),
        started,
        failovers: 0,
        lost_claims: 0,
        serve_log: Vec::new(),
        procs: std::sync::Mutex::new(Vec::new()),
    };
    // Two controllers, so leadership is exercised too: the lease lives in the store that fails
    // over. Short timings: passes every 100 ms, a 1 s lease, no blind grace (the benches here
    // beat every 200 ms with a 2 s TTL).
    let mut procs = Vec::new();
    for holder in ["a", "b"] {
        let args = [
            "--metrics-addr",
            "127.0.0.1:0",
            "--interval",
            "100ms",
            "--lease",
            "1s",
            "--blind-grace",
            "0s",
            "--timeout",
            "1s",
            "--holder",
            holder,
        ];
        let name = if holder == "a" { "serve-a" } else { "serve-b" };
        procs.push(Serve::start_at(name, &url, &config, &args));
    }
    procs[0].log(&["fleet serve started"]).await;
    procs[1].log(&["fleet serve started"]).await;
    *run.procs.lock().expect("not poisoned") = procs;
    for (n, kill) in kills.iter().enumerate() {
        run.cycle(n, *kill).await;
    }
    let mut procs = std::mem::take(&mut *run.procs.lock().expect("not poisoned"));
    for p in &mut procs {
        let name = p.name;
        for line in p.stop().await {
            let said = [
                "leader",
                "leadership",
                "wipe",
                "rolled",
                "written",
                "blind",
                "adopt",
                "machine",
                "primary",
            ];
            if said.iter().any(|w| line.contains(w)) {
                run.serve_log.push(format!("{name}: {line}"));
            }
        }
    }
    run.check().await;
    // What happened, for a run that passed slowly (shown with --nocapture).
    eprintln!("journal:\n{}", run.journal);
    eprintln!(
        "sentinel chaos: seed {seed}, {cycles} cycles, {mode:?} kills, {} failovers, {} claims lost \
         to a failover, {} startups, converged in {:?}",
        run.failovers,
        run.lost_claims,
        run.ops().iter().filter(|o| o.kind == "startup").count(),
        started.elapsed()
    );
}

// CI: three cycles of clean kills, then five of lossy ones (seed 15 kills the primary with the
// replica held back in cycles 1 to 4). A clean kill loses no write; a lossy one loses the
// controller's last writes, which waiting for a replica's acknowledgement before every power
// action makes safe (SPEC §5.6): an operation recorded while the replica is held back is not
// fired, and one whose record the failover lost is not fired at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_cycles_across_sentinel_failovers_keep_every_promise() {
    run(3, Mode::Clean, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_cycles_across_failovers_that_lose_writes_keep_every_promise() {
    run(5, Mode::Lossy, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the long form: 50 cycles with clean failovers (several minutes)"]
async fn fifty_scale_cycles_across_sentinel_failovers() {
    run(50, Mode::Clean, 15).await;
}

// Before fleet waited for replicas this failed (seed 15, cycle 4: `FLEET_CHAOS_SEED=15
// FLEET_CHAOS_CYCLES=5`), a wrongful power-off: the replica held back, the test creates claims
// on both slots, the leader records their startups and fires them (both machines on), the
// primary dies 216 ms after the request, and the promoted replica has neither the claims nor the
// records. The failover outlasts the 1 s lease, so the next pass is a new leadership on the new
// primary that expects no written mark (SPEC §5.3), sees two machines on with no claim, and
// powers both off. With the gate the startups are never fired. The first version of the gate
// still failed it: it kept the held-back startup in the controller's memory of fired
// operations, which put the record back on the new primary and ran it (fixed in
// `reconcile::gate`); and it cached "no replica" for a minute after the old primary rejoined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the long form: 50 cycles with failovers that lose the primary's last writes"]
async fn fifty_scale_cycles_across_failovers_that_lose_writes() {
    run(50, Mode::Lossy, 15).await;
}
