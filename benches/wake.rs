//! The wake benchmark (README "Benchmarks"; SPEC §4.5 the wake path).
//!
//! A real redis-server and a controller running its own loop (a pass each second), measured
//! twice in one run: the anchor with wakes off (the plain 1 s pass), then waking on beats. In
//! each:
//!
//! 1. First UP beat: a claim per slot whose startup (a no-op) has run waits for its bench's first
//!    beat; the benches beat for the first time one after another at random gaps. The delay is
//!    from the beat (its server time) to the pass that saw it (the claim's ready move, stamped
//!    with that pass's read time).
//! 2. Expiry: every slot ready with its bench up; each bench beats once more with a TTL that puts
//!    the deadlines a little apart, then stops. The delay is from each key's deadline to the pass
//!    that saw it gone (the claim's machine-observed-off condition).
//!
//! It prints the median, p99 and max of each, for both, and the anchor's ratio to the wake path.
//! The target: p99 under 100 ms for both delays.
//!
//! Run: `cargo bench --bench wake` (add `-- --quick` for 30 slots instead of 100).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use fleet::config;
use fleet::domain::claim::{Claim, ConditionKind, Phase};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::lifecycle::Exec;
use fleet::reconcile::{Controller, Faults, Wake};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, RedisServer};
use rand::Rng;
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

// The allocator the `fleet` binary runs with (cmd/fleet/main.rs), so what is measured here
// allocates as fleet does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One group of `slots` slots whose machines are never judged gone within a run.
fn yaml(slots: usize) -> String {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(slots as u32)
                .ungated()
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"]))
                .timing("machine_gone_grace", "1h"),
        )
        .slots("pool-a", (0..slots).map(|i| format!("bench-{i:03}")))
        .yaml()
}

fn group() -> GroupName {
    GroupName::parse("pool-a").expect("valid")
}

fn bench(i: usize) -> BenchName {
    BenchName::parse(&format!("bench-{i:03}")).expect("valid")
}

fn beat(i: usize, ttl: Duration) -> Beat {
    Beat {
        name: bench(i),
        ttl,
        hold: None,
        load: None,
        cores: None,
    }
}

/// The delays of one mode, in ms.
struct Delays {
    first_beat: Vec<f64>,
    expiry: Vec<f64>,
}

struct Bench {
    server: RedisServer,
    store: ClaimStore<MultiplexedConnection>,
    presence: Presence<MultiplexedConnection>,
    slots: usize,
}

impl Bench {
    /// The controller, its own loop at a pass per second; `wake` makes it wake on beats. The mass
    /// vanishing rule is off: this measures the reaction, several keys may expire in one pass.
    async fn controller(
        &self,
        wake: bool,
    ) -> anyhow::Result<(CancellationToken, tokio::task::JoinHandle<()>)> {
        let cfg = config::parse(&yaml(self.slots), Path::new("bench.yaml"))?;
        let (_, rx) = tokio::sync::watch::channel(Arc::new(cfg));
        let conn = self.server.endpoint().connect().await?;
        let mut ctl = Controller::new(
            rx,
            Presence::new(conn.clone(), Keys::default()),
            ClaimStore::new(conn, Keys::default()),
            Arc::new(Exec::new(env!("CARGO_BIN_EXE_fleet"))),
            Arc::new(Metrics::default()),
            Arc::new(Health::default()),
        )
        .with_faults(Faults {
            blind_grace: Duration::ZERO,
            vanish_min: usize::MAX,
            ..Faults::default()
        });
        if wake {
            let client = self.server.endpoint().client()?;
            ctl = ctl.waking_on(Wake::new(&client, &Keys::default(), Duration::from_secs(5)));
        }
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(ctl.run_leading(
            Duration::from_secs(1),
            Duration::from_secs(5),
            shutdown.clone(),
        ));
        Ok((shutdown, running))
    }

    async fn claims(&self) -> anyhow::Result<Vec<Claim>> {
        let read = self.store.read_groups(&[group()]).await?.remove(0);
        Ok(std::sync::Arc::unwrap_or_clone(read.claims))
    }

    /// Polls the claims until `done` holds for every slot's, bounded.
    async fn until(&self, what: &str, done: impl Fn(&Claim) -> bool) -> anyhow::Result<Vec<Claim>> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let claims = self.claims().await?;
            if claims.len() == self.slots && claims.iter().all(&done) {
                return Ok(claims);
            }
            anyhow::ensure!(Instant::now() < deadline, "{what} never happened");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn of(claims: &[Claim], i: usize) -> &Claim {
        claims
            .iter()
            .find(|c| c.slot == bench(i))
            .expect("a claim per slot")
    }

    /// One mode: a fresh store, a claim per slot, the controller, then both measurements.
    async fn run(&self, wake: bool) -> anyhow::Result<Delays> {
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut self.server.endpoint().connect().await?)
            .await?;
        let now = self.store.now().await?;
        for i in 0..self.slots {
            let seed = self.store.seed(&group(), &bench(i)).await?;
            let c = Claim::new(
                ClaimName::parse(&format!("bench-{i:03}-1"))?,
                bench(i),
                group(),
                None,
                now,
                &Default::default(),
                None,
            );
            self.store.create(&c, &seed).await?;
        }
        let (shutdown, running) = self.controller(wake).await?;
        self.until("every startup", |c| {
            c.operation.as_ref().is_some_and(|op| op.outcome.is_some())
        })
        .await?;

        // 1. First UP beats, one after another at random gaps (so each lands anywhere in the
        //    anchor's second).
        let mut rng = rand::rng();
        let mut beat_at: Vec<DateTime<Utc>> = Vec::new();
        for i in 0..self.slots {
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..250))).await;
            beat_at.push(
                self.presence
                    .beat(&beat(i, Duration::from_secs(3600)))
                    .await?
                    .at,
            );
        }
        let claims = self
            .until("every ready move", |c| c.phase == Phase::Ready)
            .await?;
        let first_beat = (0..self.slots)
            .map(|i| {
                let ready = Self::of(&claims, i)
                    .condition(ConditionKind::Ready)
                    .expect("a ready claim's condition")
                    .last_transition_time;
                ms(ready - beat_at[i])
            })
            .collect();

        // 2. Expiries: each bench's last beat, its deadline 1 s out plus a random spread.
        let mut deadlines = Vec::new();
        let mut spread = 0;
        for i in 0..self.slots {
            spread += rng.random_range(20..250);
            let ttl = Duration::from_millis(1_000 + spread);
            let at = self.presence.beat(&beat(i, ttl)).await?.at;
            deadlines.push(at + TimeDelta::from_std(ttl)?);
        }
        let claims = self
            .until("every machine observed off", |c| {
                c.condition(ConditionKind::MachineObservedOff)
                    .is_some_and(|off| off.status)
            })
            .await?;
        let expiry = (0..self.slots)
            .map(|i| {
                let off = Self::of(&claims, i)
                    .condition(ConditionKind::MachineObservedOff)
                    .expect("observed off")
                    .last_transition_time;
                ms(off - deadlines[i])
            })
            .collect();
        shutdown.cancel();
        running.await?;
        Ok(Delays { first_beat, expiry })
    }
}

fn ms(d: TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e3
}

/// Median, p99 and max of `values`, sorted in place.
fn figures(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| support::quantile(values, q);
    (at(0.5), at(0.99), at(1.0))
}

fn line(what: &str, anchor: &mut [f64], wake: &mut [f64]) {
    let (a50, a99, amax) = figures(anchor);
    let (w50, w99, wmax) = figures(wake);
    println!("{what} ({} samples each):", wake.len());
    println!(
        "  wake on beats: median {w50:.0} ms, p99 {w99:.0} ms, max {wmax:.0} ms (target: p99 under 100 ms)"
    );
    println!(
        "  anchor (1 s pass, wakes off): median {a50:.0} ms, p99 {a99:.0} ms, max {amax:.0} ms"
    );
    println!(
        "  anchor / wake: median {:.1}x, p99 {:.1}x",
        a50 / w50.max(0.001),
        a99 / w99.max(0.001)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = support::Args::new().quick();
    let server = RedisServer::start()?;
    let conn = server.endpoint().connect().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn.clone())
        .await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    let bench = Bench {
        store: ClaimStore::new(conn.clone(), Keys::default()),
        presence: Presence::new(conn, Keys::default()),
        server,
        slots: if quick { 30 } else { 100 },
    };
    let mut anchor = bench.run(false).await?;
    let mut wake = bench.run(true).await?;
    println!(
        "wake on beats: {} slots, Redis {version} on a unix socket, delays on the server's clock to the pass that saw the change",
        bench.slots
    );
    line(
        "first UP beat -> the pass that saw it",
        &mut anchor.first_beat,
        &mut wake.first_beat,
    );
    line(
        "key deadline -> the pass that saw it gone",
        &mut anchor.expiry,
        &mut wake.expiry,
    );
    Ok(())
}
