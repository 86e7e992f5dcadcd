//! A private Redis Cluster on loopback: three primaries (and, asked for, one replica each),
//! started from the installed `redis-server` and joined by `redis-cli --cluster create`.
//! Everything is killed, and its directories removed, when the cluster drops.
//!
//! Each node's cluster bus gets a free port of its own (`Options::cluster_bus`): the default,
//! the node's port plus 10 000, may be taken or beyond 65 535 for a free port picked by the
//! kernel.
//! [`RedisCluster::start`] returns once every node says `cluster_state:ok` and knows every other
//! node, so a test's first call never meets a cluster still joining. Every wait polls, bounded.
//!
//! [`ClusterOptions`] add a replica per primary, an ACL user, and TLS everywhere (`port 0`,
//! `tls-port`, `tls-cluster yes` for the bus, `tls-replication yes`; `redis-cli --tls` creates
//! it): a `rediss+cluster://` URL with `--redis-ca`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::{Options, RedisServer, ServerError, TestCa};
use fleet_redis::connect::Endpoint;

/// How long the nodes may take to agree.
const SETTLE: Duration = Duration::from_secs(30);
/// How often the waits ask.
const POLL: Duration = Duration::from_millis(50);

/// How to start a cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterOptions {
    /// Replicas per primary.
    pub replicas: usize,
    /// The only user of every node, with its password (the default user off).
    pub user: Option<(String, String)>,
    /// Every node speaks TLS only, the cluster bus too, with a private CA ([`TestCa`]).
    pub tls: bool,
}

/// A hash slot that [`RedisCluster::move_slot`] moved.
#[derive(Clone, Debug)]
pub struct SlotMove {
    pub slot: u16,
    /// The ports of the source and the target primaries.
    pub from: u16,
    pub to: u16,
    /// How many keys `MIGRATE` moved.
    pub keys_moved: usize,
    /// From `IMPORTING` to the source giving the slot up (its `SETSLOT … NODE`).
    pub took: Duration,
    /// When the source gave the slot up: from then on it redirects every call on the slot.
    pub given_up: Instant,
}

/// Three primaries, and their replicas when asked for.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    user: Option<(String, String)>,
    /// Replicas per primary.
    replicas: usize,
    /// The CA of the nodes' certificate, with TLS.
    ca: Option<TestCa>,
}

impl RedisCluster {
    /// Three primaries, no replica, Redis's default user (no password).
    pub async fn start() -> Result<Self, ServerError> {
        Self::with(ClusterOptions::default()).await
    }

    /// Three primaries with one replica each.
    pub async fn with_replicas() -> Result<Self, ServerError> {
        Self::with(ClusterOptions {
            replicas: 1,
            ..ClusterOptions::default()
        })
        .await
    }

    /// Three primaries that know only `user` with `password` (the default user off).
    pub async fn with_user(user: &str, password: &str) -> Result<Self, ServerError> {
        Self::with(ClusterOptions {
            user: Some((user.to_owned(), password.to_owned())),
            ..ClusterOptions::default()
        })
        .await
    }

    /// The cluster `options` say.
    pub async fn with(options: ClusterOptions) -> Result<Self, ServerError> {
        let ClusterOptions {
            replicas,
            user,
            tls,
        } = options;
        let ca = if tls { Some(TestCa::new()?) } else { None };
        // `CLUSTER SLOTS` lists a replica only once its replication offset is not zero, and the
        // offset of an empty primary first moves with its ping to the replicas, every
        // `repl-ping-replica-period` (10 s by default): each second, a cluster with replicas
        // settled in about 3 s rather than 11.
        let mut args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "2000",
            "--repl-ping-replica-period",
            "1",
        ]
        .map(str::to_owned)
        .to_vec();
        if ca.is_some() {
            // The bus between the nodes in TLS too, on the bus port.
            args.extend(["--tls-cluster", "yes"].map(str::to_owned));
        }
        if let Some((u, p)) = &user {
            args.extend(
                ["--user", u, "on", &format!(">{p}"), "~*", "&*", "+@all"].map(str::to_owned),
            );
            args.extend(["--user", "default", "off"].map(str::to_owned));
            // A replica syncs from its primary as this user.
            args.extend(["--masteruser", u, "--masterauth", p].map(str::to_owned));
        }
        let mut nodes = Vec::new();
        for _ in 0..3 * (1 + replicas) {
            nodes.push(RedisServer::with(Options {
                tcp: true,
                aof: false,
                args: args.clone(),
                tls: ca.as_ref().map(|ca| ca.files().clone()),
                cluster_bus: true,
                conf: None,
            })?);
        }
        let cluster = RedisCluster {
            nodes,
            user,
            replicas,
            ca,
        };
        cluster.create(replicas)?;
        cluster.settle().await?;
        Ok(cluster)
    }

    /// `redis-cli --cluster create`: the slots split among the primaries, the replicas assigned.
    fn create(&self, replicas: usize) -> Result<(), ServerError> {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for port in self.ports() {
            cmd.arg(format!("127.0.0.1:{port}"));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        if let Some((u, p)) = &self.user {
            cmd.args(["--user", u, "--pass", p, "--no-auth-warning"]);
        }
        if let Some(ca) = self.ca() {
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        let out = cmd
            .output()
            .map_err(|e| cluster(&format!("running redis-cli --cluster create: {e}")))?;
        if !out.status.success() {
            return Err(cluster(&format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Waits until every node says `cluster_state:ok`, knows all the others and lists every
    /// primary's replicas, and every replica's link to its primary is up.
    async fn settle(&self) -> Result<(), ServerError> {
        let start = Instant::now();
        for port in self.ports() {
            loop {
                if self.agrees(port).await {
                    break;
                }
                if start.elapsed() > SETTLE {
                    return Err(cluster(&format!(
                        "the node on port {port} did not join within {SETTLE:?}"
                    )));
                }
                tokio::time::sleep(POLL).await;
            }
        }
        Ok(())
    }

    async fn agrees(&self, port: u16) -> bool {
        let Ok(mut conn) = self.direct(port).await else {
            return false;
        };
        let info: String = match redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut conn)
            .await
        {
            Ok(info) => info,
            Err(_) => return false,
        };
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        if !info.contains("cluster_state:ok") || !info.contains(&known) {
            return false;
        }
        let Ok(ranges) = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<Vec<redis::Value>>(&mut conn)
            .await
        else {
            return false;
        };
        let served = ranges.iter().all(
            |range| matches!(range, redis::Value::Array(parts) if parts.len() >= 3 + self.replicas),
        );
        // A replica's ROLE: ["slave", host, port, link state, offset]; a primary counts its
        // replicas online (`super::online_replicas`).
        let linked = match redis::cmd("ROLE")
            .query_async::<Vec<redis::Value>>(&mut conn)
            .await
        {
            Ok(role) => match (role.first(), role.get(3)) {
                (Some(redis::Value::BulkString(kind)), Some(redis::Value::BulkString(link)))
                    if kind.as_slice() == b"slave" =>
                {
                    link.as_slice() == b"connected"
                }
                _ => match redis::cmd("INFO")
                    .arg("replication")
                    .query_async::<String>(&mut conn)
                    .await
                {
                    Ok(info) => super::online_replicas(&info).len() >= self.replicas,
                    Err(_) => false,
                },
            },
            Err(_) => false,
        };
        served && linked
    }

    /// A connection to the node on `port` alone, as the cluster's user (in TLS with TLS).
    pub async fn direct(&self, port: u16) -> redis::RedisResult<MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        super::client(&self.direct_url(port), self.ca())?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// The cluster's URL: `redis+cluster://[user:password@]127.0.0.1:P1,…` (every node;
    /// `rediss+cluster://` with TLS).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!(
            "{}+cluster://{}{}",
            self.scheme(),
            self.userinfo(),
            hosts.join(",")
        )
    }

    /// An endpoint for the cluster, trusting its CA, with a generous timeout for slow CI
    /// machines.
    pub fn endpoint(&self) -> Endpoint {
        let mut endpoint = Endpoint::new(self.url(), Duration::from_secs(10));
        endpoint.ca_file = self.ca().map(Path::to_path_buf);
        endpoint
    }

    /// The CA file a client must trust (`--redis-ca`), with TLS.
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_ref().map(TestCa::ca)
    }

    /// A URL of the node on `port`, with the cluster's user (`rediss://` with TLS: reach it
    /// through [`RedisCluster::direct`], or trust [`RedisCluster::ca`]).
    pub fn direct_url(&self, port: u16) -> String {
        format!("{}://{}127.0.0.1:{port}", self.scheme(), self.userinfo())
    }

    fn scheme(&self) -> &'static str {
        if self.ca.is_some() { "rediss" } else { "redis" }
    }

    /// The nodes' ports, in the order they started.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|n| n.port().expect("started with tcp"))
            .collect()
    }

    /// The port of the primary that serves `key`'s hash slot, as the first node's `CLUSTER
    /// SLOTS` says.
    pub async fn primary_of(&self, key: &str) -> redis::RedisResult<u16> {
        Ok(self.serving(key).await?[0])
    }

    /// The port of a replica of the primary that serves `key`'s hash slot (a cluster started
    /// `with_replicas`).
    pub async fn replica_of(&self, key: &str) -> redis::RedisResult<u16> {
        self.serving(key).await?.get(1).copied().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "the slot has no replica"))
        })
    }

    /// The process id of the node on `port`.
    pub fn pid_of(&self, port: u16) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.port() == Some(port))
            .map(RedisServer::pid)
    }

    /// The ports of the nodes that serve `key`'s hash slot: its primary, then its replicas, as
    /// the first node that answers says (a test may have killed some).
    async fn serving(&self, key: &str) -> redis::RedisResult<Vec<u16>> {
        let mut last = None;
        for port in self.ports() {
            match self.serving_seen_by(port, key).await {
                Ok(ports) => return Ok(ports),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "the cluster has no node"))
        }))
    }

    /// Moves the hash slot of `key` to the primary on `to` as `redis-cli --cluster reshard`
    /// does: `CLUSTER SETSLOT … IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE …
    /// KEYS …` until the source holds none of the slot's keys, then `SETSLOT … NODE` on the
    /// target, the source and every other primary; returns once every node that answers maps
    /// the slot to `to`. The target is told first, so the source's redirections name a node
    /// that already owns the slot.
    pub async fn move_slot(&self, key: &str, to: u16) -> Result<SlotMove, ServerError> {
        let failed = |what: &str, e: redis::RedisError| {
            cluster(&format!("moving the slot of {key} to {to}: {what}: {e}"))
        };
        let from = self
            .primary_of(key)
            .await
            .map_err(|e| failed("its primary", e))?;
        if from == to {
            return Err(cluster(&format!("the slot of {key} is on {to} already")));
        }
        let mut source = self.direct(from).await.map_err(|e| failed("source", e))?;
        let mut target = self.direct(to).await.map_err(|e| failed("target", e))?;
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut source)
            .await
            .map_err(|e| failed("KEYSLOT", e))?;
        let source_id = node_id(&mut source)
            .await
            .map_err(|e| failed("the source's id", e))?;
        let target_id = node_id(&mut target)
            .await
            .map_err(|e| failed("the target's id", e))?;
        let started = Instant::now();
        setslot(&mut target, slot, "IMPORTING", &source_id)
            .await
            .map_err(|e| failed("IMPORTING", e))?;
        setslot(&mut source, slot, "MIGRATING", &target_id)
            .await
            .map_err(|e| failed("MIGRATING", e))?;
        let keys_moved = self
            .migrate_keys(&mut source, slot, to)
            .await
            .map_err(|e| failed("MIGRATE", e))?;
        setslot(&mut target, slot, "NODE", &target_id)
            .await
            .map_err(|e| failed("NODE on the target", e))?;
        setslot(&mut source, slot, "NODE", &target_id)
            .await
            .map_err(|e| failed("NODE on the source", e))?;
        let given_up = Instant::now();
        self.assign_elsewhere(slot, &target_id, [from, to])
            .await
            .map_err(|e| failed("NODE on another primary", e))?;
        self.wait_mapped(key, slot, to).await?;
        Ok(SlotMove {
            slot,
            from,
            to,
            keys_moved,
            took: given_up - started,
            given_up,
        })
    }

    /// `MIGRATE`s the slot's keys from `source` to the node on `to` until none is left there;
    /// returns how many moved.
    async fn migrate_keys(
        &self,
        source: &mut MultiplexedConnection,
        slot: u16,
        to: u16,
    ) -> redis::RedisResult<usize> {
        let mut moved = 0;
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query_async(source)
                .await?;
            if keys.is_empty() {
                return Ok(moved);
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate.arg("127.0.0.1").arg(to).arg("").arg(0).arg(5000);
            if let Some((u, p)) = &self.user {
                migrate.arg("AUTH2").arg(u).arg(p);
            }
            migrate.arg("KEYS").arg(&keys);
            migrate.query_async::<()>(source).await?;
            moved += keys.len();
        }
    }

    /// `SETSLOT … NODE` on every primary but `told` (a replica takes no SETSLOT: it follows its
    /// primary).
    async fn assign_elsewhere(
        &self,
        slot: u16,
        owner: &str,
        told: [u16; 2],
    ) -> redis::RedisResult<()> {
        for port in self.ports().into_iter().filter(|p| !told.contains(p)) {
            let Ok(mut other) = self.direct(port).await else {
                continue;
            };
            let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut other).await?;
            if matches!(role.first(), Some(redis::Value::BulkString(r)) if r.as_slice() == b"master")
            {
                setslot(&mut other, slot, "NODE", owner).await?;
            }
        }
        Ok(())
    }

    /// Waits until every node that answers maps `key`'s slot to the primary on `to`.
    async fn wait_mapped(&self, key: &str, slot: u16, to: u16) -> Result<(), ServerError> {
        let deadline = Instant::now() + SETTLE;
        for port in self.ports() {
            loop {
                match self.serving_seen_by(port, key).await {
                    Ok(ports) if ports.first() == Some(&to) => break,
                    Err(e) if e.is_connection_refusal() => break,
                    _ if Instant::now() > deadline => {
                        return Err(cluster(&format!(
                            "the node on {port} did not map slot {slot} to {to} within {SETTLE:?}"
                        )));
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            }
        }
        Ok(())
    }

    /// The ports of the nodes that serve `key`'s hash slot, as the node on `port` maps them.
    async fn serving_seen_by(&self, port: u16, key: &str) -> redis::RedisResult<Vec<u16>> {
        let mut conn = self.direct(port).await?;
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await?;
        // Each range: [from, to, [ip, port, id, …] of the primary, then one per replica].
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        let nodes_of = |range: &redis::Value| -> Option<(i64, i64, Vec<u16>)> {
            let redis::Value::Array(parts) = range else {
                return None;
            };
            let (redis::Value::Int(from), redis::Value::Int(to)) = (parts.first()?, parts.get(1)?)
            else {
                return None;
            };
            let ports = parts[2..]
                .iter()
                .filter_map(|node| match node {
                    redis::Value::Array(node) => match node.get(1) {
                        Some(redis::Value::Int(port)) => u16::try_from(*port).ok(),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            Some((*from, *to, ports))
        };
        ranges
            .iter()
            .filter_map(nodes_of)
            .find(|(from, to, ports)| (*from..=*to).contains(&slot) && !ports.is_empty())
            .map(|(_, _, ports)| ports)
            .ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "no node serves the slot",
                    slot.to_string(),
                ))
            })
    }

    fn userinfo(&self) -> String {
        match &self.user {
            Some((u, p)) => format!("{u}:{p}@"),
            None => String::new(),
        }
    }
}

/// A node's id (`CLUSTER MYID`).
async fn node_id(conn: &mut MultiplexedConnection) -> redis::RedisResult<String> {
    redis::cmd("CLUSTER").arg("MYID").query_async(conn).await
}

/// `CLUSTER SETSLOT slot STATE id` on `conn`'s node.
async fn setslot(
    conn: &mut MultiplexedConnection,
    slot: u16,
    state: &str,
    id: &str,
) -> redis::RedisResult<()> {
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(state)
        .arg(id)
        .query_async(conn)
        .await
}

fn cluster(what: &str) -> ServerError {
    ServerError::Cluster(what.to_owned())
}
