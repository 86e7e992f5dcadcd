//! Serving the provider over gRPC (SPEC §6.4): plaintext, or TLS whose client CA makes it
//! mutual (every client must present a certificate that CA signed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use super::service::Provider;
use super::wire::cloud_provider_server::CloudProviderServer;

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
}

fn pem(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_owned(),
        source,
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

/// The incoming connections of `listener`, as the provider serves them.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    // Without TCP_NODELAY an answer over more than one segment waits out the client's delayed
    // ACK (Nagle): about 40 ms on every NodeGroupNodes of a large group.
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Resolves when this process, having led, no longer leads.
async fn leadership_lost(leadership: Option<tokio::sync::watch::Receiver<Option<String>>>) {
    let Some(mut leadership) = leadership else {
        return std::future::pending().await;
    };
    let _ = leadership.wait_for(Option::is_some).await;
    let _ = leadership.wait_for(Option::is_none).await;
}

/// The largest request the provider reads (SPEC §7.1): tonic's own default, said here so it is
/// fleet's rule. cluster-autoscaler's largest request, DeleteNodes of every node of a group, is a
/// few hundred bytes a node; a peer's larger message is refused before it is decoded.
pub const MAX_REQUEST: usize = 4 << 20;

/// Serves `provider` on `listener` until `shutdown`. When this process stops leading, every
/// connection is closed (HTTP/2 GOAWAY, after the calls in flight), so cluster-autoscaler, which
/// keeps one connection and does not retry a refused change, dials again and reaches the new
/// leader through a Service whose endpoints are the ready (leading) processes (SPEC §6.4). The
/// listener stays open throughout: a follower still answers reads.
pub async fn serve<C: ConnectionLike + Clone + Send + Sync + 'static>(
    listener: tokio::net::TcpListener,
    tls: Option<ServerTlsConfig>,
    provider: Arc<Provider<C>>,
    leadership: Option<tokio::sync::watch::Receiver<Option<String>>>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let listener = listener.into_std().map_err(ServeError::Listener)?;
    loop {
        let round = listener
            .try_clone()
            .and_then(|l| {
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l)
            })
            .map_err(ServeError::Listener)?;
        let mut server = Server::builder();
        if let Some(tls) = tls.clone() {
            server = server.tls_config(tls).map_err(ServeError::Transport)?;
        }
        let lost = leadership_lost(leadership.clone());
        let stop = shutdown.clone();
        let leadership_ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended = leadership_ended.clone();
        server
            .add_service(
                CloudProviderServer::from_arc(provider.clone())
                    .max_decoding_message_size(MAX_REQUEST),
            )
            .serve_with_incoming_shutdown(incoming(round), async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = lost => ended.store(true, std::sync::atomic::Ordering::Relaxed),
                }
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

/// Why the provider stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the provider's listener")]
    Listener(#[source] std::io::Error),
    #[error("the provider's gRPC server")]
    Transport(#[source] tonic::transport::Error),
}
