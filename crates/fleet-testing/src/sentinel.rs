//! A private Redis Sentinel setup on loopback: one primary, one replica and three sentinels,
//! started from the installed `redis-server` (Debian has no separate sentinel binary:
//! `redis-server sentinel.conf --sentinel`, one writable configuration per sentinel). Everything
//! is killed, and its directory removed, when the set drops.
//!
//! A sentinel learns the replica only from the primary's `INFO`, and the other sentinels only
//! from their hello messages, so [`SentinelSet::start`] returns once every sentinel lists the
//! replica with its link up and knows the two others: before that a killed primary would not be
//! replaced. Sentinels judge a primary down after two seconds (`down-after-milliseconds 2000`,
//! see `SentinelSet::config` for why not one); a failover then takes a few seconds. Every
//! wait polls, bounded.
//!
//! Long: one setup, started, failed over, held back and waited on; a sentinel's configuration
//! and the harness's own connections to every part of it belong with it.
//!
//! [`SentinelOptions`] give the primary and the replica an ACL user, the sentinels a password
//! (or a user) of their own, and TLS everywhere (`port 0`, `tls-port`, `tls-replication yes`,
//! the sentinels too): a `rediss+sentinel://` URL with `--redis-ca`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::{Options, RedisServer, ServerError, TestCa, binary, free_port, wait_for_keeping};
use fleet_redis::connect::Endpoint;

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "mymaster";

/// How long the sentinels may take to know the replica and each other.
const SETTLE: Duration = Duration::from_secs(30);
/// How long a failover may take, from the kill to the sentinels naming the new primary.
const FAILOVER: Duration = Duration::from_secs(30);
/// How often the waits ask.
const POLL: Duration = Duration::from_millis(50);

/// How to start a set.
#[derive(Clone, Debug, Default)]
pub struct SentinelOptions {
    /// The only user of the primary and the replica, with its password (the default user
    /// off; `default` itself: the default user with that password, `requirepass`); the sentinels
    /// monitor as that user. `None`: the default user, no password.
    pub user: Option<(String, String)>,
    /// The sentinels' own credentials: a user (`None`: the default user, by `requirepass`) and
    /// its password. The sentinels authenticate to each other with them (`sentinel
    /// sentinel-user`, `sentinel sentinel-pass`). `None`: the sentinels ask for no password.
    pub sentinel_auth: Option<(Option<String>, String)>,
    /// Every server and sentinel speaks TLS only, with a private CA ([`TestCa`]).
    pub tls: bool,
}

/// A primary, its replica and three sentinels.
pub struct SentinelSet {
    servers: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    options: SentinelOptions,
    /// The CA of the servers' certificate, with TLS.
    ca: Option<TestCa>,
    /// The replica `hold_replication` holds back, until the next kill or release.
    held: Option<u16>,
}

/// A failover as the sentinels told it.
#[derive(Clone, Debug)]
pub struct Failover {
    pub from: u16,
    pub to: u16,
    /// From the kill to the first sentinel naming the new primary.
    pub took: Duration,
}

struct Sentinel {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SentinelSet {
    /// Starts the set with Redis's default user (no password).
    pub async fn start() -> Result<Self, ServerError> {
        Self::with(SentinelOptions::default()).await
    }

    /// Starts the set whose primary and replica know only `user` with `password` (the default
    /// user off); the sentinels monitor as that user and have no password of their own.
    pub async fn with_user(user: &str, password: &str) -> Result<Self, ServerError> {
        Self::with(SentinelOptions {
            user: Some((user.to_owned(), password.to_owned())),
            ..SentinelOptions::default()
        })
        .await
    }

    /// Starts the set as `options` say.
    pub async fn with(options: SentinelOptions) -> Result<Self, ServerError> {
        let ca = if options.tls {
            Some(TestCa::new()?)
        } else {
            None
        };
        let tls = ca.as_ref().map(|ca| ca.files().clone());
        let acl: Vec<String> = match &options.user {
            None => Vec::new(),
            Some((u, p)) if u == "default" => vec!["--requirepass".to_owned(), p.clone()],
            Some((u, p)) => {
                let mut acl: Vec<String> = ["--user", u, "on", &format!(">{p}"), "~*", "&*"]
                    .map(str::to_owned)
                    .to_vec();
                acl.extend(["+@all", "--user", "default", "off"].map(str::to_owned));
                acl
            }
        };
        let primary = RedisServer::with(Options {
            tcp: true,
            aof: false,
            args: acl.clone(),
            tls: tls.clone(),
            cluster_bus: false,
            conf: None,
        })?;
        let port = primary.port().expect("started with tcp");
        let replica = RedisServer::with(Options {
            tcp: true,
            aof: false,
            args: replica_args(&acl, port, options.user.as_ref()),
            tls,
            cluster_bus: false,
            conf: None,
        })?;
        let mut set = SentinelSet {
            servers: vec![primary, replica],
            sentinels: Vec::new(),
            options,
            ca,
            held: None,
        };
        for _ in 0..3 {
            let sentinel = set.start_sentinel(port)?;
            set.sentinels.push(sentinel);
        }
        set.settle().await?;
        Ok(set)
    }

    /// The Sentinel URL of the set: `redis+sentinel://[user:password@]127.0.0.1:P1,…/mymaster`
    /// (`rediss+sentinel://` with TLS).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!(
            "{}+sentinel://{}{}/{MASTER}",
            self.scheme(),
            self.userinfo(),
            hosts.join(",")
        )
    }

    /// An endpoint for the set's URL, trusting the set's CA, with a generous timeout for slow
    /// CI machines.
    pub fn endpoint(&self) -> Endpoint {
        let mut endpoint = Endpoint::new(self.url(), Duration::from_secs(10));
        endpoint.ca_file = self.ca().map(Path::to_path_buf);
        endpoint
    }

    /// The CA file a client must trust (`--redis-ca`), with TLS.
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_ref().map(TestCa::ca)
    }

    /// A URL of the server on `port`, with the set's user (`rediss://` with TLS: reach it
    /// through [`SentinelSet::direct`], or trust [`SentinelSet::ca`]).
    pub fn direct_url(&self, port: u16) -> String {
        format!("{}://{}127.0.0.1:{port}", self.scheme(), self.userinfo())
    }

    /// A connection to the server on `port`, as the set's user (in TLS with TLS).
    pub async fn direct(&self, port: u16) -> redis::RedisResult<MultiplexedConnection> {
        self.connection(&self.direct_url(port)).await
    }

    /// A connection to the sentinel on `port`, with the sentinels' own credentials.
    pub async fn sentinel(&self, port: u16) -> redis::RedisResult<MultiplexedConnection> {
        let userinfo = match &self.options.sentinel_auth {
            Some((user, password)) => format!("{}:{password}@", user.as_deref().unwrap_or("")),
            None => String::new(),
        };
        self.connection(&format!("{}://{userinfo}127.0.0.1:{port}", self.scheme()))
            .await
    }

    fn scheme(&self) -> &'static str {
        if self.options.tls { "rediss" } else { "redis" }
    }

    fn userinfo(&self) -> String {
        match &self.options.user {
            Some((u, p)) => format!("{u}:{p}@"),
            None => String::new(),
        }
    }

    /// The last `lines` lines of every sentinel's log, each named by its port: what they saw,
    /// for a failure's message.
    pub fn sentinel_logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for s in &self.sentinels {
            let log = std::fs::read_to_string(s.dir.path().join("log")).unwrap_or_default();
            let all: Vec<&str> = log.lines().collect();
            for line in &all[all.len().saturating_sub(lines)..] {
                out.push_str(&format!("sentinel {}: {line}\n", s.port));
            }
        }
        out
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The port of the primary, as the first sentinel that answers names it.
    pub async fn primary_port(&self) -> Result<u16, ServerError> {
        for s in &self.sentinels {
            if let Ok(port) = self.named_primary(s.port).await {
                return Ok(port);
            }
        }
        Err(ServerError::Sentinel("no sentinel names a primary".into()))
    }

    /// Kills the primary (SIGKILL) and waits until every sentinel names the replica in its
    /// place and the replica says it is the primary.
    pub async fn kill_primary(&mut self) -> Result<Failover, ServerError> {
        let from = self.primary_port().await?;
        let server = self
            .servers
            .iter_mut()
            .find(|s| s.port() == Some(from))
            .ok_or_else(|| ServerError::Sentinel(format!("no server of the set on {from}")))?;
        let killed = Instant::now();
        server.kill();
        if let Some(replica) = self.held {
            self.drop_held_stream(replica).await?;
        }
        let mut took = None;
        let to = poll(
            FAILOVER,
            "the sentinels to name a new primary",
            async || {
                let mut named = Vec::new();
                for s in &self.sentinels {
                    named.push(self.named_primary(s.port).await.ok());
                }
                if let Some(Some(new)) = named.iter().find(|n| n.is_some_and(|p| p != from)) {
                    took.get_or_insert_with(|| killed.elapsed());
                    if named.iter().all(|n| *n == Some(*new)) && self.role(*new).await == "master" {
                        return Some(*new);
                    }
                }
                None
            },
        )
        .await?;
        Ok(Failover {
            from,
            to,
            took: took.unwrap_or_else(|| killed.elapsed()),
        })
    }

    /// Starts the server that the last failover left dead again, empty, as a replica of the
    /// primary the sentinels name, and waits until the set is one primary and one replica again
    /// (`wait_whole`), so `kill_primary` can fail over once more. (A sentinel would turn a
    /// returning old primary into a replica by itself, but only after it has served as an empty
    /// primary for a moment; starting it with `replicaof` leaves no such moment.) Returns the
    /// restarted server's port.
    ///
    /// Sentinels start no failover of a primary within twice `failover-timeout` (10 s here) of
    /// the last one they took part in: a `kill_primary` sooner than that waits for it.
    pub async fn restart_old_primary_as_replica(&mut self) -> Result<u16, ServerError> {
        let primary = self.primary_port().await?;
        let user = self.options.user.clone();
        let server = self
            .servers
            .iter_mut()
            .find(|s| s.port() != Some(primary))
            .ok_or_else(|| ServerError::Sentinel("the set has no server to restart".into()))?;
        let port = server
            .port()
            .ok_or_else(|| ServerError::Sentinel("a server of the set has no port".into()))?;
        server.options.args = replica_args(&server.options.args, primary, user.as_ref());
        server.restart()?;
        self.wait_whole().await?;
        Ok(port)
    }

    /// Makes the replica lag on demand, as asynchronous replication can: it goes on receiving
    /// the primary's stream but applies none of it (`CLIENT PAUSE WRITE` on the replica pauses
    /// its link to the primary as well), so every write the primary acknowledges from now on is
    /// missing on the replica, and a `kill_primary` loses it; the primary still counts the
    /// replica as connected. It lasts until `kill_primary` (which ends it once the replica has
    /// dropped the dead primary's stream), [`SentinelSet::release_replication`], or `bound`.
    ///
    /// The pause holds the sentinels' own writes to the replica too (their hello `PUBLISH`, and
    /// every command behind it on their link): a hold longer than `down-after-milliseconds` (2 s)
    /// can make them judge the replica down for a moment, and the failover then waits for them.
    pub async fn hold_replication(&mut self, bound: Duration) -> Result<(), ServerError> {
        let primary = self.primary_port().await?;
        let replica = self
            .servers
            .iter()
            .filter_map(RedisServer::port)
            .find(|p| *p != primary)
            .ok_or_else(|| ServerError::Sentinel("the set has no replica".into()))?;
        let asked = async {
            let mut c = self.direct(replica).await?;
            redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(bound.as_millis().to_string())
                .arg("WRITE")
                .query_async::<()>(&mut c)
                .await
        };
        asked
            .await
            .map_err(|e| ServerError::Sentinel(format!("pausing the replica on {replica}: {e}")))?;
        self.held = Some(replica);
        Ok(())
    }

    /// After the primary's kill, waits until the held replica says its link to the primary is
    /// down, then ends the hold. The replica dropped the stream it had received and not applied
    /// when it closed the link (Redis frees a primary's connection that is blocked, and with it
    /// what it had not run), so the writes held back are lost, as in a real failover; and the
    /// sentinels' commands run again, so they can promote it.
    async fn drop_held_stream(&mut self, replica: u16) -> Result<(), ServerError> {
        poll(
            FAILOVER,
            "the held replica to see its primary gone",
            async || {
                let mut c = self.direct(replica).await.ok()?;
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut c)
                    .await
                    .ok()?;
                info.lines()
                    .any(|l| l.trim() == "master_link_status:down")
                    .then_some(())
            },
        )
        .await?;
        self.release_replication().await;
        Ok(())
    }

    /// Ends a [`SentinelSet::hold_replication`]: every server of the set that answers applies
    /// again (`CLIENT UNPAUSE`).
    pub async fn release_replication(&mut self) {
        self.held = None;
        let ports: Vec<u16> = self.servers.iter().filter_map(RedisServer::port).collect();
        for port in ports {
            if let Ok(mut c) = self.direct(port).await {
                let _: redis::RedisResult<()> = redis::cmd("CLIENT")
                    .arg("UNPAUSE")
                    .query_async(&mut c)
                    .await;
            }
        }
    }

    /// Waits until the set is whole again, as the servers and the sentinels both tell it: every
    /// sentinel names one primary, which says it is one (`ROLE`) and counts the other server as
    /// an online replica (`INFO replication`); that server says it replicates the primary with
    /// its link up; and every sentinel lists it as a replica (flags `slave` alone, link `ok`).
    /// Returns the replica's port.
    ///
    /// Which server is the primary is read again at every poll, not fixed when the wait began:
    /// the sentinels may fail over once more meanwhile (a just-promoted primary judged down
    /// before its first ping was answered, with `down-after-milliseconds` at the 1 s ping
    /// period: see `config`), and the restarted server is then the primary. The wait that
    /// expected the restarted server among the replicas went stale on it and timed out after 30
    /// s (the Sentinel chaos test's flake, seed 15).
    async fn wait_whole(&self) -> Result<u16, ServerError> {
        let ports: Vec<u16> = self.servers.iter().filter_map(RedisServer::port).collect();
        let mut last = String::new();
        let waited = poll(
            SETTLE,
            "the set to be one primary and its replica again",
            async || match self.whole(&ports).await {
                Ok(replica) => Some(replica),
                Err(why) => {
                    last = why;
                    None
                }
            },
        )
        .await;
        waited.map_err(|e| ServerError::Sentinel(format!("{e}; last: {last}")))
    }

    /// One look at the set for `wait_whole`: the replica's port, or what is not whole yet.
    async fn whole(&self, ports: &[u16]) -> Result<u16, String> {
        let mut named = Vec::new();
        for s in &self.sentinels {
            named.push(self.named_primary(s.port).await.ok());
        }
        let primary = match named.first() {
            Some(Some(p)) if named.iter().all(|n| *n == Some(*p)) => *p,
            _ => return Err(format!("the sentinels name {named:?}")),
        };
        let replica = *ports
            .iter()
            .find(|p| **p != primary)
            .ok_or("the set has one server")?;
        if self.role(primary).await != "master" {
            return Err(format!("{primary}, named primary, is not one (ROLE)"));
        }
        let info = |port: u16| async move {
            let mut c = self.direct(port).await.map_err(|e| e.to_string())?;
            redis::cmd("INFO")
                .arg("replication")
                .query_async::<String>(&mut c)
                .await
                .map_err(|e| e.to_string())
        };
        if !super::online_replicas(&info(primary).await?).contains(&replica) {
            return Err(format!(
                "{primary} does not count {replica} an online replica"
            ));
        }
        let own = info(replica).await?;
        let replicates = own.contains(&format!("master_port:{primary}"))
            && own.lines().any(|l| l.trim() == "master_link_status:up");
        if !replicates {
            return Err(format!(
                "{replica} does not replicate {primary} with its link up"
            ));
        }
        let wanted = replica.to_string();
        for s in &self.sentinels {
            let replicas = self
                .replicas_seen_by(s.port)
                .await
                .ok_or_else(|| format!("sentinel {} cannot be asked", s.port))?;
            let listed = replicas.iter().any(|r| {
                r.get("port") == Some(&wanted)
                    && r.get("flags").map(String::as_str) == Some("slave")
                    && r.get("master-link-status").map(String::as_str) == Some("ok")
            });
            if !listed {
                let seen: Vec<_> = replicas
                    .iter()
                    .map(|r| (r.get("port"), r.get("flags"), r.get("master-link-status")))
                    .collect();
                return Err(format!("sentinel {} lists {seen:?}", s.port));
            }
        }
        Ok(replica)
    }

    /// What the server on `port` says it is (`master`, `slave`), or the error.
    async fn role(&self, port: u16) -> String {
        let asked = async {
            let mut c = self.direct(port).await?;
            let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut c).await?;
            match role.first() {
                Some(redis::Value::BulkString(r)) => Ok(String::from_utf8_lossy(r).into_owned()),
                _ => Ok("?".to_owned()),
            }
        };
        asked
            .await
            .unwrap_or_else(|e: redis::RedisError| e.to_string())
    }

    /// The replicas one sentinel lists (`SENTINEL REPLICAS`), each as its field map; `None`
    /// when the sentinel cannot be asked yet.
    async fn replicas_seen_by(
        &self,
        port: u16,
    ) -> Option<Vec<std::collections::HashMap<String, String>>> {
        let mut c = self.sentinel(port).await.ok()?;
        redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query_async(&mut c)
            .await
            .ok()
    }

    /// The primary's port as the sentinel on `port` names it.
    async fn named_primary(&self, port: u16) -> redis::RedisResult<u16> {
        let mut c = self.sentinel(port).await?;
        let (_, p): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query_async(&mut c)
            .await?;
        Ok(p)
    }

    /// One of the harness's own connections, bounded, trusting the set's CA.
    async fn connection(&self, url: &str) -> redis::RedisResult<MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)));
        super::client(url, self.ca())?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Starts one sentinel on a free port, with its own writable configuration: a port taken
    /// between picking and binding is tried again.
    fn start_sentinel(&self, primary: u16) -> Result<Sentinel, ServerError> {
        let mut last_log = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("fleet-sentinel-")
                .tempdir()
                .map_err(ServerError::TempDir)?;
            let port = free_port().ok_or_else(|| ServerError::Sentinel("no free port".into()))?;
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(&conf, self.config(dir.path(), port, primary))
                .map_err(ServerError::TempDir)?;
            let mut child = Command::new(binary())
                .arg(&conf)
                .arg("--sentinel")
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|source| ServerError::Missing {
                    binary: binary(),
                    source,
                })?;
            let stdout = child.stdout.take().expect("stdout is piped");
            match wait_for_keeping(stdout, "+monitor master", Some(dir.path().join("log"))) {
                Ok(()) => {
                    return Ok(Sentinel { child, port, dir });
                }
                Err(log) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = log;
                }
            }
        }
        Err(ServerError::NotReady { log: last_log })
    }

    /// A sentinel's configuration: its port (with TLS the TLS port, and no plain one), the
    /// primary it monitors and as which user, and its own credentials.
    ///
    /// `down-after-milliseconds` is 2 s, above the sentinels' 1 s ping period. At 1 s a link a
    /// sentinel makes anew (at every `+switch-master`, to the new primary and its replica)
    /// counted as unanswered from its creation while its first ping went out only after the
    /// period: it read `+sdown` about a second after every promotion, for a moment, and twice
    /// in a chaos run two sentinels agreed, and failed the just-promoted primary over again
    /// (sentinel logs, seed 15). A failover takes about a second longer.
    fn config(&self, dir: &Path, port: u16, primary: u16) -> String {
        let mut text = format!("bind 127.0.0.1\ndaemonize no\ndir {}\n", dir.display());
        match &self.ca {
            Some(ca) => {
                text.push_str(&format!("port 0\ntls-port {port}\n"));
                text.push_str(&ca.files().config_lines());
            }
            None => text.push_str(&format!("port {port}\n")),
        }
        text.push_str(&format!(
            "sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 2000\n\
             sentinel failover-timeout {MASTER} 5000\n\
             sentinel parallel-syncs {MASTER} 1\n"
        ));
        if let Some((u, p)) = &self.options.user {
            text.push_str(&format!(
                "sentinel auth-user {MASTER} {u}\nsentinel auth-pass {MASTER} {p}\n"
            ));
        }
        match &self.options.sentinel_auth {
            None => {}
            Some((None, p)) => {
                text.push_str(&format!("requirepass {p}\nsentinel sentinel-pass {p}\n"));
            }
            Some((Some(u), p)) => text.push_str(&format!(
                "user default off\nuser {u} on >{p} ~* &* +@all\n\
                 sentinel sentinel-user {u}\nsentinel sentinel-pass {p}\n"
            )),
        }
        text
    }

    /// Waits until the primary counts its replica online, and every sentinel lists the replica
    /// with its link up and knows the two others.
    async fn settle(&self) -> Result<(), ServerError> {
        let primary = self.servers[0]
            .port()
            .ok_or_else(|| ServerError::Sentinel("the primary has no port".into()))?;
        poll(
            SETTLE,
            "the sentinels to know the replica and each other",
            async || {
                let mut c = self.direct(primary).await.ok()?;
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut c)
                    .await
                    .ok()?;
                if super::online_replicas(&info).is_empty() {
                    return None;
                }
                for s in &self.sentinels {
                    let replicas = self.replicas_seen_by(s.port).await?;
                    let ready = replicas.iter().any(|r| {
                        r.get("flags").map(String::as_str) == Some("slave")
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                    });
                    let mut c = self.sentinel(s.port).await.ok()?;
                    let master: std::collections::HashMap<String, String> = redis::cmd("SENTINEL")
                        .arg("MASTER")
                        .arg(MASTER)
                        .query_async(&mut c)
                        .await
                        .ok()?;
                    let others = master.get("num-other-sentinels").map(String::as_str);
                    if !ready || others != Some("2") {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await
    }
}

/// Polls `check` every `POLL` until it gives a value, within `bound`.
async fn poll<T>(
    bound: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Result<T, ServerError> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Ok(Some(value)) = tokio::time::timeout_at(deadline, check()).await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ServerError::Sentinel(format!(
                "timed out after {bound:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The arguments of a server that starts as a replica of the primary on `primary`: `args`
/// without any earlier `--replicaof host port`, `--masteruser u` or `--masterauth p`, then those
/// for `primary` and the set's user.
fn replica_args(args: &[String], primary: u16, user: Option<&(String, String)>) -> Vec<String> {
    let mut kept = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--replicaof" => i += 3,
            "--masteruser" | "--masterauth" => i += 2,
            _ => {
                kept.push(args[i].clone());
                i += 1;
            }
        }
    }
    kept.extend([
        "--replicaof".into(),
        "127.0.0.1".into(),
        primary.to_string(),
    ]);
    if let Some((u, p)) = user {
        kept.extend([
            "--masteruser".into(),
            u.clone(),
            "--masterauth".into(),
            p.clone(),
        ]);
    }
    kept
}
