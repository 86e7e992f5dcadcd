//! The load benchmark ("100 000 benches on one Redis"; SPEC §2.5, §5.7).
//! Long: one measurement read top to bottom (seeding, the load generator, the load beside it,
//! the readings of Redis and the host, the report); its pieces serve no other bench.
//!
//! One private redis-server, one run:
//!
//! 1. Seeds `--benches` benches (100 000; 10 000 with `--quick`) through the real beat,
//!    then binds as many slots (groups of 1 000) to them by ready claims, and runs the
//!    controller's first pass. `used_memory` (`INFO memory`) before and after each step, over
//!    the bench count, is the memory per bench.
//! 2. The quiet window (the anchor): `--rate` beats/s (10 000) for `--seconds` (20; 5 with
//!    `--quick`), nothing else running. A beat is one round trip (one pipeline of plain
//!    commands), the agent's call; each bench beats at its own interval (the fleet's mean times 0.9 to 1.1, as the
//!    agent's jitter spreads a rack). A few generators, on their own connections and runtime,
//!    issue each beat when due, whatever is still in flight.
//! 3. The loaded window: the same beats while the controller passes over every slot back to back
//!    (`fleet serve`'s pass, driven as `benches/controller.rs` drives it) and readers loop as
//!    `fleet state --watch` does: the held-registry read and its rows, then `--read-interval`
//!    (1 s, the watch's default; 0: back to back), each on its own connection.
//!
//! Per window: the beats' p50/p99/p99.9/max (from the beat's issue to its answer), the rate
//! achieved (answers over the time to the last one, so a backlog lowers it), how late the
//! generators issued, Redis's and the host's CPU, Redis's busiest commands (`INFO
//! commandstats`; a script's calls count again on their own lines); then p99 loaded/quiet and the
//! target lines. The beats' TTL is an hour, so no key expires between the steps (the controller
//! would act): a TTL costs nothing, and a steady beat publishes no wake (SPEC §2.4). Everything
//! here and redis-server share the host's cores: a round trip includes waits for a core.
//!
//! Redis has CPU 0 to itself and everything else here shares CPU 1 (`--no-pin` to share both),
//! as a deployment gives Redis its own core or machine; the host's own stall meter
//! (scripts/hiccup.py) runs beside the loaded window.
//!
//! Run: `cargo bench --bench load` (`-- --quick`; `--benches N`, `--rate R`, `--seconds S`,
//! `--tasks T` generators, `--readers K`, `--read-interval S`, `--nice N` for redis-server and
//! the generators: with -10, Redis and the agents it serves are not kept waiting for a core by
//! the controller and the readers, which the two cores cannot all carry at once; `--fifo` puts
//! the generators' thread at `SCHED_FIFO`, and `--apart` runs them in a process of their own, so
//! that what a beat waits for is Redis, not the core and the address space it would share with
//! the controller on a host of two cores).

mod support;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::config::{self, Config};
use fleet::domain::claim::{Claim, Move, Phase};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::lifecycle::Exec;
use fleet::reconcile::Controller;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet::telemetry::{Health, Metrics};
use fleet_redis::connect::Endpoint;
use fleet_testing::fixture::{Group, Op, Slot};
use fleet_testing::{Fixture, Options, RedisServer};
use futures::stream::{self, FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

// The allocator the `fleet` binary runs with (cmd/fleet/main.rs), so what is measured here
// allocates as fleet does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    read_interval: f64,
    /// The niceness of redis-server and the generators' thread (0: as everything else).
    nice: i32,
    /// The generators' thread at `SCHED_FIFO` (`--fifo`): it takes CPU 1 the moment a beat is
    /// due or answered, as an agent on a machine of its own would, so the beats' waits are
    /// Redis's and the network's, not the controller's and readers' on the core they share.
    fifo: bool,
    /// The generators in a process of their own (`--apart`), as agents are: no allocator, page
    /// table or address-space lock shared with the controller and the readers.
    apart: bool,
    /// The port of a running benchmark's Redis: this process is that run's generators
    /// (`--apart`), and prints what they measured.
    generators: Option<u16>,
    /// The port of this run's Redis, once it started.
    port: Option<u16>,
    /// Redis on a core of its own and everything else on the other (the default on a host of two
    /// cores or more; `--no-pin` shares them), as a deployment gives Redis its own machine.
    pin: bool,
    quick: bool,
}

impl Args {
    fn parse() -> Args {
        let args = support::Args::new();
        let quick = args.quick();
        let value = |flag: &str| args.value::<f64>(flag);
        Args {
            benches: value("--benches")
                .map_or(if quick { 10_000 } else { 100_000 }, |n| n as usize),
            rate: value("--rate").unwrap_or(10_000.0),
            seconds: value("--seconds").unwrap_or(if quick { 5.0 } else { 20.0 }),
            tasks: value("--tasks").map_or(4, |n| n as usize).max(1),
            readers: value("--readers").map_or(2, |n| n as usize),
            read_interval: value("--read-interval").unwrap_or(1.0),
            nice: value("--nice").map_or(0, |n| n as i32),
            fifo: args.flag("--fifo"),
            apart: args.flag("--apart"),
            generators: value("--generators").map(|p| p as u16),
            port: None,
            pin: !args.flag("--no-pin") && cores() >= 2,
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
    let mut fixture = Fixture::new();
    for g in 0..benches.div_ceil(GROUP_SIZE) {
        fixture = fixture.group(
            Group::new(group_name(g).as_str())
                .min(0)
                .max(GROUP_SIZE as u32)
                .ungated()
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"])),
        );
    }
    for i in 0..benches {
        let (slot, group) = (bench_name(i), group_name(i / GROUP_SIZE));
        fixture = fixture.slot(Slot::new(slot.as_str(), group.as_str()));
    }
    fixture.yaml()
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

/// Every bench's first beat, through the real beat, `IN_FLIGHT` at a time.
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
        let (group, timings) = (group_name(g), Default::default());
        let claims: Vec<Claim> = (slots.iter())
            .map(|s| {
                let name = ClaimName::parse(&format!("{s}-1")).expect("valid name");
                Claim::new(name, s.clone(), group.clone(), None, now, &timings, None)
            })
            .collect();
        let seeds = store.seeds(&group, &slots).await?;
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

/// `INFO` of `sections`, as Redis writes it.
async fn info(conn: &MultiplexedConnection, sections: &[&str]) -> anyhow::Result<String> {
    let mut conn = conn.clone();
    Ok(redis::cmd("INFO")
        .arg(sections)
        .query_async(&mut conn)
        .await?)
}

/// A `name:value` field of an `INFO` text, as a number.
fn field(text: &str, name: &str) -> anyhow::Result<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO has no {name}"))
}

async fn used_memory(conn: &MultiplexedConnection) -> anyhow::Result<f64> {
    field(&info(conn, &["memory"]).await?, "used_memory")
}

/// What Redis and the host had spent by one instant: a window's CPU, and where Redis's went.
struct Reading {
    at: Instant,
    /// Redis's CPU time (system and user), in seconds.
    redis: f64,
    /// The host's busy and total jiffies over all its cores (`/proc/stat`).
    host: (u64, u64, u64),
    /// `INFO commandstats`: each command's calls and µs.
    commands: BTreeMap<String, (u64, u64)>,
}

impl Reading {
    async fn take(conn: &MultiplexedConnection) -> anyhow::Result<Reading> {
        let text = info(conn, &["cpu", "commandstats"]).await?;
        Ok(Reading {
            at: Instant::now(),
            redis: field(&text, "used_cpu_sys")? + field(&text, "used_cpu_user")?,
            host: host_jiffies(),
            commands: text.lines().filter_map(command_stat).collect(),
        })
    }
}

/// A commandstats line's command, calls and µs.
fn command_stat(line: &str) -> Option<(String, (u64, u64))> {
    let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
    let pairs = fields.split(',').filter_map(|f| f.split_once('='));
    let get = |key: &str| pairs.clone().find(|p| p.0 == key)?.1.parse().ok();
    Some((name.to_owned(), (get("calls")?, get("usec")?)))
}

/// The host's busy, total and stolen jiffies so far over all its cores (`/proc/stat`'s first
/// line). Steal is the time a virtual machine's cores were runnable but its host ran something
/// else: stalls no process here caused.
fn host_jiffies() -> (u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu = stat.lines().next().unwrap_or_default().split_whitespace();
    let times: Vec<u64> = cpu.skip(1).take(8).filter_map(|t| t.parse().ok()).collect();
    let idle: u64 = times.iter().skip(3).take(2).sum();
    let steal = times.get(7).copied().unwrap_or(0);
    (times.iter().sum::<u64>() - idle, times.iter().sum(), steal)
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
    /// When its last beat was answered, from its start.
    finished: Duration,
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
    sample.finished = start.elapsed();
    Ok(sample)
}

/// One window of beats, as measured.
struct Window {
    /// Every beat's round trip, sorted.
    latencies: Vec<Duration>,
    lag: Duration,
    /// From the start to the last beat's answer.
    seconds: f64,
    /// Redis's CPU, in percent of one core.
    redis_cpu: f64,
    /// The host's CPU, in percent of all its cores, and of it the steal (`host_jiffies`).
    host_cpu: f64,
    steal: f64,
    /// Where Redis's time went: the busiest commands, with their calls and µs.
    busiest: Vec<(String, u64, u64)>,
    /// Beside the loaded window: the controller's passes and the readers' reads, sorted.
    passes: Vec<Duration>,
    reads: Vec<Duration>,
}

impl Window {
    fn of(samples: Vec<Sample>, args: &Args, before: &Reading, after: &Reading) -> Window {
        let elapsed = (after.at - before.at).as_secs_f64();
        let mut busiest: Vec<(String, u64, u64)> = after
            .commands
            .iter()
            .map(|(name, &(calls, usec))| {
                let (c, u) = before.commands.get(name).copied().unwrap_or_default();
                (name.clone(), calls - c, usec - u)
            })
            .collect();
        busiest.sort_by_key(|b| Reverse(b.2));
        busiest.truncate(5);
        let (busy, total) = (after.host.0 - before.host.0, after.host.1 - before.host.1);
        let steal = after.host.2 - before.host.2;
        let mut window = Window {
            latencies: Vec::new(),
            lag: Duration::ZERO,
            seconds: args.seconds,
            redis_cpu: (after.redis - before.redis) / elapsed * 100.0,
            host_cpu: busy as f64 / total.max(1) as f64 * 100.0,
            steal: steal as f64 / total.max(1) as f64 * 100.0,
            busiest,
            passes: Vec::new(),
            reads: Vec::new(),
        };
        for sample in samples {
            window.latencies.extend(sample.latencies);
            window.lag = window.lag.max(sample.lag);
            window.seconds = window.seconds.max(sample.finished.as_secs_f64());
        }
        window.latencies.sort();
        window
    }

    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.seconds
    }

    fn at(&self, q: f64) -> Duration {
        quantile(&self.latencies, q)
    }
}

/// `q` of `sorted`, or zero when a window timed no beat.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    support::quantile(sorted, q)
}

/// Runs the generators on `beats` (their own runtime) for one window.
async fn window(
    beats: &Handle,
    endpoint: &Endpoint,
    conn: &MultiplexedConnection,
    args: &Args,
) -> anyhow::Result<Window> {
    let before = Reading::take(conn).await?;
    let samples = if let (true, Some(port)) = (args.apart, args.port) {
        apart(port).await?
    } else {
        generators(beats, endpoint, args).await?
    };
    let after = Reading::take(conn).await?;
    Ok(Window::of(samples, args, &before, &after))
}

/// The generators on `beats`, each on its own connection, for one window.
async fn generators(
    beats: &Handle,
    endpoint: &Endpoint,
    args: &Args,
) -> anyhow::Result<Vec<Sample>> {
    let plan = Plan::new(args);
    let tasks: Vec<_> = (0..args.tasks)
        .map(|t| beats.spawn(generate(endpoint.clone(), t, plan, args.window())))
        .collect();
    let mut samples = Vec::new();
    for task in tasks {
        samples.push(task.await??);
    }
    Ok(samples)
}

/// One window's generators in a process of their own (`--apart`): this benchmark again, with
/// the same arguments and `--generators PORT`, on this process's core (its affinity passes to
/// the child). What they measured comes back on its standard output, a line a generator: its lag
/// and its end in nanoseconds, then each beat's round trip.
async fn apart(port: u16) -> anyhow::Result<Vec<Sample>> {
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(std::env::args().skip(1))
        .args(["--generators", &port.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "the generators' process: {}",
        out.status
    );
    let ns = |n: &str| n.parse::<u64>().map(Duration::from_nanos);
    let mut samples = Vec::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let mut fields = line.split(' ');
        let (Some(lag), Some(finished)) = (fields.next(), fields.next()) else {
            anyhow::bail!("a generator's line without its lag and end: {line:?}");
        };
        samples.push(Sample {
            lag: ns(lag)?,
            finished: ns(finished)?,
            latencies: fields.map(ns).collect::<Result<_, _>>()?,
        });
    }
    anyhow::ensure!(
        !samples.is_empty(),
        "the generators' process printed nothing"
    );
    Ok(samples)
}

/// The generators' process (`--generators PORT`): one window against the Redis on `port`, then
/// what each generator measured, a line each, for [`apart`].
async fn generators_only(args: Args, port: u16, beats: Handle) -> anyhow::Result<()> {
    use std::io::Write;
    let endpoint = Endpoint::new(format!("redis://127.0.0.1:{port}"), Duration::from_secs(60));
    let samples = generators(&beats, &endpoint, &args).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for sample in samples {
        write!(
            out,
            "{} {}",
            sample.lag.as_nanos(),
            sample.finished.as_nanos()
        )?;
        for latency in sample.latencies {
            write!(out, " {}", latency.as_nanos())?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// The loaded window: the controller and the readers start (each reader's first, cold read done
/// before), the beats run their window, then the load stops after its pass or read in flight.
async fn loaded(
    beats: &Handle,
    endpoint: &Endpoint,
    conn: &MultiplexedConnection,
    args: &Args,
    ctl: Controller<MultiplexedConnection, Exec>,
) -> anyhow::Result<Window> {
    let stop = CancellationToken::new();
    let mut readers = Vec::new();
    for _ in 0..args.readers {
        let presence = Presence::new(endpoint.connect().await?, Keys::default());
        presence.read(&[]).await?;
        let pause = Duration::from_secs_f64(args.read_interval);
        readers.push(tokio::spawn(read_loop(presence, pause, stop.clone())));
    }
    let passing = tokio::spawn(pass_loop(ctl, stop.clone()));
    let beaten = window(beats, endpoint, conn, args).await;
    stop.cancel();
    let mut under = beaten?;
    under.passes = passing.await??;
    for reader in readers {
        under.reads.extend(reader.await??);
    }
    under.passes.sort();
    under.reads.sort();
    Ok(under)
}

/// The controller passing back to back until `stop`; the time of each pass.
async fn pass_loop(
    mut ctl: Controller<MultiplexedConnection, Exec>,
    stop: CancellationToken,
) -> anyhow::Result<Vec<Duration>> {
    let mut passes = Vec::new();
    while !stop.is_cancelled() {
        passes.push(at_rest_pass(&mut ctl).await?);
    }
    Ok(passes)
}

/// A reader: `fleet state --watch`'s frame (the fleet read and its rows), then its pause,
/// until `stop`; the time of each read.
async fn read_loop(
    presence: Presence<MultiplexedConnection>,
    pause: Duration,
    stop: CancellationToken,
) -> anyhow::Result<Vec<Duration>> {
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
        if !pause.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
    Ok(reads)
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

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn print_windows(args: &Args, quiet: &Window, under: &Window) {
    let head = "     beats/s       beats         p50         p99       p99.9         max    gen. lag   Redis CPU";
    println!("{:<7}{head}  host CPU", "window");
    for (name, w) in [("quiet", quiet), ("loaded", under)] {
        let cells = [
            format!("{:.0}", w.rate()),
            w.latencies.len().to_string(),
            ms(w.at(0.5)),
            ms(w.at(0.99)),
            ms(w.at(0.999)),
            ms(w.at(1.0)),
            ms(w.lag),
            format!("{:.0}%", w.redis_cpu),
        ];
        let cells = cells.map(|c| format!("{c:>12}")).concat();
        println!(
            "{name:<7}{cells}  {:.0}% of all cores ({:.1}% stolen)",
            w.host_cpu, w.steal
        );
    }
    for (name, w) in [("quiet", quiet), ("loaded", under)] {
        let busiest: Vec<String> = (w.busiest.iter())
            .map(|(c, calls, usec)| format!("{c} {calls} x {} us", usec / calls.max(&1)))
            .collect();
        println!("Redis's busiest commands, {name}: {}", busiest.join(", "));
    }
    let (passes, reads) = (&under.passes, &under.reads);
    println!(
        "beside the loaded window: {} controller passes (median {}, worst {}); {} fleet reads by {} readers, {} s apart (median {}, worst {})",
        passes.len(),
        ms(quantile(passes, 0.5)),
        ms(quantile(passes, 1.0)),
        reads.len(),
        args.readers,
        args.read_interval,
        ms(quantile(reads, 0.5)),
        ms(quantile(reads, 1.0)),
    );
}

/// `memory`: `used_memory` empty, with the benches, with their claims, after the first pass.
fn print_targets(args: &Args, quiet: &Window, under: &Window, memory: [f64; 4]) {
    let p99 = under.at(0.99);
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let per_bench = |i: usize| (memory[i] - memory[0]) / args.benches as f64;
    let mb = memory.map(|m| format!("{:.1} MB", m / 1e6));
    let p99_ms = p99.as_secs_f64() * 1e3;
    println!(
        "beat p99 under load: {p99_ms:.2} ms (target < 5 ms) [{}]",
        met(p99 < P99_TARGET)
    );
    let ratio = p99.as_secs_f64() / quiet.at(0.99).as_secs_f64();
    println!(
        "beat p99 loaded/quiet: {ratio:.2}x (quiet p99 {})",
        ms(quiet.at(0.99))
    );
    println!(
        "achieved beats/s: {:.0} (target {:.0}) [{}] (quiet window: {:.0})",
        under.rate(),
        args.rate,
        met(under.rate() >= 0.99 * args.rate),
        quiet.rate(),
    );
    println!(
        "memory per bench: {:.0} bytes (heartbeat key, join key, join-set member; used_memory {} -> {}); with its slot's ready claim {:.0} bytes, after the controller's first pass {:.0} bytes ({})",
        per_bench(1),
        mb[0],
        mb[1],
        per_bench(2),
        per_bench(3),
        mb[3]
    );
    println!(
        "controller pass median under load: {:.0} ms (over {} slots; the pass interval is 1 s)",
        quantile(&under.passes, 0.5).as_secs_f64() * 1e3,
        args.benches,
    );
}

/// Starts Redis; seeds the benches and their claims, measuring memory; passes once; runs the
/// quiet window and the loaded one.
async fn run(args: Args, beats: Handle) -> anyhow::Result<()> {
    let server = RedisServer::with(Options {
        tcp: true,
        ..Options::default()
    })?;
    let port = server.port().expect("started with tcp");
    let args = Args {
        port: Some(port),
        ..args
    };
    let mut niceness = renice(&server, args.nice);
    if args.fifo {
        niceness.push_str("; the generators' thread at SCHED_FIFO (a refusal leaves it as it was)");
    }
    if args.apart {
        niceness.push_str("; the generators in a process of their own");
    }
    if args.pin {
        niceness.push_str(&pin_redis(server.pid()));
    }
    let endpoint = Endpoint::new(format!("redis://127.0.0.1:{port}"), Duration::from_secs(60));
    let conn = endpoint.connect().await?;
    println!(
        "load benchmark{}: {} benches in groups of {GROUP_SIZE}, {} beats/s for {} s per window from {} generators; redis-server on 127.0.0.1:{port}{niceness}; host load average {}",
        if args.quick { " (quick)" } else { "" },
        args.benches,
        args.rate,
        args.seconds,
        args.tasks,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
    );
    let (store, mut memory) = (ClaimStore::new(conn.clone(), Keys::default()), [0.0; 4]);
    memory[0] = used_memory(&conn).await?;
    let step = Instant::now();
    seed_benches(&conn, args.benches).await?;
    memory[1] = used_memory(&conn).await?;
    let seeded = step.elapsed();
    let cfg = config::parse(&yaml(args.benches), Path::new("load.yaml"))?;
    seed_claims(&store, args.benches).await?;
    memory[2] = used_memory(&conn).await?;
    let bound = step.elapsed() - seeded;
    let mut ctl = controller(cfg, endpoint.connect().await?);
    let first = at_rest_pass(&mut ctl).await?;
    memory[3] = used_memory(&conn).await?;
    let mut quiet_passes = Vec::new();
    for _ in 0..3 {
        quiet_passes.push(at_rest_pass(&mut ctl).await?);
    }
    quiet_passes.sort();
    println!(
        "seeded the benches through the beat in {:.1} s, their slots' ready claims in {:.1} s; the controller's first pass {}, then {} (median of 3 quiet passes)",
        seeded.as_secs_f64(),
        bound.as_secs_f64(),
        ms(first),
        ms(quantile(&quiet_passes, 0.5)),
    );
    let quiet = window(&beats, &endpoint, &conn, &args).await?;
    // The host's own stall meter beside the loaded window (scripts/hiccup.py: a 1 ms sleep loop,
    // with no Redis and no fleet), on this process's core: what of a beat's wait is the host's.
    let hiccup = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/hiccup.py"))
        .arg(args.seconds.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let under = loaded(&beats, &endpoint, &conn, &args, ctl).await?;
    match hiccup.and_then(std::process::Child::wait_with_output) {
        Ok(o) => println!(
            "the host's own stalls during the loaded window (scripts/hiccup.py, 1 ms sleeps): {}",
            String::from_utf8_lossy(&o.stdout).trim()
        ),
        Err(e) => println!("the host's stall meter did not run: {e}"),
    }
    print_windows(&args, &quiet, &under);
    print_targets(&args, &quiet, &under, memory);
    Ok(())
}

/// Sets redis-server's niceness for `--nice` (the generators' thread takes it at its start), and
/// says what was set. With a negative one, Redis and the generators stand for a Redis with a core
/// of its own and agents on their own machines: the beats are then measured without the waits
/// for a core that the controller and the readers, on the same two cores, put on them.
fn renice(server: &RedisServer, nice: i32) -> String {
    if nice == 0 {
        return String::new();
    }
    // SAFETY: setpriority reads its arguments only.
    let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, server.pid() as libc::id_t, nice) };
    if set == 0 {
        format!(" and the generators at nice {nice}")
    } else {
        format!(
            " (nice {nice} refused: {}; run as root)",
            std::io::Error::last_os_error()
        )
    }
}

/// The host's cores.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Puts the calling thread on CPU `cpu`: the threads it starts after inherit it.
fn pin_self(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity read and write
    // only the set given, which lives on this stack frame.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Moves every thread of redis-server (`pid`) to CPU 0, away from this process's CPU 1, and says
/// what was done.
fn pin_redis(pid: u32) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    let mut moved = 0;
    for task in tasks.into_iter().flatten().flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: as in `pin_self`, for the thread `tid`.
        let set = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if set == 0 {
            moved += 1;
        }
    }
    format!(
        "; redis-server's {moved} threads pinned to CPU 0, this process and its children to CPU 1"
    )
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Pinned before any thread starts, so every runtime thread and every child (redis-server,
    // before it is moved to CPU 0) is on CPU 1.
    if args.pin {
        pin_self(1)?;
    }
    // The generators run on a runtime of their own: a pass or a read that holds a worker for a
    // while (decoding 100 000 rows) must not hold back a beat that is due.
    let (nice, fifo) = (args.nice, args.fifo);
    let beats = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("beats")
        .on_thread_start(move || {
            if fifo {
                let param = libc::sched_param { sched_priority: 10 };
                // SAFETY: sched_setscheduler reads the parameter given, on this stack frame. A
                // refusal (no CAP_SYS_NICE) leaves the thread as it was, which the header says.
                unsafe {
                    libc::sched_setscheduler(0, libc::SCHED_FIFO, &param);
                }
            }
            if nice != 0 {
                // SAFETY: gettid and setpriority read their arguments only. A refusal shows on
                // redis-server's setting, which `renice` reports.
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice);
                }
            }
        })
        .enable_all()
        .build()?;
    let main = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.generators {
        Some(port) => main.block_on(generators_only(args, port, beats.handle().clone())),
        None => main.block_on(run(args, beats.handle().clone())),
    }
}
