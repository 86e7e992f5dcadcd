//! `fleet serve --config FILE`: the lifecycle controller, its metrics and health endpoints, and
//! the cluster-autoscaler provider (SPEC §4.5, §4.8, §6); the configuration's checks and reload
//! are `reload` (SPEC §4.1).
//!
//! An invalid configuration at start is exit 2 with every problem listed. A new version of the
//! file (seen within a second, or on SIGHUP) is validated first: a bad one is refused with its
//! problems logged, and the running one is kept.
//!
//! What a feature of the build brings is a file of its own: `cluster` (`kubernetes`), `grpc`
//! (`provider`), and in `http` the page (`page`). A flag for a part the build lacks is refused.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{self, Config};
use crate::lifecycle::{Exec, ReportTo, Runner};
#[cfg(feature = "provider")]
use crate::provider::service::Provider;
use crate::reconcile::bmc::Reader;
use crate::reconcile::{Controller, Faults, NoNodes, Nodes};
use crate::store::catalog::Catalog;
use crate::store::claims::ClaimStore;
use crate::store::lease::{Lease, Signal};
use crate::store::presence::Presence;
use crate::store::replicas::{Replicas, Wanted};
use crate::telemetry::listener;
use crate::telemetry::{Health, Metrics};
use fleet_redis::conn::Conn;

use super::reload::{check_drivers, check_kubernetes, config_error, hangups, reload, warn_about};
use super::{Ctx, Error, args};

#[cfg(feature = "kubernetes")]
mod cluster;
#[cfg(feature = "provider")]
mod grpc;
mod http;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file (groups and slots).
    #[arg(long, env = "FLEET_CONFIG")]
    pub config: PathBuf,
    /// Where to serve /metrics, /healthz, /readyz, and the live page (/) unless --ui-addr is set.
    #[arg(long, env = "FLEET_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: SocketAddr,
    /// Where to serve the live page (/, /events, its assets and actions) apart from the
    /// metrics: a loopback address keeps it off the network while /metrics is on it.
    #[arg(long, env = "FLEET_UI_ADDR")]
    pub ui_addr: Option<SocketAddr>,
    /// A name the listeners answer to besides their own address (repeatable; the variable
    /// takes several, comma-separated): a request naming another Host is refused (421), so a
    /// page elsewhere cannot read the fleet by rebinding its DNS name to this address.
    #[arg(long = "ui-host", env = "FLEET_UI_HOST", value_delimiter = ',', value_parser = listener::host_name)]
    pub ui_hosts: Vec<String>,
    /// A file holding the token (16 printable ASCII characters or more) that turns the live
    /// page's actions on: claim, cancel, hold, release, each sent with the token as a bearer
    /// header. Without it the page is read-only.
    #[arg(long, env = "FLEET_UI_TOKEN_FILE")]
    pub ui_token_file: Option<PathBuf>,
    /// How often a pass runs over every slot (presence is re-read each pass).
    #[arg(long, env = "FLEET_PASS_INTERVAL", default_value = "1s", value_parser = args::pass_interval, allow_hyphen_values = true)]
    pub interval: Duration,
    /// How long a stop waits for the operations in flight to end. They are never killed by a
    /// stop: each runs in a process of its own and reports its outcome to the store, where the
    /// next leader reads it.
    #[arg(long, env = "FLEET_SHUTDOWN_GRACE", default_value = "0s", value_parser = args::grace, allow_hyphen_values = true)]
    pub grace: Duration,
    /// The leader lease: a leader that dies is replaced within one lease.
    #[arg(long, env = "FLEET_LEASE", default_value = "5s", value_parser = args::lease, allow_hyphen_values = true)]
    pub lease: Duration,
    /// This process's name in the lease (default: host name and process id).
    #[arg(long, env = "FLEET_HOLDER", value_parser = args::holder)]
    pub holder: Option<String>,
    /// How long the controller stays blind after sight returns (one bench TTL plus one beat
    /// interval).
    #[arg(long, env = "FLEET_BLIND_GRACE", default_value = "40s", value_parser = args::grace, allow_hyphen_values = true)]
    pub blind_grace: Duration,
    /// The share of the machines that were on whose vanishing in one pass makes the controller
    /// blind (and at least two).
    #[arg(long, env = "FLEET_VANISH_RATIO", default_value_t = 0.5, value_parser = ratio)]
    pub vanish_ratio: f64,
    /// How often the leader reads each Redfish or IPMI slot's power from its BMC (jittered;
    /// shown as `bmc:` beside the heartbeat, never counted as the machine's power; SPEC §4.10).
    #[arg(long, env = "FLEET_BMC_INTERVAL", default_value = "60s", value_parser = args::watch_interval)]
    pub bmc_interval: Duration,
    /// How many replicas must acknowledge the controller's writes before it powers anything on
    /// or off (Redis WAIT; SPEC §5.6). Default: 1 when the primary has a replica, 0 when it has
    /// none. 0 never waits.
    #[arg(long, env = "FLEET_MIN_REPLICA_ACKS", value_parser = clap::value_parser!(u32).range(0..=16))]
    pub min_replica_acks: Option<u32>,
    /// Where to serve cluster-autoscaler's externalgrpc provider.
    #[arg(long, env = "FLEET_GRPC_ADDR", default_value = "127.0.0.1:8086")]
    pub grpc_addr: SocketAddr,
    /// The provider's TLS certificate (PEM); with --tls-key, the provider speaks TLS.
    #[arg(long, env = "FLEET_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "FLEET_TLS_KEY", hide_env_values = true)]
    pub tls_key: Option<PathBuf>,
    /// The CA that signs the clients' certificates (PEM): every client must present one (mTLS).
    #[arg(long, env = "FLEET_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// Work with a Kubernetes cluster (SPEC §3.12): watch the Nodes, taint and release them,
    /// run Job operations, publish Events. Without it nothing of Kubernetes is touched.
    #[arg(long, env = "FLEET_KUBERNETES")]
    pub kubernetes: bool,
    /// The kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then the in-cluster
    /// service account).
    #[arg(long, env = "FLEET_KUBECONFIG", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long, env = "FLEET_KUBE_CONTEXT", requires = "kubernetes")]
    pub kube_context: Option<String>,
    /// fleet's namespace, for its Jobs and their Events (default: the in-cluster namespace,
    /// else the context's, else `default`).
    #[arg(long, env = "FLEET_KUBE_NAMESPACE", requires = "kubernetes")]
    pub kube_namespace: Option<String>,
}

/// The operation wrapper is this very binary: `/proc/self/exe` still starts it after a package
/// upgrade replaced the file on disk.
const WRAPPER: &str = "/proc/self/exe";

fn ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "invalid ratio {text:?}: a number from 0 to 1, like 0.5"
        )),
    }
}

/// The host's name, for the lease holder's id.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "fleet".to_owned())
}

/// Warns when the Redis in use keeps nothing on disk: a restart would lose every claim.
async fn warn_without_persistence(conn: &mut Conn) {
    let reply: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query_async(conn)
        .await;
    let save: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async(conn)
        .await;
    match (reply, save) {
        (Ok(aof), Ok(save)) => {
            let aof_on = aof.get(1).is_some_and(|v| v == "yes");
            let snapshots = save.get(1).is_some_and(|v| !v.trim().is_empty());
            if !aof_on && !snapshots {
                warn!(
                    "this Redis keeps nothing on disk (appendonly no, save \"\"): a restart loses every claim; run it with appendonly yes and appendfsync everysec"
                );
            } else if !aof_on {
                warn!(
                    "this Redis has appendonly no: a restart loses the claims written since its last snapshot; run it with appendonly yes"
                );
            }
        }
        _ => info!(
            "cannot read the Redis persistence settings (CONFIG GET refused); make sure appendonly is yes"
        ),
    }
}

/// The first connection of `fleet serve`: a Redis that is not up yet, slow, or failing over is
/// waited for (SPEC §4.5), as a running `fleet serve` waits for one that goes away, logged once at
/// WARN and tried again from 250 ms, doubling to 5 s, until it answers or the process is stopped
/// (then exit 1, naming it). What waiting cannot mend (a URL, a password, TLS, a database out of
/// range) ends the start at once, exit 2 or 1.
async fn reach(ctx: &Ctx) -> Result<Conn, Error> {
    let mut wait = Duration::from_millis(250);
    let mut waiting = false;
    loop {
        match ctx.endpoint.open_lasting().await {
            Ok(conn) => {
                if waiting {
                    info!("Redis answers: starting");
                }
                return Ok(conn);
            }
            Err(e) if e.may_pass() => {
                if !waiting {
                    warn!(
                        error = %e,
                        "Redis does not answer yet; fleet serve waits for it and starts once it does (SIGTERM stops the wait)"
                    );
                    waiting = true;
                }
                tokio::select! {
                    () = ctx.shutdown.cancelled() => return Err(e.into()),
                    () = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// What `fleet serve` listens on, bound before anything is published so a port in use fails
/// the start.
struct Listeners {
    #[cfg(feature = "provider")]
    grpc: tokio::net::TcpListener,
    metrics: tokio::net::TcpListener,
    /// The live page's own, with `--ui-addr`.
    ui: Option<tokio::net::TcpListener>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, _out: &mut (dyn Write + Send)) -> Result<(), Error> {
        // Redis cuts off its hogs, never the controller (SPEC §7.2, S8).
        let ctx = &Ctx {
            endpoint: ctx.endpoint.clone().unevicted(),
            ..ctx.clone()
        };
        self.check_lease()?;
        self.check_built()?;
        #[cfg(feature = "page")]
        let token = self.ui_token_file.as_deref().map(http::token).transpose()?;
        let config = self.load()?;
        #[cfg(feature = "kubernetes")]
        let kube = self.kube().await?;
        #[cfg(feature = "provider")]
        let (tls, transport) = self.tls()?;
        #[cfg(not(feature = "provider"))]
        let transport = "none: built without the provider";
        let listeners = self.bind().await?;
        warn_about(&config);
        let conn = reach(ctx).await?;
        let publisher = publish(ctx, &conn, &config).await?;
        let hup = hangups();
        self.log_started(ctx, &config, &listeners, transport);
        let (tx, rx) = watch::channel(Arc::new(config));
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(Health::default());
        let shutdown = ctx.shutdown.clone();
        let tasks = tokio_util::task::TaskTracker::new();
        let http = self.http(
            listeners.metrics,
            #[cfg(feature = "page")]
            (listeners.ui, token),
        )?;
        #[cfg(feature = "provider")]
        let nofile = http.limits.nofile;
        http.start(ctx, (metrics.clone(), health.clone()), &tasks)
            .await?;
        tasks.spawn(reload(
            (self.config.clone(), hup),
            self.kubernetes,
            tx,
            publisher,
            ctx.keys.clone(),
            (metrics.clone(), health.clone()),
            shutdown.clone(),
        ));
        // One leadership signal: the controller announces it, the provider and its server follow.
        let (signal, leadership) = Signal::new();
        #[cfg(feature = "provider")]
        tasks.spawn(grpc::serve_provider(
            (listeners.grpc, tls, nofile),
            Provider::new(rx.clone(), ClaimStore::new(conn.clone(), ctx.keys.clone()))
                .with_leadership(leadership.clone())
                .with_metrics(metrics.clone()),
            (leadership.clone(), metrics.clone()),
            shutdown.clone(),
        ));
        // WAIT blocks its connection: the replication gate has one of its own.
        let acks = ctx.endpoint.open_lasting().await?;
        let parts = Parts {
            rx,
            conn,
            acks,
            metrics,
            health,
            signal,
            shutdown,
        };
        #[cfg(feature = "kubernetes")]
        if let Some(k) = kube {
            self.control_in_cluster(ctx, parts, k, leadership, &tasks)
                .await;
            return self.stopped(tasks).await;
        }
        #[cfg(not(feature = "kubernetes"))]
        drop(leadership);
        let runner = Exec::new(WRAPPER).reporting_to(report_to(ctx));
        self.control(ctx, parts, NoNodes, runner).await;
        self.stopped(tasks).await
    }

    /// The configuration, checked for what a start needs besides its validity.
    fn load(&self) -> Result<Config, Error> {
        let config = config::load(&self.config).map_err(config_error)?;
        check_drivers(&self.config, &config).map_err(config_error)?;
        check_kubernetes(&config, self.kubernetes)?;
        Ok(config)
    }

    /// The HTTP side (SPEC §4.8, §4.13): the metrics and the page on their listeners, under the
    /// caps of the descriptor limit, raised here.
    fn http(
        &self,
        metrics: tokio::net::TcpListener,
        #[cfg(feature = "page")] (ui, token): (Option<tokio::net::TcpListener>, Option<String>),
    ) -> Result<http::Http, Error> {
        Ok(http::Http {
            metrics,
            #[cfg(feature = "page")]
            ui,
            limits: http::limits()?,
            hosts: self.ui_hosts.clone(),
            #[cfg(feature = "page")]
            token,
            interval: self.interval,
        })
    }

    /// The controller has stopped: the listeners and the reload end on the same token.
    async fn stopped(&self, tasks: tokio_util::task::TaskTracker) -> Result<(), Error> {
        tasks.close();
        tasks.wait().await;
        info!("fleet serve stopped");
        Ok(())
    }

    /// Flags for a part this build does not hold are refused (exit 2), never ignored: a
    /// provider or a page that silently is not there is worse than no start.
    fn check_built(&self) -> Result<(), Error> {
        let mut unbuilt: Vec<(&str, &str)> = Vec::new();
        if cfg!(not(feature = "kubernetes")) && self.kubernetes {
            unbuilt.push(("--kubernetes", "kubernetes"));
        }
        if cfg!(not(feature = "provider"))
            && (self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_client_ca.is_some())
        {
            unbuilt.push(("--tls-cert, --tls-key, --tls-client-ca", "provider"));
        }
        if cfg!(not(feature = "page")) && (self.ui_addr.is_some() || self.ui_token_file.is_some()) {
            unbuilt.push(("--ui-addr, --ui-token-file", "page"));
        }
        match unbuilt.first() {
            None => Ok(()),
            Some((flags, feature)) => Err(Error::usage(format!(
                "{flags}: this fleet was built without the `{feature}` feature; use a build \
                 with it (the default build has every feature)"
            ))),
        }
    }

    /// The leader renews its lease once a pass, so a lease no longer than a pass lapses between
    /// renewals.
    fn check_lease(&self) -> Result<(), Error> {
        if self.lease > self.interval {
            return Ok(());
        }
        Err(Error::usage(format!(
            "--lease {} must be longer than --interval {}: the leader renews its lease once a \
             pass, so a lease no longer than a pass lapses between renewals; use at least \
             --lease {}",
            humantime::format_duration(self.lease),
            humantime::format_duration(self.interval),
            humantime::format_duration(self.interval * 2)
        )))
    }

    /// Binds the provider's port, then the metrics port, then the page's with `--ui-addr`.
    async fn bind(&self) -> Result<Listeners, Error> {
        #[cfg(feature = "provider")]
        let grpc = tokio::net::TcpListener::bind(self.grpc_addr)
            .await
            .map_err(|e| {
                Error::Runtime(anyhow::Error::new(e).context(format!(
                    "listening on {} for cluster-autoscaler (--grpc-addr)",
                    self.grpc_addr
                )))
            })?;
        let metrics = tokio::net::TcpListener::bind(self.metrics_addr)
            .await
            .map_err(|e| {
                Error::Runtime(
                    anyhow::Error::new(e)
                        .context(format!("listening on {} for metrics", self.metrics_addr)),
                )
            })?;
        let ui = match self.ui_addr {
            None => None,
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                Error::Runtime(
                    anyhow::Error::new(e)
                        .context(format!("listening on {addr} for the live page (--ui-addr)")),
                )
            })?),
        };
        Ok(Listeners {
            #[cfg(feature = "provider")]
            grpc,
            metrics,
            ui,
        })
    }

    fn log_started(&self, ctx: &Ctx, config: &Config, listeners: &Listeners, transport: &str) {
        #[cfg(feature = "provider")]
        let grpc = listeners
            .grpc
            .local_addr()
            .map_or(self.grpc_addr, |a| a)
            .to_string();
        #[cfg(not(feature = "provider"))]
        let grpc = "none";
        info!(
            config = %self.config.display(),
            groups = config.groups.len(),
            slots = config.slots.len(),
            redis = %ctx.endpoint.redacted(),
            metrics = %listeners.metrics.local_addr().map_or(self.metrics_addr, |a| a),
            ui = %listeners.ui.as_ref().and_then(|l| l.local_addr().ok()).map_or_else(|| "metrics".to_owned(), |a| a.to_string()),
            grpc = %grpc,
            transport,
            "fleet serve started"
        );
    }

    /// This process's name in the lease, and the reporting instance of its Events.
    fn holder(&self) -> String {
        self.holder
            .clone()
            .unwrap_or_else(|| format!("{}-{}", host(), std::process::id()))
    }

    /// Runs the controller until `shutdown`: it leads while it holds the lease, and its
    /// operations run through this binary (or as Jobs), reporting to the same store.
    async fn control<N: Nodes, R: Runner>(&self, ctx: &Ctx, parts: Parts, nodes: N, runner: R) {
        let Parts {
            rx,
            conn,
            acks,
            metrics,
            health,
            signal,
            shutdown,
        } = parts;
        let lease = Lease::new(conn.clone(), ctx.keys.clone(), self.holder(), self.lease);
        // The wake listener follows the same primary (a Sentinel URL's) through it.
        let wake_conn = conn.clone();
        // The BMC readings follow the same leadership as the controller (SPEC §4.10).
        let bmc = Reader::new(conn.clone(), ctx.keys.clone(), rx.clone())
            .every(self.bmc_interval)
            .run(signal.follow(), shutdown.clone());
        let controller = Controller::new(
            rx,
            Presence::new(conn.clone(), ctx.keys.clone()),
            ClaimStore::new(conn, ctx.keys.clone()),
            Arc::new(runner),
            metrics,
            health,
        )
        .with_nodes(nodes)
        .with_replicas(
            Replicas::new(
                acks.clone(),
                ctx.keys.clone(),
                self.min_replica_acks.map_or(Wanted::Auto, Wanted::Exactly),
                // A leader waiting for replicas must still renew its lease in time.
                ctx.endpoint.timeout.min(self.lease / 2),
            )
            .per_slot(acks.is_cluster()),
        )
        .with_lease(lease)
        .announcing(signal)
        .with_faults(Faults {
            blind_grace: self.blind_grace,
            vanish_ratio: self.vanish_ratio,
            ..Faults::default()
        })
        .waking_on(crate::reconcile::Wake::of_endpoint(
            &ctx.endpoint,
            &wake_conn,
            &ctx.keys,
        ));
        tokio::join!(
            controller.run_leading(self.interval, self.grace, shutdown),
            bmc
        );
    }
}

/// What the controller is built from, besides its runner and Nodes.
struct Parts {
    rx: watch::Receiver<Arc<Config>>,
    conn: Conn,
    /// The replication gate's own connection.
    acks: Conn,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    signal: Signal,
    shutdown: CancellationToken,
}

/// Publishes the configuration's catalog (after a warning if Redis keeps nothing across a
/// restart), and returns the connection that publishes it again on a reload.
async fn publish(ctx: &Ctx, conn: &Conn, config: &Config) -> Result<Conn, Error> {
    let mut publisher = conn.clone();
    warn_without_persistence(&mut publisher).await;
    Catalog::of(config)
        .publish(&mut publisher, &ctx.keys)
        .await
        .map_err(|e| Error::Runtime(e.into()))?;
    Ok(publisher)
}

/// Where an operation's wrapper reports its outcome: the store this process uses.
fn report_to(ctx: &Ctx) -> ReportTo {
    ReportTo {
        url: ctx.endpoint.url.clone(),
        ca_file: ctx.endpoint.ca_file.clone(),
        sentinel_auth: ctx.endpoint.sentinel_auth.clone(),
        timeout: ctx.endpoint.timeout,
        prefix: ctx.keys.prefix().to_owned(),
    }
}
