//! The controller benchmark (README "Benchmarks").
//!
//! 1. One full pass over 10 000 slots (5 000 with a ready claim and a beating bench, 5 000 off
//!    with no claim): the median and worst of repeated passes, with the presence read inside it,
//!    and beside them the CPU each pass cost this process (every thread: the pass and the
//!    connection's reading) and Redis, which a busy host inflates far less than the wall time.
//! 2. The time from a bench's first UP beat to its claim's ready move, with the controller running
//!    its own loop (a pass each second): measured on the server's clock, over several slots.
//!
//! 3. With `--minute`: passes back to back for 65 s, so every slot's energy ledger falls due once
//!    at its own phase of the minute (spread, not all in one pass); their median, p99
//!    and worst, and the p99's ratio to the median (target at most 1.5x at 100 000 slots).
//!
//! Run: `cargo bench --bench controller` (add `-- --quick` for 1 000 slots, `-- --slots N` for
//! N, `-- --minute` for 3).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fleet::config;
use fleet::domain::claim::{Claim, ConditionKind, Move, Phase};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::lifecycle::Exec;
use fleet::reconcile::Controller;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet::telemetry::{Health, Metrics};
use fleet_redis::connect::Endpoint;
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, Options, RedisServer};
use redis::aio::MultiplexedConnection;
use tokio_util::sync::CancellationToken;

// The allocator `fleet serve` runs with (cmd/fleet/main.rs), so the pass measured here allocates
// as the controller's does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One group of `slots` slots whose startup runs the script `startup`.
fn yaml(slots: usize, startup: &str) -> String {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(slots as u32)
                .ungated()
                .startup(Op::sh(startup))
                .shutdown(Op::command(["true"])),
        )
        .slots("pool-a", (0..slots).map(|i| format!("bench-{i:05}")))
        .yaml()
}

fn group() -> GroupName {
    GroupName::parse("pool-a").expect("valid")
}

fn bench(i: usize) -> BenchName {
    BenchName::parse(&format!("bench-{i:05}")).expect("valid")
}

async fn server_now(store: &ClaimStore<MultiplexedConnection>) -> DateTime<Utc> {
    store.now().await.expect("TIME")
}

fn controller(
    cfg: config::Config,
    conn: &MultiplexedConnection,
) -> Controller<MultiplexedConnection, Exec> {
    let (_, rx) = tokio::sync::watch::channel(Arc::new(cfg));
    Controller::new(
        rx,
        Presence::new(conn.clone(), Keys::default()),
        ClaimStore::new(conn.clone(), Keys::default()),
        Arc::new(Exec::new(env!("CARGO_BIN_EXE_fleet"))),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    )
}

/// `mi_option_purge_delay`, which `fleet` sets to 0 at start (cmd/fleet/main.rs): the passes
/// measured here give freed pages back at once, as `fleet serve`'s do.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> anyhow::Result<()> {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options before any other thread exists, as `fleet` does.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let args = support::Args::new();
    let quick = args.quick();
    // `--slots N` measures another fleet size (fleet is sized for 100 000).
    let asked = args.value::<usize>("--slots");
    let slots = asked.unwrap_or(if quick { 1_000 } else { 10_000 });
    let server = RedisServer::with(Options {
        tcp: true,
        ..Options::default()
    })?;
    let port = server.port().expect("tcp");
    let conn = Endpoint::new(format!("redis://127.0.0.1:{port}"), Duration::from_secs(60))
        .connect()
        .await?;
    let store = ClaimStore::new(conn.clone(), Keys::default());
    let presence = Presence::new(conn.clone(), Keys::default());

    // 1. A full pass over `slots` slots.
    let cfg = config::parse(&yaml(slots, "true"), Path::new("bench.yaml"))?;
    let now = server_now(&store).await;
    let mut writes = Vec::new();
    for i in 0..slots {
        let (presence, store) = (presence.clone(), store.clone());
        writes.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let beat = Beat {
                    name: bench(i),
                    ttl: Duration::from_secs(3600),
                    hold: None,
                    load: Some(1.0),
                    cores: Some(8),
                };
                presence.beat(&beat).await.expect("beat");
                let seed = store.seed(&group(), &bench(i)).await.expect("seed");
                let c = Claim::new(
                    ClaimName::parse(&format!("bench-{i:05}-1")).expect("valid"),
                    bench(i),
                    group(),
                    None,
                    now,
                    &Default::default(),
                    None,
                );
                store.create(&c, &seed).await.expect("create");
                let booting = c.apply(Move::to(Phase::Booting), now).expect("legal");
                let ready = booting.apply(Move::to(Phase::Ready), now).expect("legal");
                store.write(&c, &ready, None).await.expect("write");
            }
        }));
    }
    for w in writes {
        w.await?;
    }
    let mut ctl = controller(cfg, &conn);
    let first = Instant::now();
    let report = ctl.pass().await?;
    let first = first.elapsed();
    assert!(
        report.started.is_empty() && report.stopped.is_empty(),
        "the seeded fleet is at rest"
    );
    let mut times = Vec::new();
    let (mut ours, mut redis) = (Vec::new(), Vec::new());
    for _ in 0..if quick { 5 } else { 15 } {
        let redis_before = redis_cpu(&conn).await?;
        let ours_before = process_cpu();
        let start = Instant::now();
        let report = ctl.pass().await?;
        times.push(start.elapsed());
        ours.push(process_cpu() - ours_before);
        redis.push(redis_cpu(&conn).await? - redis_before);
        assert_eq!(report.slots, slots);
    }
    let times = support::sorted(times);
    let (ours, redis) = (support::sorted(ours), support::sorted(redis));
    let median = |t: &[Duration]| support::quantile(t, 0.5);
    println!(
        "controller pass over {slots} slots ({} ready claims): median {:.1} ms, worst {:.1} ms, first (statuses written) {:.1} ms",
        slots / 2,
        median(&times).as_secs_f64() * 1e3,
        support::quantile(&times, 1.0).as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
    );
    println!(
        "          target: well under the 1 s pass interval -> {:.1}% of it",
        median(&times).as_secs_f64() * 100.0
    );
    println!(
        "          CPU per pass (median): this process {:.1} ms, Redis {:.1} ms",
        support::quantile(&ours, 0.5) * 1e3,
        support::quantile(&redis, 0.5) * 1e3,
    );
    if args.flag("--minute") {
        minute_of_passes(&mut ctl, &times).await?;
    }
    drop(ctl);
    let program =
        std::env::var_os("FLEET_BENCH_SERVE").unwrap_or(env!("CARGO_BIN_EXE_fleet").into());
    let Memory {
        rss,
        low,
        high,
        peak,
    } = serve_memory(&program, port, slots, 5).await?;
    let per_slot = rss * 1024.0 * 1024.0 / slots as f64;
    println!(
        "          fleet serve's memory after 5 passes: RSS {rss:.1} MB, median over the next 5 s \
         ({low:.1} to {high:.1}; {per_slot:.0} bytes a slot, {:.2}x the 2 kB target), peak \
         {peak:.1} MB ({:.2}x the RSS; target at most 1.3x)",
        per_slot / 2048.0,
        peak / rss
    );
    // FLEET_BENCH_ANCHOR: an earlier build of `fleet` (scripts/bench-anchor.sh builds one), whose
    // memory over the same store is measured in the same run, as the anchor of the figure above.
    if let Some(anchor) = std::env::var_os("FLEET_BENCH_ANCHOR") {
        let was = serve_memory(&anchor, port, slots, 5).await?;
        let (was_low, was_high, was_peak) = (was.low, was.high, was.peak);
        let was = was.rss;
        println!(
            "          the anchor ({}): RSS {was:.1} MB ({was_low:.1} to {was_high:.1}; {:.0} bytes \
             a slot), peak {was_peak:.1} MB; this build's RSS {:.2}x the anchor's",
            std::path::Path::new(&anchor).display(),
            was * 1024.0 * 1024.0 / slots as f64,
            rss / was
        );
    }

    // 2. First UP beat to the ready move, with the controller's own loop running.
    let _ = redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn.clone())
        .await;
    let n = if quick { 3 } else { 8 };
    let cfg = config::parse(&yaml(n, "true"), Path::new("bench.yaml"))?;
    let ctl = controller(cfg.clone(), &conn);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(ctl.run(
        Duration::from_secs(1),
        Duration::from_secs(5),
        shutdown.clone(),
    ));
    let mut latencies = Vec::new();
    for i in 0..n {
        let seed = store.seed(&group(), &bench(i)).await?;
        let c = Claim::new(
            ClaimName::parse(&format!("bench-{i:05}-1")).expect("valid"),
            bench(i),
            group(),
            None,
            server_now(&store).await,
            &Default::default(),
            None,
        );
        store.create(&c, &seed).await?;
        // Wait until the startup operation (a no-op) has run: the machine is "booting".
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let claims = store.read_groups(&[group()]).await?.remove(0).claims;
            let c = claims.iter().find(|x| x.slot == bench(i)).expect("claim");
            if c.operation.as_ref().is_some_and(|op| op.outcome.is_some()) {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the startup never ran");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Stagger the beat across the pass cycle.
        tokio::time::sleep(Duration::from_millis(137 * i as u64 % 1000)).await;
        let beat = Beat {
            name: bench(i),
            ttl: Duration::from_secs(3600),
            hold: None,
            load: None,
            cores: None,
        };
        let up_at = presence.beat(&beat).await?.at;
        let deadline = Instant::now() + Duration::from_secs(20);
        let ready_at = loop {
            let claims = store.read_groups(&[group()]).await?.remove(0).claims;
            let c = claims.iter().find(|x| x.slot == bench(i)).expect("claim");
            if c.phase == Phase::Ready {
                break c
                    .condition(ConditionKind::Ready)
                    .expect("ready condition")
                    .last_transition_time;
            }
            anyhow::ensure!(Instant::now() < deadline, "the claim never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        latencies.push((ready_at - up_at).to_std().unwrap_or_default());
    }
    shutdown.cancel();
    running.await?;
    let latencies = support::sorted(latencies);
    println!(
        "first UP beat -> ready move ({n} slots, server clock): median {:.0} ms, worst {:.0} ms (target: within the 1 s pass interval)",
        support::quantile(&latencies, 0.5).as_secs_f64() * 1e3,
        support::quantile(&latencies, 1.0).as_secs_f64() * 1e3,
    );
    Ok(())
}

/// A field of a process's `/proc/PID/status`, in MB (0 when it cannot be read).
fn status_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = (status.lines())
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// `fleet serve`'s memory in MB: its RSS's median, lowest and highest over five passes, and
/// its peak.
struct Memory {
    rss: f64,
    low: f64,
    high: f64,
    peak: f64,
}

/// A loopback address no one listens on now, for a child to bind.
fn free_address() -> anyhow::Result<std::net::SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// How many passes a `fleet serve` has made, from its `/metrics` (0 while it answers nothing).
async fn passes_of(metrics: std::net::SocketAddr) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(metrics).await else {
        return 0;
    };
    let mut text = String::new();
    let asked = stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
    if asked.is_err() || stream.read_to_string(&mut text).await.is_err() {
        return 0;
    }
    (text.lines())
        .find_map(|l| l.strip_prefix("fleet_pass_seconds_count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// `fleet serve` over the store as section 1 left it, in a process of its own: its RSS once it
/// has made `passes` passes (what an operator's `ps` shows of the controller at rest: its
/// configuration, its memory of every slot, the large groups' held claims), and its peak.
/// `program` is `fleet` itself, or (FLEET_BENCH_SERVE) another build or a wrapper that runs it
/// under a heap profiler, to see where the memory goes.
async fn serve_memory(
    program: &std::ffi::OsStr,
    port: u16,
    slots: usize,
    passes: u64,
) -> anyhow::Result<Memory> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, yaml(slots, "true"))?;
    let (metrics, grpc) = (free_address()?, free_address()?);
    let mut child = tokio::process::Command::new(program)
        .args(["serve", "--config"])
        .arg(&file)
        .args(["--redis", &format!("redis://127.0.0.1:{port}")])
        .args(["--metrics-addr", &metrics.to_string()])
        .args(["--grpc-addr", &grpc.to_string()])
        // The first pass over 100 000 slots writes every status in one call per group.
        .args(["--timeout", "60s"])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().expect("running");
    let deadline = Instant::now() + Duration::from_secs(300);
    while passes_of(metrics).await < passes {
        anyhow::ensure!(
            Instant::now() < deadline,
            "fleet serve made no {passes} passes"
        );
        anyhow::ensure!(child.try_wait()?.is_none(), "fleet serve exited");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The RSS moves with the pass cycle (a pass's reads and replies come and go), so one sample
    // says little: the median of samples every 100 ms over the next 5 s (five passes) is the
    // figure, with the lowest and highest beside it.
    let mut samples = Vec::new();
    for _ in 0..50 {
        samples.push(status_mb(pid, "VmRSS"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    samples.sort_by(f64::total_cmp);
    let memory = Memory {
        rss: samples[samples.len() / 2],
        low: samples[0],
        high: samples[samples.len() - 1],
        peak: status_mb(pid, "VmHWM"),
    };
    child.kill().await?;
    Ok(memory)
}

/// This process's CPU time so far (user and system, every thread), in seconds.
fn process_cpu() -> f64 {
    // SAFETY: getrusage writes the struct it is given and reads nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Redis's CPU time so far (`INFO cpu`: user and system of its main thread and the rest), in
/// seconds.
async fn redis_cpu(conn: &MultiplexedConnection) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut conn.clone())
        .await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_sys") + field("used_cpu_user"))
}

/// Passes back to back for 65 s, past a whole minute of the ledgers' phases: the pass times'
/// median, p99 and worst, with the p99 against the median of the passes measured before
/// (`before`, the anchor in this run).
async fn minute_of_passes<C, R>(
    ctl: &mut fleet::reconcile::Controller<C, R>,
    before: &[Duration],
) -> anyhow::Result<()>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    R: fleet::lifecycle::Runner,
{
    let until = Instant::now() + Duration::from_secs(65);
    let mut times = Vec::new();
    while Instant::now() < until {
        let start = Instant::now();
        ctl.pass().await?;
        times.push(start.elapsed());
    }
    let times = support::sorted(times);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = support::quantile(&times, 0.5);
    let p99 = support::quantile(&times, 0.99);
    println!(
        "          a minute of passes ({} back to back, every energy ledger due once at its phase): median {:.1} ms, p99 {:.1} ms, worst {:.1} ms",
        times.len(),
        ms(median),
        ms(p99),
        ms(support::quantile(&times, 1.0)),
    );
    println!(
        "          p99 / median: {:.2}x (target at most 1.5x); the minute's median / the quiet passes' median: {:.2}x",
        p99.as_secs_f64() / median.as_secs_f64(),
        median.as_secs_f64() / support::quantile(before, 0.5).as_secs_f64(),
    );
    Ok(())
}
