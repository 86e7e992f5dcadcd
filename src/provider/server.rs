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

/// Serves `provider` on `listener` until `shutdown`.
pub async fn serve<C: ConnectionLike + Clone + Send + Sync + 'static>(
    listener: tokio::net::TcpListener,
    tls: Option<ServerTlsConfig>,
    provider: Arc<Provider<C>>,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let mut server = Server::builder();
    if let Some(tls) = tls {
        server = server.tls_config(tls)?;
    }
    server
        .add_service(CloudProviderServer::from_arc(provider))
        .serve_with_incoming_shutdown(incoming(listener), shutdown.cancelled_owned())
        .await
}
