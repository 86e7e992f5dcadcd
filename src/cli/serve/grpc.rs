//! `fleet serve`'s cluster-autoscaler provider (SPEC §6.4): its TLS and its server, following
//! the controller's leadership. Built with the `provider` feature only.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::provider::server::{TlsError, TlsFiles};
use crate::provider::{self, service::Provider};
use crate::telemetry::Metrics;
use fleet_redis::conn::Conn;

use super::super::Error;
use super::Args;

impl Args {
    /// The provider's TLS configuration and the name of its transport. A file that cannot be
    /// read is a runtime failure; flags that do not go together are the caller's input.
    pub(super) fn tls(
        &self,
    ) -> Result<(Option<tonic::transport::ServerTlsConfig>, &'static str), Error> {
        let tls_files = TlsFiles {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        let tls = tls_files.load().map_err(|e| match e {
            TlsError::Read { .. } => Error::Runtime(e.into()),
            _ => Error::Usage(e.into()),
        })?;
        let transport = match (&tls, &self.tls_client_ca) {
            (None, _) => "plaintext",
            (Some(_), None) => "TLS",
            (Some(_), Some(_)) => "mutual TLS",
        };
        Ok((tls, transport))
    }
}

/// Serves cluster-autoscaler's provider on `grpc` until `shutdown`, within the bounds of a
/// process of `nofile` descriptors (SPEC §6.4); a provider that stops on its own stops the whole
/// of `fleet serve`, since the autoscaler can no longer reach it.
pub(super) async fn serve_provider(
    (grpc, tls, nofile): (
        tokio::net::TcpListener,
        Option<tonic::transport::ServerTlsConfig>,
        u64,
    ),
    provider: Provider<Conn>,
    (leadership, metrics): (watch::Receiver<Option<String>>, Arc<Metrics>),
    shutdown: CancellationToken,
) {
    let bounds = provider::server::Bounds::of(nofile, &metrics);
    if let Err(e) = provider::server::serve(
        grpc,
        tls,
        Arc::new(provider),
        (Some(leadership), bounds),
        shutdown.clone(),
    )
    .await
    {
        tracing::error!(
            error = fleet_redis::connect::chain(&e),
            "the cluster-autoscaler provider stopped; stopping fleet serve"
        );
        shutdown.cancel();
    }
}
