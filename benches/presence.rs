//! The presence benchmark (README "Benchmarks"; its speed target).
//!
//! Starts a private redis-server on a loopback port, seeds 1 000, 10 000 and 100 000 benches
//! through the real beat (one pipeline of plain commands), and prints, per size, measured in this one run: the median of
//! the fleet read through the library, of a raw MGET of the same heartbeat keys on the same
//! connection, and of a naive GET+PTTL loop (1 000 and 10 000 only), with the ratios. Then the
//! round trips per beat (counted on the connection) and the agent's peak RSS: `fleet agent`'s and
//! the small `fleet-agent`'s, as this profile builds it and as `--profile agent` does (the
//! benchmark builds that one), each the median of three runs, against the 5 MB target. Beside
//! each read's wall time, Redis's own CPU time per read (`INFO commandstats`: the `usec` of the
//! commands the read sent, a script's own calls counted once, inside it): the time every beat
//! waits behind that read. Each agent's line says how much of its RSS is its own and how much
//! mapped files.
//!
//! Then `fleet state -o json` over the largest size, end to end as a tool runs it (the binary, its
//! rows read through a pipe), beside the raw MGET.
//!
//! Run: `cargo bench --bench presence` (add `-- --quick` for one size and fewer runs, `-- --reads`
//! for the reads alone: no beats counted, no agent built or run).

mod support;

use std::time::{Duration, Instant};

use fleet::domain::name::BenchName;
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet_redis::connect::Endpoint;
use fleet_redis::counting::Counting;
use fleet_testing::{Options, RedisServer};
use redis::aio::MultiplexedConnection;

// The allocator the `fleet` binary runs with (cmd/fleet/main.rs), so what is measured here
// allocates as fleet does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = support::Args::new();
    let quick = args.quick();
    let reads_only = args.flag("--reads");
    let server = RedisServer::with(Options {
        tcp: true,
        ..Options::default()
    })?;
    let port = server.port().expect("started with tcp");
    let endpoint = Endpoint::new(format!("redis://127.0.0.1:{port}"), Duration::from_secs(60));
    let conn = endpoint.connect().await?;
    let keys = Keys::default();
    println!("fleet read benchmark: redis-server on 127.0.0.1:{port} (loopback TCP)");
    println!(
        "{:>8}  {:>12}  {:>12}  {:>12}  {:>14}  {:>10}  {:>10}  {:>10}  {:>24}",
        "benches",
        "fleet read",
        "cold read",
        "raw MGET",
        "GET+PTTL loop",
        "read/MGET",
        "cold/MGET",
        "loop/read",
        "Redis CPU read/cold/MGET"
    );
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut seeded = 0;
    let mut last_mget = None;
    for &n in sizes {
        seed(&conn, &keys, seeded, n).await?;
        seeded = n;
        let names: Vec<BenchName> = (0..n).map(bench_name).collect();
        let heartbeat_keys: Vec<String> = names.iter().map(|b| keys.heartbeat(b)).collect();
        let presence = Presence::new(conn.clone(), keys.clone());
        let runs = match (quick, n) {
            (true, _) => 5,
            (_, 100_000) => 9,
            _ => 31,
        };
        // The reader holds the registry after its first read (the warm-up): one pipeline.
        let cpu = server_usec(&conn).await?;
        let read = median(runs, || async {
            let snap = presence.read(&[]).await.expect("fleet read");
            assert_eq!(snap.benches.len(), n);
        })
        .await;
        let read_cpu = per_run(server_usec(&conn).await? - cpu, runs);
        // A fresh reader each time (a one-shot `fleet state`): the cold read (the registry, then the pipeline).
        let cpu = server_usec(&conn).await?;
        let cold = median(runs, || async {
            let fresh = Presence::new(conn.clone(), keys.clone());
            let snap = fresh.read(&[]).await.expect("cold fleet read");
            assert_eq!(snap.benches.len(), n);
        })
        .await;
        let cold_cpu = per_run(server_usec(&conn).await? - cpu, runs);
        let cpu = server_usec(&conn).await?;
        let mget = median(runs, || async {
            let mut c = conn.clone();
            let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                .arg(&heartbeat_keys)
                .query_async(&mut c)
                .await
                .expect("mget");
            assert_eq!(values.len(), n);
        })
        .await;
        let mget_cpu = per_run(server_usec(&conn).await? - cpu, runs);
        last_mget = Some((n, mget));
        let naive = if n <= 10_000 {
            Some(
                median(if n > 1_000 { 3 } else { 9 }, || async {
                    let mut c = conn.clone();
                    for key in &heartbeat_keys {
                        let _: Option<Vec<u8>> = redis::cmd("GET")
                            .arg(key)
                            .query_async(&mut c)
                            .await
                            .expect("get");
                        let _: i64 = redis::cmd("PTTL")
                            .arg(key)
                            .query_async(&mut c)
                            .await
                            .expect("pttl");
                    }
                })
                .await,
            )
        } else {
            None
        };
        let per_read = |d: Duration| d.as_secs_f64() / read.as_secs_f64();
        println!(
            "{:>8}  {:>12}  {:>12}  {:>12}  {:>14}  {:>9.2}x  {:>9.2}x  {:>10}  {:>24}",
            n,
            ms(read),
            ms(cold),
            ms(mget),
            naive.map_or("-".to_owned(), ms),
            read.as_secs_f64() / mget.as_secs_f64(),
            cold.as_secs_f64() / mget.as_secs_f64(),
            naive.map_or("-".to_owned(), |l| format!("{:.1}x", per_read(l))),
            format!("{read_cpu:.2}/{cold_cpu:.2}/{mget_cpu:.2} ms"),
        );
        if n == 10_000 {
            for (what, plan) in [("fleet read", read), ("cold read", cold)] {
                let ratio = plan.as_secs_f64() / mget.as_secs_f64();
                println!(
                    "          target at 10 000: {what} within 2x raw MGET -> {:.2}x {}",
                    ratio,
                    if ratio <= 2.0 { "MET" } else { "MISSED" }
                );
            }
        }
    }
    if let Some((n, mget)) = last_mget {
        state_end_to_end(port, n, mget, if quick { 3 } else { 5 })?;
    }
    if reads_only {
        return Ok(());
    }
    round_trips(&conn, &keys).await?;
    agents_rss(&endpoint).await?;
    Ok(())
}

/// `fleet state -o json` over the `n` benches seeded, end to end as a tool runs it (the process
/// started, its rows read from its stdout through a pipe, the process gone): the median of
/// `runs`, beside the raw `MGET` of the same keys in this process (the anchor), with the output's
/// size and the writes it took (`wchar`/`syscw` of `/proc/PID/io`, read as it ends).
fn state_end_to_end(port: u16, n: usize, mget: Duration, runs: usize) -> anyhow::Result<()> {
    use std::io::Read;
    let mut times = Vec::with_capacity(runs);
    let mut shape = (0, 0);
    for _ in 0..runs {
        let started = Instant::now();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args(["--redis", &format!("redis://127.0.0.1:{port}")])
            .args(["--timeout", "60s", "state", "-o", "json"])
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let pid = child.id();
        let mut stdout = child.stdout.take().expect("piped");
        let mut bytes = 0;
        let mut buf = vec![0u8; 1 << 16];
        let mut writes = 0;
        loop {
            let got = stdout.read(&mut buf)?;
            if got == 0 {
                break;
            }
            bytes += got;
            // The writes so far, read while the process still runs (its /proc entry goes with it).
            if let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) {
                writes = io
                    .lines()
                    .find_map(|l| l.strip_prefix("syscw: ")?.trim().parse::<u64>().ok())
                    .unwrap_or(writes);
            }
        }
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "fleet state exited {status}");
        times.push(started.elapsed());
        shape = (bytes, writes);
    }
    times.sort();
    let state = times[times.len() / 2];
    println!(
        "fleet state -o json, {n} benches, end to end: {} (median of {runs}); raw MGET {} \
         ({:.2}x); {:.1} MB of rows in {} writes or more",
        ms(state),
        ms(mget),
        state.as_secs_f64() / mget.as_secs_f64(),
        shape.0 as f64 / 1e6,
        shape.1
    );
    Ok(())
}

fn bench_name(i: usize) -> BenchName {
    BenchName::parse(&format!("bench-{i:06}")).expect("valid name")
}

/// Seeds benches `from..to` through the real beat, a thousand in flight at a time.
async fn seed(
    conn: &MultiplexedConnection,
    keys: &Keys,
    from: usize,
    to: usize,
) -> anyhow::Result<()> {
    let presence = Presence::new(conn.clone(), keys.clone());
    for chunk in (from..to).collect::<Vec<_>>().chunks(1000) {
        let beats = chunk.iter().map(|&i| Beat {
            name: bench_name(i),
            ttl: Duration::from_secs(3600),
            hold: None,
            load: Some((i % 32) as f64),
            cores: Some(16),
        });
        let writes = beats.map(|b| {
            let presence = presence.clone();
            async move { presence.beat(&b).await }
        });
        for result in futures_join(writes).await {
            result?;
        }
    }
    Ok(())
}

async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// The median of `runs` timed calls of `f`, after one untimed (a script cache, the allocator and
/// the connection's buffers warm).
async fn median<F, Fut>(runs: usize, f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    support::quantile(&support::timed(1, runs, f).await, 0.5)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Counts the round trips of 100 beats on a counting connection, and cross-checks on the
/// server: the script calls it received (`EVALSHA`, `EVAL`), which the plain beat makes none of.
async fn round_trips(conn: &MultiplexedConnection, keys: &Keys) -> anyhow::Result<()> {
    let counting = Counting::new(conn.clone());
    let presence = Presence::new(counting.clone(), keys.clone());
    let beat = Beat {
        name: bench_name(999_999),
        ttl: Duration::from_secs(30),
        hold: None,
        load: Some(1.0),
        cores: Some(4),
    };
    let before = counting.trips();
    let eval_before = eval_calls(conn).await?;
    let beats = 100;
    let start = Instant::now();
    for _ in 0..beats {
        presence.beat(&beat).await?;
    }
    let elapsed = start.elapsed();
    let trips = counting.trips() - before;
    let eval = eval_calls(conn).await? - eval_before;
    println!(
        "beat: {:.2} round trips per beat ({trips} over {beats} beats; the server saw {eval} script calls), {:.0} us mean per beat",
        trips as f64 / beats as f64,
        elapsed.as_secs_f64() * 1e6 / beats as f64
    );
    Ok(())
}

/// Redis's own CPU time so far, in µs, from the `usec` of `INFO commandstats`: the scripts'
/// (each counts the commands it calls) and the other commands' (which include those calls
/// again: Redis lists a script's commands on their own lines too).
async fn server_usec(conn: &MultiplexedConnection) -> anyhow::Result<Cpu> {
    let mut c = conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await?;
    let scripts = [
        "eval",
        "eval_ro",
        "evalsha",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
    ];
    let mut cpu = Cpu::default();
    for (name, usec) in info.lines().filter_map(usec_of) {
        if scripts.contains(&name) {
            cpu.scripts += usec;
        } else {
            cpu.commands += usec;
        }
    }
    Ok(cpu)
}

/// Redis's CPU time in µs: scripts, and every other command (a script's own calls included).
#[derive(Clone, Copy, Default)]
struct Cpu {
    scripts: u64,
    commands: u64,
}

impl std::ops::Sub for Cpu {
    type Output = u64;

    /// The CPU time between two readings. A phase that ran a script ran nothing else at the top
    /// (a cold read is one script): its scripts' time is the whole, their calls inside it.
    fn sub(self, before: Cpu) -> u64 {
        let scripts = self.scripts - before.scripts;
        if scripts > 0 {
            scripts
        } else {
            self.commands - before.commands
        }
    }
}

/// A commandstats line's command and total `usec`.
fn usec_of(line: &str) -> Option<(&str, u64)> {
    let rest = line.strip_prefix("cmdstat_")?;
    let (name, fields) = rest.split_once(':')?;
    let usec = fields
        .split(',')
        .find_map(|f| f.strip_prefix("usec="))?
        .parse()
        .ok()?;
    Some((name, usec))
}

/// Milliseconds per run of a CPU total over `runs` measured runs and the warm-up.
fn per_run(usec: u64, runs: usize) -> f64 {
    usec as f64 / 1e3 / (runs + 1) as f64
}

async fn eval_calls(conn: &MultiplexedConnection) -> anyhow::Result<u64> {
    let mut c = conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await?;
    Ok(["cmdstat_eval:calls=", "cmdstat_evalsha:calls="]
        .iter()
        .filter_map(|stat| info.lines().find_map(|l| l.strip_prefix(stat)))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum())
}

/// The agent's RSS target: under 5 MB, read strictly (5 000 kB, not 5 MiB).
const RSS_TARGET_KB: u64 = 5_000;

/// Measures the peak RSS of `fleet agent`, of `fleet-agent` as this benchmark's profile builds
/// it, and of `fleet-agent` as machines run it (built with `--profile agent`), with the ratios to
/// the target and to `fleet agent`.
async fn agents_rss(endpoint: &Endpoint) -> anyhow::Result<()> {
    let fleet = median_rss(endpoint, env!("CARGO_BIN_EXE_fleet"), &["agent"]).await?;
    fleet.print("fleet agent", None);
    let small = agent_build("release")?;
    let small = median_rss(endpoint, &small.to_string_lossy(), &[]).await?;
    small.print("fleet-agent (this profile)", Some(&fleet));
    let deployed = agent_build("agent")?;
    let deployed = median_rss(endpoint, &deployed.to_string_lossy(), &[]).await?;
    deployed.print("fleet-agent (--profile agent)", Some(&fleet));
    Ok(())
}

/// The run of median peak among three: a run's figure moves by a few hundred kB with what the
/// page cache holds.
async fn median_rss(endpoint: &Endpoint, exe: &str, verb: &[&str]) -> anyhow::Result<Rss> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(agent_rss(endpoint, exe, verb).await?);
    }
    runs.sort_by_key(|r| r.hwm);
    Ok(runs.swap_remove(1))
}

/// Builds `fleet-agent` (its own package, fleet's library without features) with `profile`, in
/// this benchmark's target directory, and returns its path.
fn agent_build(profile: &str) -> anyhow::Result<std::path::PathBuf> {
    // This benchmark runs from <target>/<profile>/deps/presence-<hash>.
    let exe = std::env::current_exe()?;
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or_else(|| anyhow::anyhow!("no target directory above {}", exe.display()))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    println!("agent: building fleet-agent with --profile {profile}");
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--profile",
            profile,
            "-p",
            "fleet-agent",
        ])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()?;
    anyhow::ensure!(status.success(), "cargo build --profile {profile} failed");
    Ok(target.join(profile).join("fleet-agent"))
}

/// An agent's memory, in kB, from `/proc/PID/status`.
struct Rss {
    /// The peak (VmHWM).
    hwm: u64,
    /// Now: the process's own pages, and the pages of the files it maps.
    anon: u64,
    file: u64,
    beats: u32,
}

impl Rss {
    fn print(&self, what: &str, against: Option<&Rss>) {
        let ratio = |kb: u64, of: u64| kb as f64 / of as f64;
        let to_fleet = against.map_or(String::new(), |f| {
            format!(", {:.2}x `fleet agent`", ratio(self.hwm, f.hwm))
        });
        println!(
            "agent: {what}: peak RSS {} kB after {} beats ({:.2}x the {} kB target{to_fleet}, {}; \
             now {} kB anonymous, {} kB of mapped files)",
            self.hwm,
            self.beats,
            ratio(self.hwm, RSS_TARGET_KB),
            RSS_TARGET_KB,
            if self.hwm < RSS_TARGET_KB {
                "MET"
            } else {
                "MISSED"
            },
            self.anon,
            self.file,
        );
    }
}

/// Runs an agent (`exe` with `verb`, then the bench's name) for twenty beats at a short interval
/// and reads its peak RSS.
async fn agent_rss(endpoint: &Endpoint, exe: &str, verb: &[&str]) -> anyhow::Result<Rss> {
    let mut child = tokio::process::Command::new(exe)
        .args(verb)
        .args(["rss-probe", "--interval", "100ms"])
        .env("FLEET_REDIS_URL", &endpoint.url)
        .env("FLEET_LOG", "debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let pid = child.id().expect("running");
    let stderr = child.stderr.take().expect("piped");
    // The agent logs each beat; twenty beats is past start-up allocation.
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut beats = 0;
    while let Some(line) =
        tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await??
    {
        if line.contains("beat written") {
            beats += 1;
            if beats == 20 {
                break;
            }
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse().ok())
            .unwrap_or(0)
    };
    // Where the memory is: the process's own (anonymous) pages, and the pages of files it maps
    // (its binary's code and data, libc), which the kernel maps in by 64 kB around each fault.
    let rss = Rss {
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
        beats,
    };
    nix_kill(pid);
    child.wait().await?;
    Ok(rss)
}

fn nix_kill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}
