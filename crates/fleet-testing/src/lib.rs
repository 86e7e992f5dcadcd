//! fleet's test support: a real `redis-server`, started privately, for tests and benchmarks, and
//! the configuration files they give fleet (`fixture`).
//!
//! Each server lives in its own temporary directory and listens on a unix socket there (or on a
//! free loopback port); it is killed, and its directory removed, when the handle drops. A missing
//! binary is an error with an install hint: tests fail on it, never skip.
//!
//! - [`fixture`]: configuration files built, not written by hand.
//! - `sentinel`, `cluster`: a private Sentinel setup and a private Redis Cluster on loopback;
//!   `tls`: a private CA and certificates for their TLS forms.
//! - [`kube`]: a real Kubernetes control plane on loopback, built from its Go modules.
//! - [`agent`]: an agent binary run as a machine runs it; [`dist`]: `make dist`'s archives as
//!   the tests make and install them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use fleet_redis::connect::Endpoint;

pub mod agent;
mod cluster;
pub mod dist;
pub mod fixture;
pub mod kube;
mod sentinel;
mod tls;
pub use cluster::{ClusterOptions, RedisCluster, SlotMove};
pub use fixture::Fixture;
pub use sentinel::{Failover, MASTER, SentinelOptions, SentinelSet};
pub use tls::{TestCa, TlsFiles};

/// How long a fresh server may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The environment variable that names another `redis-server` binary.
pub const SERVER_ENV: &str = "FLEET_REDIS_SERVER";

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "redis-server was not found ({binary}): install it (apt-get install redis-server) \
         or name the binary in {SERVER_ENV}"
    )]
    Missing {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("openssl was not found: install it (apt-get install openssl)")]
    OpensslMissing(#[source] std::io::Error),
    #[error("making the test certificates: {0}")]
    Tls(String),
    #[error("creating the server's temporary directory")]
    TempDir(#[source] std::io::Error),
    #[error("copying the configuration file {path} into the server's directory")]
    Conf {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("redis-server did not become ready within {READY_TIMEOUT:?}; its output:\n{log}")]
    NotReady { log: String },
    #[error("the Sentinel setup: {0}")]
    Sentinel(String),
    #[error("the Redis Cluster: {0}")]
    Cluster(String),
    #[error("the Kubernetes control plane: {0}")]
    Kube(String),
}

/// How to start a server.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Listen on a free loopback TCP port as well as the unix socket.
    pub tcp: bool,
    /// Keep an append-only file (`appendonly yes`, `appendfsync no`). Production runs
    /// `everysec`, but then Redis may postpone writing the file behind a slow fsync, and a kill
    /// loses those writes; a test that kills its server must get back every write it saw
    /// acknowledged. With `no`, Redis writes the file before it replies and never waits for a
    /// fsync, and a killed process loses nothing the kernel already holds.
    pub aof: bool,
    /// Extra `--name value` arguments.
    pub args: Vec<String>,
    /// A configuration file the server reads first (`redis-server FILE`): the arguments above
    /// override its `port`, `bind`, `dir` and sockets, and it keeps its own persistence
    /// (`aof` is not applied). [`DEPLOYED_CONF`] is the deployment's own.
    pub conf: Option<PathBuf>,
    /// Speak TLS only, with these files: the loopback port is then the TLS port (`--tls-port`,
    /// and `--port 0`), replication is in TLS too, and `tcp` must be set. The unix socket stays
    /// plain (Redis never speaks TLS there).
    pub tls: Option<TlsFiles>,
    /// A Redis Cluster node: its bus on a free port of its own (`--cluster-port`; the default,
    /// the port plus 10 000, may be taken or past 65 535), picked again with the client port
    /// when either is taken. A bus port fixed in `args` was tried five times over when another
    /// process held it, and the node never started (found by `tests/process/cluster.rs` in parallel).
    pub cluster_bus: bool,
}

/// The Redis configuration fleet deploys with (`deploy/base/redis.conf`): its limits are what
/// the hostile tests play against (SPEC §7.2, S8).
pub const DEPLOYED_CONF: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/base/redis.conf");

/// The loopback ports a server listens on.
#[derive(Clone, Copy, Debug, Default)]
struct Ports {
    client: Option<u16>,
    bus: Option<u16>,
}

/// A running private `redis-server`.
pub struct RedisServer {
    child: Child,
    dir: tempfile::TempDir,
    ports: Ports,
    options: Options,
}

impl RedisServer {
    /// Starts a server on a unix socket in a fresh temporary directory.
    pub fn start() -> Result<Self, ServerError> {
        Self::with(Options::default())
    }

    /// Starts a server with the given options.
    pub fn with(options: Options) -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("fleet-redis-")
            .tempdir()
            .map_err(ServerError::TempDir)?;
        let (child, ports) = spawn(dir.path(), &options, None)?;
        Ok(Self {
            child,
            dir,
            ports,
            options,
        })
    }

    /// The unix socket the server listens on.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// The server's directory (its AOF lives here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The loopback TCP port, when started with `tcp`.
    pub fn port(&self) -> Option<u16> {
        self.ports.client
    }

    /// A URL for the unix socket.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    /// An endpoint for the unix socket, with a generous timeout for slow CI machines.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new(self.url(), Duration::from_secs(10))
    }

    /// Stops the server at once (SIGKILL) and starts it again on the same directory, socket and
    /// port: with `aof`, what it had is read back.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        let (child, _) = spawn(self.dir.path(), &self.options, Some(self.ports))?;
        self.child = child;
        Ok(())
    }

    /// Stops the server cleanly (SIGTERM: it flushes its append-only file) and starts it again
    /// on the same directory, socket and port.
    pub fn restart_clean(&mut self) -> Result<(), ServerError> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        self.restart()
    }

    /// Kills the server (SIGKILL) and waits for it; the directory stays until drop.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client of `url` for the harness's own connections, trusting `ca` (for `rediss://`).
pub(crate) fn client(url: &str, ca: Option<&Path>) -> redis::RedisResult<redis::Client> {
    fleet_redis::connect::install_crypto_provider();
    match ca {
        None => redis::Client::open(url),
        Some(ca) => {
            let pem = std::fs::read(ca)?;
            redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            )
        }
    }
}

/// The ports of the replicas a primary's `INFO replication` counts online (`slaveN:ip=…,
/// port=…,state=online,…`): a `WAIT` counts no other. The primary's `ROLE` lists a replica still
/// syncing, and the replica's own `master_link_status:up` can come first.
pub(crate) fn online_replicas(info: &str) -> Vec<u16> {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .filter_map(|l| {
            l.split(',')
                .find_map(|f| f.strip_prefix("port="))
                .and_then(|p| p.trim().parse().ok())
        })
        .collect()
}

fn binary() -> String {
    std::env::var(SERVER_ENV).unwrap_or_else(|_| "redis-server".to_owned())
}

/// Starts `redis-server` in `dir`: on `fixed` ports when given (a restart), else on free ones
/// as `options` ask.
fn spawn(
    dir: &Path,
    options: &Options,
    fixed: Option<Ports>,
) -> Result<(Child, Ports), ServerError> {
    // A port picked by binding port 0 can be taken again before redis-server binds it; the
    // server then exits before it is ready, and other ports are tried.
    let mut last_log = String::new();
    for _ in 0..5 {
        let ports = fixed.unwrap_or_else(|| Ports {
            client: if options.tcp { free_port() } else { None },
            bus: if options.cluster_bus {
                free_port()
            } else {
                None
            },
        });
        let port = ports.client;
        // A TLS server listens on the port in TLS and on no plain port.
        let (plain, tls) = match (&options.tls, port) {
            (Some(_), Some(p)) => (None, Some(p)),
            (_, p) => (p, None),
        };
        let mut cmd = Command::new(binary());
        cmd.current_dir(dir);
        if let Some(conf) = &options.conf {
            cmd.arg(private_conf(dir, conf)?);
        }
        cmd.arg("--unixsocket")
            .arg(dir.join("redis.sock"))
            .args(["--unixsocketperm", "700", "--save", "", "--daemonize", "no"])
            .args(["--bind", "127.0.0.1"])
            // A replica's full sync through a file, not a socket. A diskless sync waits 5 s by
            // default for more replicas to share the transfer (every wait for a replica's link
            // was 5 s longer), and with no delay the primary streams nothing to the replica
            // until its first acknowledgement, up to a second after the sync: a `WAIT` then
            // counted no replica though the primary listed it online (tests/process/replicas.rs failed
            // so one run in three). The files are a few bytes, in the server's own directory.
            .args(["--repl-diskless-sync", "no"])
            .arg("--dir")
            .arg(dir)
            .arg("--port")
            .arg(plain.map_or("0".to_owned(), |p| p.to_string()));
        if let (Some(files), Some(tls)) = (&options.tls, tls) {
            cmd.arg("--tls-port").arg(tls.to_string());
            cmd.args(files.server_args());
        }
        if let Some(bus) = ports.bus {
            cmd.arg("--cluster-port").arg(bus.to_string());
        }
        if options.conf.is_some() {
            // The file's own `logfile ""` and persistence stand.
        } else if options.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "no"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        cmd.args(&options.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|source| ServerError::Missing {
            binary: binary(),
            source,
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        match wait_ready(stdout) {
            Ok(()) => return Ok((child, ports)),
            Err(log) => {
                let _ = child.kill();
                let _ = child.wait();
                last_log = log;
            }
        }
    }
    Err(ServerError::NotReady { log: last_log })
}

/// A copy of the configuration file `conf` in the server's directory, without its `dir`: Redis
/// changes to that directory as it reads the line (`/data` in the deployment's file), before any
/// argument could name another.
fn private_conf(dir: &Path, conf: &Path) -> Result<PathBuf, ServerError> {
    let failed = |source| ServerError::Conf {
        path: conf.to_owned(),
        source,
    };
    let text = std::fs::read_to_string(conf).map_err(failed)?;
    let kept: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("dir "))
        .map(|l| format!("{l}\n"))
        .collect();
    let copy = dir.join("redis.conf");
    std::fs::write(&copy, kept).map_err(failed)?;
    Ok(copy)
}

/// Reads the server's log until it says it is ready; the lines after that are drained by the
/// same thread so the server never blocks on a full pipe.
fn wait_ready(stdout: std::process::ChildStdout) -> Result<(), String> {
    wait_for(stdout, "ready to accept connections")
}

/// Reads a log until a line contains `marker` (lowercase), then drains it.
fn wait_for(stdout: std::process::ChildStdout, marker: &'static str) -> Result<(), String> {
    wait_for_keeping(stdout, marker, None)
}

/// `wait_for`, appending every line to `keep` as well (a sentinel's log, for a failure's
/// message).
fn wait_for_keeping(
    stdout: std::process::ChildStdout,
    marker: &'static str,
    keep: Option<PathBuf>,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut log = String::new();
        let mut told = false;
        let mut kept = keep.and_then(|path| std::fs::File::create(path).ok());
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(file) = kept.as_mut() {
                use std::io::Write;
                let _ = writeln!(file, "{line}");
            }
            if !told {
                log.push_str(&line);
                log.push('\n');
                if line.to_ascii_lowercase().contains(marker) {
                    told = true;
                    let _ = tx.send(Ok(()));
                }
            }
        }
        if !told {
            let _ = tx.send(Err(log));
        }
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(result) => result,
        Err(_) => Err("(no readiness line)".to_owned()),
    }
}

fn free_port() -> Option<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    listener.local_addr().ok().map(|a| a.port())
}
