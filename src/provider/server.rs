//! Serving the provider over gRPC (SPEC §6.4): plaintext, or TLS whose client CA makes it
//! mutual (every client must present a certificate that CA signed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use super::bounds;
use super::service::Provider;
use super::wire::cloud_provider_server::CloudProviderServer;
use crate::telemetry::Metrics;
use crate::telemetry::listener::{Gate, Limits};

/// The server side's TLS files, as given on the command line.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files cannot make a server configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert and --tls-key go together: give both (TLS) or neither (plaintext)")]
    Half,
    #[error(
        "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS whose clients must \
         present a certificate the client CA signed"
    )]
    ClientCaWithoutTls,
    #[error("reading {flag} {path}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{flag} {path} holds no PEM block: give a PEM file (-----BEGIN ...)")]
    NotPem { flag: &'static str, path: PathBuf },
    /// Past the bound of a PEM file (`file::PEM`, SPEC §7 S10): bad input, as a file with no PEM
    /// block is.
    #[error("reading {flag}")]
    TooLarge {
        flag: &'static str,
        #[source]
        source: fleet_redis::file::ReadError,
    },
}

/// A PEM file, read to its bound (SPEC §7 S10).
fn pem(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    use fleet_redis::file::{self, ReadError};
    let bytes = file::read(path, file::PEM).map_err(|e| match e {
        ReadError::Io(source) => TlsError::Read {
            flag,
            path: path.to_owned(),
            source,
        },
        too_large @ ReadError::TooLarge { .. } => TlsError::TooLarge {
            flag,
            source: too_large,
        },
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(TlsError::NotPem {
            flag,
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

impl TlsFiles {
    /// The server's TLS configuration, or `None` for plaintext.
    pub fn load(&self) -> Result<Option<ServerTlsConfig>, TlsError> {
        match (&self.cert, &self.key) {
            (None, None) if self.client_ca.is_some() => Err(TlsError::ClientCaWithoutTls),
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => {
                let identity = Identity::from_pem(pem("--tls-cert", cert)?, pem("--tls-key", key)?);
                let mut tls = ServerTlsConfig::new().identity(identity);
                if let Some(ca) = &self.client_ca {
                    tls = tls.client_ca_root(Certificate::from_pem(pem("--tls-client-ca", ca)?));
                }
                Ok(Some(tls))
            }
            _ => Err(TlsError::Half),
        }
    }
}

/// Resolves when this process, having led, no longer leads.
async fn leadership_lost(leadership: Option<tokio::sync::watch::Receiver<Option<String>>>) {
    let Some(mut leadership) = leadership else {
        return std::future::pending().await;
    };
    let _ = leadership.wait_for(Option::is_some).await;
    let _ = leadership.wait_for(Option::is_none).await;
}

pub use super::bounds::MAX_REQUEST;

/// Serves `provider` on `listener` until `shutdown`, within `bounds` (SPEC §6.4). When this
/// process stops leading, every connection is closed (HTTP/2 GOAWAY, after the calls in flight),
/// so cluster-autoscaler, which keeps one connection and does not retry a refused change, dials
/// again and reaches the new leader through a Service whose endpoints are the ready (leading)
/// processes. The listener stays open throughout: a follower still answers reads.
pub async fn serve<C: ConnectionLike + Clone + Send + Sync + 'static>(
    listener: tokio::net::TcpListener,
    tls: Option<ServerTlsConfig>,
    provider: Arc<Provider<C>>,
    (leadership, bounds): (Option<tokio::sync::watch::Receiver<Option<String>>>, Bounds),
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let listener = Arc::new(listener);
    loop {
        let mut server = Server::builder()
            .timeout(bounds::CALL)
            .max_concurrent_streams(bounds::STREAMS)
            .http2_max_header_list_size(bounds::HEADERS)
            .initial_connection_window_size(bounds::CONNECTION_WINDOW)
            .initial_stream_window_size(bounds::STREAM_WINDOW)
            .http2_keepalive_interval(Some(bounds::KEEPALIVE))
            .http2_keepalive_timeout(Some(bounds::KEEPALIVE_TIMEOUT))
            .layer(bounds::Budgeted(bounds.budget.clone()));
        if let Some(tls) = tls.clone() {
            server = server
                .tls_config(tls.timeout(bounds::FIRST_BYTE))
                .map_err(ServeError::Transport)?;
        }
        let lost = leadership_lost(leadership.clone());
        let stop = shutdown.clone();
        let round = CancellationToken::new();
        let leadership_ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended = leadership_ended.clone();
        let incoming = bounds::incoming(listener.clone(), bounds.gate.clone(), round.clone());
        server
            .add_service(
                CloudProviderServer::from_arc(provider.clone())
                    .max_decoding_message_size(MAX_REQUEST),
            )
            .serve_with_incoming_shutdown(incoming, async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = lost => ended.store(true, std::sync::atomic::Ordering::Relaxed),
                }
                round.cancel();
            })
            .await
            .map_err(ServeError::Transport)?;
        if !leadership_ended.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        tracing::info!(
            "no longer the leader: cluster-autoscaler's connections closed so that it dials the new leader"
        );
    }
}

/// The provider listener's places and its budget of requests in flight.
#[derive(Clone)]
pub struct Bounds {
    pub gate: Gate,
    pub budget: bounds::Budget,
}

impl Bounds {
    /// The bounds of a process whose descriptor limit is `nofile` (`Limits::provider`), counted
    /// on `metrics`' gauges.
    pub fn of(nofile: u64, metrics: &Metrics) -> Bounds {
        Bounds {
            gate: Gate::new(
                Limits::provider(nofile),
                metrics.provider_connections.clone(),
                prometheus_client::metrics::gauge::Gauge::default(),
            )
            .without_probes(),
            budget: bounds::Budget::new(metrics.provider_request_bytes.clone()),
        }
    }
}

/// Why the provider stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the provider's listener")]
    Listener(#[source] std::io::Error),
    #[error("the provider's gRPC server")]
    Transport(#[source] tonic::transport::Error),
}
