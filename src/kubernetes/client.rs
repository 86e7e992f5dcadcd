//! Building the Kubernetes client from `fleet serve`'s settings: `--kubeconfig`,
//! `--kube-context`, else the usual kubeconfig rules (KUBECONFIG, then ~/.kube/config), then the
//! in-cluster service account. Building it contacts nothing: an API server out of reach at start
//! is blindness for the bound slots, never a failed start.

use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::WATCH_TIMEOUT;

/// Where the client's configuration comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// fleet's namespace (Jobs, Events about Jobs); else the in-cluster namespace, or the
    /// kubeconfig context's, or `default`.
    pub namespace: Option<String>,
}

/// A client and the namespace fleet works in.
#[derive(Clone)]
pub struct Connected {
    pub client: Client,
    pub namespace: String,
}

/// Why no client could be built: a usage problem (exit 2), since nothing was contacted yet.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot read the kubeconfig {path}: {reason}; pass --kubeconfig with a readable file, or \
         run fleet in the cluster with a service account"
    )]
    Kubeconfig { path: PathBuf, reason: String },
    #[error(
        "no Kubernetes configuration found ({0}): set KUBECONFIG or --kubeconfig, or run fleet in \
         the cluster with a service account"
    )]
    Infer(String),
    #[error("the Kubernetes configuration is not usable: {0}")]
    Build(String),
}

/// Reads the configuration and builds the client, bounded as SPEC §3.12 says.
pub async fn connect(settings: &Settings) -> Result<Connected, ClientError> {
    let options = KubeConfigOptions {
        context: settings.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match (&settings.kubeconfig, &settings.context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|e| ClientError::Kubeconfig {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| ClientError::Kubeconfig {
                    path: path.clone(),
                    reason: e.to_string(),
                })?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| ClientError::Infer(e.to_string()))?,
        (None, None) => Config::infer()
            .await
            .map_err(|e| ClientError::Infer(e.to_string()))?,
    };
    bound(&mut config);
    if let Some(ns) = &settings.namespace {
        config.default_namespace = ns.clone();
    }
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).map_err(|e| ClientError::Build(e.to_string()))?;
    Ok(Connected { client, namespace })
}

/// No retries of the client's own (a failed call is retried by the next pass, which sees the
/// world again first), and reads that end: a watch's server timeout plus a margin.
pub fn bound(config: &mut Config) {
    config.default_retry = false;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(u64::from(WATCH_TIMEOUT) + 20));
    config.write_timeout = Some(Duration::from_secs(10));
}
