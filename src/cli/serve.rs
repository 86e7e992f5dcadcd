//! `fleet serve --config FILE`: the lifecycle controller, its metrics and health endpoints, and
//! the configuration reload (SPEC §4.5, §4.8).
//!
//! An invalid configuration at start is exit 2 with every problem listed. A new version of the
//! file (seen within a second, or on SIGHUP) is validated first: a bad one is refused with its
//! problems logged, and the running one is kept.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{self, Config, ConfigError};
use crate::lifecycle::Exec;
use crate::reconcile::Controller;
use crate::reconcile::metrics::{self, Health, Metrics};
use crate::store::catalog::Catalog;
use crate::store::claims::ClaimStore;
use crate::store::keys::Keys;
use crate::store::presence::Presence;

use super::{Ctx, Error, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file (groups and slots).
    #[arg(long, env = "FLEET_CONFIG")]
    pub config: PathBuf,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, env = "FLEET_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: SocketAddr,
    /// How often a pass runs over every slot (presence is re-read each pass).
    #[arg(long, env = "FLEET_PASS_INTERVAL", default_value = "1s", value_parser = args::positive_duration)]
    pub interval: Duration,
    /// How long a stop waits for the operations in flight.
    #[arg(long, env = "FLEET_SHUTDOWN_GRACE", default_value = "30s", value_parser = args::duration)]
    pub grace: Duration,
}

fn config_error(e: ConfigError) -> Error {
    match e {
        ConfigError::Read { .. } => Error::Runtime(e.into()),
        _ => Error::Usage(e.into()),
    }
}

impl Args {
    pub async fn run(self, ctx: &Ctx, _out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let config = config::load(&self.config).map_err(config_error)?;
        let listener = tokio::net::TcpListener::bind(self.metrics_addr)
            .await
            .map_err(|e| {
                Error::Runtime(
                    anyhow::Error::new(e)
                        .context(format!("listening on {} for metrics", self.metrics_addr)),
                )
            })?;
        let conn = ctx.endpoint.manager().await?;
        let mut publisher = conn.clone();
        Catalog::of(&config)
            .publish(&mut publisher, &ctx.keys)
            .await
            .map_err(|e| Error::Runtime(e.into()))?;
        info!(
            config = %self.config.display(),
            groups = config.groups.len(),
            slots = config.slots.len(),
            redis = %ctx.endpoint.redacted(),
            metrics = %self.metrics_addr,
            "fleet serve started"
        );
        let (tx, rx) = watch::channel(Arc::new(config));
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(Health::default());
        let shutdown = ctx.shutdown.clone();
        let tasks = tokio_util::task::TaskTracker::new();
        tasks.spawn(metrics::serve(
            listener,
            metrics.clone(),
            health.clone(),
            self.interval * 5,
            shutdown.clone(),
        ));
        tasks.spawn(reload(
            self.config.clone(),
            tx,
            publisher,
            ctx.keys.clone(),
            shutdown.clone(),
        ));
        let controller = Controller::new(
            rx,
            Presence::new(conn.clone(), ctx.keys.clone()),
            ClaimStore::new(conn, ctx.keys.clone()),
            Arc::new(Exec),
            metrics,
            health,
        );
        controller.run(self.interval, self.grace, shutdown).await;
        tasks.close();
        tasks.wait().await;
        info!("fleet serve stopped");
        Ok(())
    }
}

/// The file's identity: a change of either is a new version to read.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Re-reads the configuration when the file changes or on SIGHUP; a bad version is refused and
/// the running one kept.
async fn reload(
    path: PathBuf,
    tx: watch::Sender<Arc<Config>>,
    mut conn: redis::aio::ConnectionManager,
    keys: Keys,
    shutdown: CancellationToken,
) {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut seen = stamp(&path);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let asked = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now = stamp(&path);
        if !asked && now == seen {
            continue;
        }
        seen = now;
        match config::load(&path) {
            Ok(config) => {
                if let Err(e) = Catalog::of(&config).publish(&mut conn, &keys).await {
                    warn!(
                        error = format!("{:#}", anyhow::Error::new(e)),
                        "publishing the new catalog failed; views show the old one"
                    );
                }
                info!(config = %path.display(), groups = config.groups.len(), slots = config.slots.len(), "configuration reloaded");
                let _ = tx.send(Arc::new(config));
            }
            Err(e) => error!(
                config = %path.display(),
                error = format!("{:#}", anyhow::Error::new(e)),
                "new configuration refused; the running one is kept"
            ),
        }
    }
}
