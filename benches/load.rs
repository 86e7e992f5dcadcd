//! The load benchmark (issue 15, "100 000 benches on one Redis"; SPEC §2.5, §5.7).
//!
//! One private redis-server, one run:
//!
//! 1. Seeds `--benches` benches (100 000; 10 000 with `--quick`) through the real beat script,
//!    then a configuration of as many slots in groups of 1 000, each slot bound to its bench by a
//!    ready claim, and runs the controller's first pass (statuses and energy ledgers written).
//!    `INFO memory`'s `used_memory` before and after each step, divided by the bench count, is
//!    the memory per bench.
//! 2. The quiet window (the anchor): `--rate` beats per second (10 000) for `--seconds` (20; 5
//!    with `--quick`), nothing else running. Each beat is one round trip of the beat script, the
//!    call the agent makes; each bench beats at its own interval (the fleet's mean interval
//!    times 0.9 to 1.1, as the agent's jitter spreads a rack), so the rate is spread over the
//!    fleet. A few generators on their own connections and their own runtime issue the beats
//!    when due, never waiting for one to finish before the next.
//! 3. The loaded window: the same beats, while the controller passes over every slot back to
//!    back (the pass `fleet serve` runs, driven as `benches/controller.rs` drives it) and readers
//!    run the fleet read in a loop (as `fleet state --watch` does: one held-registry read and the
//!    rows, each frame, on a reader's own connection).
//!
//! It prints every beat's p50, p99, p99.9 and max, the achieved rate and Redis's CPU in each
//! window, the ratio loaded/quiet of p99, the passes and reads, and the target lines.
//!
//! The beats' TTL is an hour, so no key expires between the seeding and the windows (which would
//! make the controller act): the TTL does not change a beat's cost, and a steady beat (same
//! hold, a later deadline) publishes no wake (SPEC §2.4), so the beats here are the agent's.
//!
//! The generators, the controller, the readers and redis-server share this machine's cores: a
//! beat's latency under load includes the time the generator's thread waits for a core, not
//! Redis's alone. Redis's CPU per window says how busy the server was.
//!
//! Run: `cargo bench --bench load` (add `-- --quick` for 10 000 benches and 5 s windows;
//! `--benches N`, `--rate R`, `--seconds S`, `--tasks T` generators, `--readers K`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::config::{self, Config};
use fleet::domain::claim::{Claim, Move, Phase};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::lifecycle::Exec;
use fleet::reconcile::Controller;
use fleet::store::claims::ClaimStore;
use fleet::store::connect::Endpoint;
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet::telemetry::{Health, Metrics};
use fleet::testing::{Options, RedisServer};
use futures::stream::{self, FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// Slots per group in the configuration.
const GROUP_SIZE: usize = 1_000;
/// Writes in flight at once while seeding.
const IN_FLIGHT: usize = 512;
/// The target for a beat's p99 under load.
const P99_TARGET: Duration = Duration::from_millis(5);

/// What to run, from the command line.
#[derive(Clone, Copy, Debug)]
struct Args {
    benches: usize,
    rate: f64,
    seconds: f64,
    tasks: usize,
    readers: usize,
    quick: bool,
}

impl Args {
    fn parse() -> Args {
        let args: Vec<String> = std::env::args().collect();
        let quick = args.iter().any(|a| a == "--quick");
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1)?.parse::<f64>().ok())
        };
        Args {
            benches: value("--benches")
                .map_or(if quick { 10_000 } else { 100_000 }, |n| n as usize),
            rate: value("--rate").unwrap_or(10_000.0),
            seconds: value("--seconds").unwrap_or(if quick { 5.0 } else { 20.0 }),
            tasks: value("--tasks").map_or(4, |n| n as usize).max(1),
            readers: value("--readers").map_or(2, |n| n as usize),
            quick,
        }
    }

    fn window(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

fn bench_name(i: usize) -> BenchName {
    BenchName::parse(&format!("bench-{i:06}")).expect("valid name")
}

fn group_name(g: usize) -> GroupName {
    GroupName::parse(&format!("pool-{g:03}")).expect("valid name")
}

/// The beat a bench sends: its own load and cores beside the key, as the agent sends them.
fn beat(i: usize) -> Beat {
    Beat {
        name: bench_name(i),
        ttl: Duration::from_secs(3600),
        hold: None,
        load: Some((i % 32) as f64),
        cores: Some(16),
    }
}

/// `benches` slots in groups of `GROUP_SIZE`, slot `i` named after bench `i`.
fn yaml(benches: usize) -> String {
    let mut text = String::from("groups:\n");
    for g in 0..benches.div_ceil(GROUP_SIZE) {
        text.push_str(&format!(
            "  - name: {}\n    min_size: 0\n    max_size: {GROUP_SIZE}\n    readiness_taints: []\n    \
             startup: {{ command: [\"true\"] }}\n    shutdown: {{ command: [\"true\"] }}\n",
            group_name(g)
        ));
    }
    text.push_str("slots:\n");
    for i in 0..benches {
        let (slot, group) = (bench_name(i), group_name(i / GROUP_SIZE));
        text.push_str(&format!("  - {{ name: {slot}, group: {group} }}\n"));
    }
    text
}

fn controller(cfg: Config, conn: MultiplexedConnection) -> Controller<MultiplexedConnection, Exec> {
    let (_, rx) = tokio::sync::watch::channel(Arc::new(cfg));
    Controller::new(
        rx,
        Presence::new(conn.clone(), Keys::default()),
        ClaimStore::new(conn, Keys::default()),
        Arc::new(Exec::new(env!("CARGO_BIN_EXE_fleet"))),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    )
}

/// Every bench's first beat, through the real beat script, `IN_FLIGHT` at a time.
async fn seed_benches(conn: &MultiplexedConnection, benches: usize) -> anyhow::Result<()> {
    let presence = Presence::new(conn.clone(), Keys::default());
    let mut beats = stream::iter(0..benches)
        .map(|i| {
            let presence = presence.clone();
            async move { presence.beat(&beat(i)).await }
        })
        .buffer_unordered(IN_FLIGHT);
    while let Some(receipt) = beats.next().await {
        receipt?;
    }
    Ok(())
}

/// Binds every slot to its bench: a claim per slot, created a group at a time (one round trip
/// each), then moved to ready as the controller would have moved it.
async fn seed_claims(
    store: &ClaimStore<MultiplexedConnection>,
    benches: usize,
) -> anyhow::Result<()> {
    let now = store.now().await?;
    let mut created = Vec::with_capacity(benches);
    for g in 0..benches.div_ceil(GROUP_SIZE) {
        let slots: Vec<BenchName> = (g * GROUP_SIZE..benches.min((g + 1) * GROUP_SIZE))
            .map(bench_name)
            .collect();
        let seeds = store.seeds(&group_name(g), &slots).await?;
        let claims: Vec<Claim> = slots
            .iter()
            .map(|slot| {
                let name = ClaimName::parse(&format!("{slot}-1")).expect("valid name");
                Claim::new(
                    name,
                    slot.clone(),
                    group_name(g),
                    None,
                    now,
                    &Default::default(),
                    None,
                )
            })
            .collect();
        let refused = store.create_all(&claims, &seeds).await?;
        anyhow::ensure!(refused.is_none(), "a claim was refused: {refused:?}");
        created.extend(claims);
    }
    let mut writes = stream::iter(created)
        .map(|claim| async move {
            let booting = claim.apply(Move::to(Phase::Booting), now).expect("legal");
            let ready = booting.apply(Move::to(Phase::Ready), now).expect("legal");
            store.write(&claim, &ready, None).await
        })
        .buffer_unordered(IN_FLIGHT);
    while let Some(written) = writes.next().await {
        anyhow::ensure!(written?, "a claim moved under the seeding");
    }
    Ok(())
}

/// A field of `INFO section`, as a number.
async fn info(conn: &MultiplexedConnection, section: &str, field: &str) -> anyhow::Result<f64> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn.clone())
        .await?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .ok_or_else(|| anyhow::anyhow!("INFO {section} has no {field}"))?;
    Ok(value.trim().parse()?)
}

async fn used_memory(conn: &MultiplexedConnection) -> anyhow::Result<f64> {
    info(conn, "memory", "used_memory").await
}

/// Redis's CPU time so far (system and user), in seconds.
async fn redis_cpu(conn: &MultiplexedConnection) -> anyhow::Result<f64> {
    Ok(info(conn, "cpu", "used_cpu_sys").await? + info(conn, "cpu", "used_cpu_user").await?)
}

/// When each bench beats: its own interval, the fleet's mean interval times a factor from 0.9
/// to 1.1, and a first beat somewhere in its first interval, so that the beats of the whole
/// fleet add up to `rate` per second, spread evenly.
#[derive(Clone, Copy, Debug)]
struct Plan {
    benches: usize,
    tasks: usize,
    /// Seconds per unit of factor: the sum of the inverse factors over the rate.
    scale: f64,
}

impl Plan {
    fn new(args: &Args) -> Plan {
        let inverse: f64 = (0..args.benches).map(|i| 1.0 / Self::factor(i)).sum();
        Plan {
            benches: args.benches,
            tasks: args.tasks,
            scale: inverse / args.rate,
        }
    }

    /// A low-discrepancy spread (the golden ratio's), so neighbours differ and the whole is even.
    fn factor(i: usize) -> f64 {
        0.9 + 0.2 * (i as f64 * 0.618_033_988_749_895).fract()
    }

    fn interval(&self, i: usize) -> Duration {
        Duration::from_secs_f64(Self::factor(i) * self.scale)
    }

    fn first(&self, i: usize) -> Duration {
        self.interval(i)
            .mul_f64((i as f64 * 0.754_877_666_246_693).fract())
    }
}

/// What one generator measured.
#[derive(Default)]
struct Sample {
    latencies: Vec<Duration>,
    /// How late the generator issued its latest beat, behind the beat's due time.
    lag: Duration,
}

/// One generator: the benches `task`, `task + tasks`, … each beating when due for `window`, on
/// a connection of its own. A beat is issued when due, whatever is still in flight.
async fn generate(
    endpoint: Endpoint,
    task: usize,
    plan: Plan,
    window: Duration,
) -> anyhow::Result<Sample> {
    let presence = Presence::new(endpoint.connect().await?, Keys::default());
    let mut due: BinaryHeap<Reverse<(Duration, usize)>> = (task..plan.benches)
        .step_by(plan.tasks)
        .map(|i| Reverse((plan.first(i), i)))
        .collect();
    let mut in_flight = FuturesUnordered::new();
    let mut sample = Sample::default();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = start.elapsed();
                if now >= window {
                    break;
                }
                while let Some(&Reverse((at, i))) = due.peek().filter(|r| r.0.0 <= now) {
                    due.pop();
                    due.push(Reverse((at + plan.interval(i), i)));
                    sample.lag = sample.lag.max(now - at);
                    let (presence, sent) = (presence.clone(), Instant::now());
                    in_flight.push(async move { presence.beat(&beat(i)).await.map(|_| sent.elapsed()) });
                }
            }
            Some(done) = in_flight.next() => sample.latencies.push(done?),
        }
    }
    while let Some(done) = in_flight.next().await {
        sample.latencies.push(done?);
    }
    Ok(sample)
}

/// One window of beats, as measured.
struct Window {
    /// Every beat's round trip, sorted.
    latencies: Vec<Duration>,
    lag: Duration,
    seconds: f64,
    /// Redis's CPU over the window, in percent of one core.
    redis_cpu: f64,
}

impl Window {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.seconds
    }

    fn at(&self, q: f64) -> Duration {
        quantile(&self.latencies, q)
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or_default()
}

/// Runs the generators on `beats` (their own runtime) for one window.
async fn window(
    beats: &Handle,
    endpoint: &Endpoint,
    conn: &MultiplexedConnection,
    args: &Args,
) -> anyhow::Result<Window> {
    let plan = Plan::new(args);
    let cpu = redis_cpu(conn).await?;
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.tasks)
        .map(|t| beats.spawn(generate(endpoint.clone(), t, plan, args.window())))
        .collect();
    let mut out = Window {
        latencies: Vec::new(),
        lag: Duration::ZERO,
        seconds: args.seconds,
        redis_cpu: 0.0,
    };
    for task in tasks {
        let sample = task.await??;
        out.latencies.extend(sample.latencies);
        out.lag = out.lag.max(sample.lag);
    }
    out.redis_cpu = (redis_cpu(conn).await? - cpu) / started.elapsed().as_secs_f64() * 100.0;
    out.latencies.sort();
    Ok(out)
}

/// The load beside the beats: the controller passing back to back, and the readers reading.
struct Load {
    passes: Vec<Duration>,
    reads: Vec<Duration>,
}

/// The loaded window: the controller and the readers start (each reader's first, cold read done
/// before), the beats run their window, then the load stops after its pass or read in flight.
async fn loaded(
    beats: &Handle,
    endpoint: &Endpoint,
    conn: &MultiplexedConnection,
    args: &Args,
    mut ctl: Controller<MultiplexedConnection, Exec>,
) -> anyhow::Result<(Window, Load)> {
    let stop = CancellationToken::new();
    let mut readers = Vec::new();
    for _ in 0..args.readers {
        let presence = Presence::new(endpoint.connect().await?, Keys::default());
        presence.read(&[]).await?;
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut reads = Vec::new();
            while !stop.is_cancelled() {
                let start = Instant::now();
                let snapshot = presence.read(&[]).await?;
                let rows: Vec<_> = snapshot
                    .benches
                    .iter()
                    .map(|b| b.row(snapshot.now))
                    .collect();
                anyhow::ensure!(rows.len() == snapshot.benches.len(), "a row per bench");
                reads.push(start.elapsed());
            }
            anyhow::Ok(reads)
        }));
    }
    let passing = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut passes = Vec::new();
            while !stop.is_cancelled() {
                passes.push(at_rest_pass(&mut ctl).await?);
            }
            anyhow::Ok(passes)
        })
    };
    let beaten = window(beats, endpoint, conn, args).await;
    stop.cancel();
    let mut load = Load {
        passes: passing.await??,
        reads: Vec::new(),
    };
    for reader in readers {
        load.reads.extend(reader.await??);
    }
    load.passes.sort();
    load.reads.sort();
    Ok((beaten?, load))
}

/// One pass, timed; the fleet is at rest (every slot ready, its bench up), so a pass that
/// powers anything on or off means the benchmark set it up wrong.
async fn at_rest_pass(
    ctl: &mut Controller<MultiplexedConnection, Exec>,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let report = ctl.pass().await?;
    let took = start.elapsed();
    anyhow::ensure!(
        report.started.is_empty() && report.stopped.is_empty() && !report.blind,
        "the fleet is not at rest: {report:?}"
    );
    Ok(took)
}

/// The memory readings, in bytes of `used_memory`.
struct Memory {
    empty: f64,
    benches: f64,
    claims: f64,
    first_pass: f64,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn print_windows(args: &Args, quiet: &Window, under: &Window, load: &Load) {
    println!(
        "{:<7}  {:>10}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>9}",
        "window", "beats/s", "beats", "p50", "p99", "p99.9", "max", "gen. lag", "Redis CPU"
    );
    for (name, w) in [("quiet", quiet), ("loaded", under)] {
        println!(
            "{:<7}  {:>10.0}  {:>8}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>8.0}%",
            name,
            w.rate(),
            w.latencies.len(),
            ms(w.at(0.5)),
            ms(w.at(0.99)),
            ms(w.at(0.999)),
            ms(w.at(1.0)),
            ms(w.lag),
            w.redis_cpu,
        );
    }
    println!(
        "load beside the loaded window: {} controller passes (median {}, worst {}), {} fleet reads by {} readers (median {}, worst {})",
        load.passes.len(),
        ms(quantile(&load.passes, 0.5)),
        ms(quantile(&load.passes, 1.0)),
        load.reads.len(),
        args.readers,
        ms(quantile(&load.reads, 0.5)),
        ms(quantile(&load.reads, 1.0)),
    );
}

fn print_targets(args: &Args, quiet: &Window, under: &Window, load: &Load, memory: &Memory) {
    let p99 = under.at(0.99);
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let per_bench = |bytes: f64| bytes / args.benches as f64;
    println!(
        "beat p99 under load: {:.2} ms (target < 5 ms) [{}]",
        p99.as_secs_f64() * 1e3,
        met(p99 < P99_TARGET)
    );
    println!(
        "beat p99 loaded/quiet: {:.2}x ({} / {})",
        p99.as_secs_f64() / quiet.at(0.99).as_secs_f64(),
        ms(p99),
        ms(quiet.at(0.99)),
    );
    println!(
        "achieved beats/s: {:.0} (target {:.0}) [{}] (quiet window: {:.0})",
        under.rate(),
        args.rate,
        met(under.rate() >= 0.99 * args.rate),
        quiet.rate(),
    );
    println!(
        "memory per bench: {:.0} bytes (its heartbeat key, join key and join-set member; used_memory {:.1} MB -> {:.1} MB)",
        per_bench(memory.benches - memory.empty),
        memory.empty / 1e6,
        memory.benches / 1e6,
    );
    println!(
        "memory per bench with its slot: {:.0} bytes after the claims, {:.0} bytes after the controller's first pass (statuses, ledgers; used_memory {:.1} MB)",
        per_bench(memory.claims - memory.empty),
        per_bench(memory.first_pass - memory.empty),
        memory.first_pass / 1e6,
    );
    println!(
        "controller pass median under load: {:.0} ms (over {} slots; 1 s is the pass interval)",
        quantile(&load.passes, 0.5).as_secs_f64() * 1e3,
        args.benches,
    );
}

/// Starts Redis, seeds, measures memory, and runs the quiet and the loaded windows.
async fn run(args: Args, beats: Handle) -> anyhow::Result<()> {
    let server = RedisServer::with(Options {
        tcp: true,
        ..Options::default()
    })?;
    let port = server.port().expect("started with tcp");
    let endpoint = Endpoint::new(format!("redis://127.0.0.1:{port}"), Duration::from_secs(60));
    let conn = endpoint.connect().await?;
    let store = ClaimStore::new(conn.clone(), Keys::default());
    println!(
        "load benchmark: {} benches in groups of {GROUP_SIZE}, {} beats/s for {} s per window from {} generators, {} readers; redis-server on 127.0.0.1:{port}{}",
        args.benches,
        args.rate,
        args.seconds,
        args.tasks,
        args.readers,
        if args.quick { " (quick)" } else { "" },
    );
    let empty = used_memory(&conn).await?;
    let step = Instant::now();
    seed_benches(&conn, args.benches).await?;
    let benches = used_memory(&conn).await?;
    let seeded = step.elapsed();
    let step = Instant::now();
    let cfg = config::parse(&yaml(args.benches), Path::new("load.yaml"))?;
    seed_claims(&store, args.benches).await?;
    let claims = used_memory(&conn).await?;
    let bound = step.elapsed();
    let mut ctl = controller(cfg, endpoint.connect().await?);
    let first = at_rest_pass(&mut ctl).await?;
    let memory = Memory {
        empty,
        benches,
        claims,
        first_pass: used_memory(&conn).await?,
    };
    let mut quiet_passes = Vec::new();
    for _ in 0..3 {
        quiet_passes.push(at_rest_pass(&mut ctl).await?);
    }
    quiet_passes.sort();
    println!(
        "seeded {} benches through the beat script in {:.1} s; bound their slots by ready claims in {:.1} s; controller's first pass {}, then {} median of 3 quiet passes",
        args.benches,
        seeded.as_secs_f64(),
        bound.as_secs_f64(),
        ms(first),
        ms(quantile(&quiet_passes, 0.5)),
    );
    let quiet = window(&beats, &endpoint, &conn, &args).await?;
    let (under, load) = loaded(&beats, &endpoint, &conn, &args, ctl).await?;
    print_windows(&args, &quiet, &under, &load);
    print_targets(&args, &quiet, &under, &load, &memory);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The generators run on a runtime of their own: a pass or a read that holds a worker for a
    // while (decoding 100 000 rows) must not hold back a beat that is due.
    let beats = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("beats")
        .enable_all()
        .build()?;
    let main = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    main.block_on(run(args, beats.handle().clone()))
}
