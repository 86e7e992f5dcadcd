//! A client of the provider that calls exactly as cluster-autoscaler does (SPEC §6.5): one
//! channel, a deadline on every call, plaintext or mutual TLS with the cloud-config's three files.
//! Its answers are plain rows, so the generated wire types stay in this folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::views::rows::{AutoscalerGroupRow, AutoscalerInstanceRow, AutoscalerTemplateRow};
use prost::Message;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::service::OUT_OF_RESOURCES;
use super::wire::cloud_provider_client::CloudProviderClient;
use super::wire::instance_status::InstanceState;
use super::wire::*;

/// Where the provider is and how to reach it: CA's cloud-config, as flags.
#[derive(Clone, Debug)]
pub struct Target {
    /// `host:port`; the host is also the TLS server name.
    pub addr: String,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub timeout: Duration,
}

/// Why a call did not get its answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The flags or files cannot make a client.
    #[error("{0}")]
    Invalid(String),
    #[error(
        "cannot reach the provider at {addr}: is `fleet serve` running with --grpc-addr {addr}?"
    )]
    Unreachable {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The provider answered with an error status; `about` says what was asked, in the words of
    /// the group or node, never the RPC's name.
    #[error("{about}: {message}")]
    Refused {
        about: String,
        code: Code,
        message: String,
    },
    #[error("the template's node bytes do not decode")]
    Template(#[source] prost::DecodeError),
}

impl ClientError {
    /// Whether the provider refused the request itself (the caller can act on it), rather than
    /// being out of reach or failing.
    pub fn is_refusal(&self) -> bool {
        match self {
            ClientError::Invalid(_) => true,
            ClientError::Refused { code, .. } => matches!(
                code,
                Code::InvalidArgument
                    | Code::NotFound
                    | Code::OutOfRange
                    | Code::FailedPrecondition
                    | Code::ResourceExhausted
                    | Code::AlreadyExists
            ),
            ClientError::Unreachable { .. } | ClientError::Template(_) => false,
        }
    }
}

fn refused(about: impl Into<String>) -> impl FnOnce(tonic::Status) -> ClientError {
    let about = about.into();
    move |status| ClientError::Refused {
        about,
        code: status.code(),
        message: if status.message().is_empty() {
            "no message".to_owned()
        } else {
            status.message().to_owned()
        },
    }
}

/// A `--tls-*` file, read to the bound of a PEM file (SPEC §7 S10); either failure is bad input.
fn read(flag: &str, path: &Path) -> Result<Vec<u8>, ClientError> {
    fleet_redis::file::read(path, fleet_redis::file::PEM)
        .map_err(|e| ClientError::Invalid(format!("reading {flag} {}: {e}", path.display())))
}

/// A connected client.
pub struct Client {
    inner: CloudProviderClient<Channel>,
}

impl Client {
    pub async fn connect(target: &Target) -> Result<Client, ClientError> {
        let host = target
            .addr
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "invalid --grpc-addr {:?}: write host:port, like 127.0.0.1:8086",
                    target.addr
                ))
            })?
            .to_owned();
        let tls = match (&target.cert, &target.key, &target.ca) {
            (None, None, None) => None,
            (Some(cert), Some(key), Some(ca)) => Some(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(read("--tls-ca", ca)?))
                    .identity(Identity::from_pem(
                        read("--tls-cert", cert)?,
                        read("--tls-key", key)?,
                    ))
                    .domain_name(host),
            ),
            _ => {
                return Err(ClientError::Invalid(
                    "--tls-cert, --tls-key and --tls-ca go together, as cert, key and cacert do \
                     in cluster-autoscaler's cloud-config: give all three (mutual TLS) or none \
                     (plaintext)"
                        .to_owned(),
                ));
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", target.addr))
            .map_err(|e| ClientError::Invalid(format!("invalid --grpc-addr {}: {e}", target.addr)))?
            .timeout(target.timeout)
            .connect_timeout(target.timeout);
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).map_err(|e| {
                ClientError::Invalid(format!("the TLS files do not make a client: {e}"))
            })?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| ClientError::Unreachable {
                addr: target.addr.clone(),
                source,
            })?;
        Ok(Client {
            inner: CloudProviderClient::new(channel),
        })
    }

    /// NodeGroups, and each group's target size.
    pub async fn groups(&mut self) -> Result<Vec<AutoscalerGroupRow>, ClientError> {
        let groups = self
            .inner
            .node_groups(NodeGroupsRequest {})
            .await
            .map_err(refused("listing the groups"))?
            .into_inner()
            .node_groups;
        let mut rows = Vec::new();
        for g in groups {
            let target_size = self.target(&g.id).await?;
            rows.push(AutoscalerGroupRow {
                id: g.id,
                min_size: g.min_size,
                max_size: g.max_size,
                target_size,
            });
        }
        Ok(rows)
    }

    pub async fn target(&mut self, group: &str) -> Result<i32, ClientError> {
        Ok(self
            .inner
            .node_group_target_size(NodeGroupTargetSizeRequest {
                id: group.to_owned(),
            })
            .await
            .map_err(refused(format!("group {group}")))?
            .into_inner()
            .target_size)
    }

    pub async fn nodes(&mut self, group: &str) -> Result<Vec<AutoscalerInstanceRow>, ClientError> {
        let instances = self
            .inner
            .node_group_nodes(NodeGroupNodesRequest {
                id: group.to_owned(),
            })
            .await
            .map_err(refused(format!("group {group}")))?
            .into_inner()
            .instances;
        Ok(instances.into_iter().map(instance_row).collect())
    }

    pub async fn increase(&mut self, group: &str, delta: i32) -> Result<(), ClientError> {
        self.inner
            .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                delta,
                id: group.to_owned(),
            })
            .await
            .map_err(refused(format!("group {group}: adding {delta} machines")))?;
        Ok(())
    }

    /// DeleteNodes: each node a provider ID (`scheme://...`) or a node name.
    pub async fn delete(&mut self, group: &str, nodes: &[String]) -> Result<(), ClientError> {
        let names = nodes.to_vec();
        let nodes = nodes
            .iter()
            .map(|n| {
                if n.contains("://") {
                    ExternalGrpcNode {
                        provider_id: n.clone(),
                        ..ExternalGrpcNode::default()
                    }
                } else {
                    ExternalGrpcNode {
                        name: n.clone(),
                        ..ExternalGrpcNode::default()
                    }
                }
            })
            .collect();
        self.inner
            .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
                nodes,
                id: group.to_owned(),
            })
            .await
            .map_err(refused(format!(
                "group {group}: removing {}",
                names.join(", ")
            )))?;
        Ok(())
    }

    /// DecreaseTargetSize by `count` pending requests (sent as a negative delta).
    pub async fn decrease(&mut self, group: &str, count: i32) -> Result<(), ClientError> {
        self.inner
            .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
                delta: -count.saturating_abs(),
                id: group.to_owned(),
            })
            .await
            .map_err(refused(format!(
                "group {group}: taking back {count} requests"
            )))?;
        Ok(())
    }

    pub async fn template(&mut self, group: &str) -> Result<AutoscalerTemplateRow, ClientError> {
        let answer = self
            .inner
            .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
                id: group.to_owned(),
            })
            .await
            .map_err(refused(format!("group {group}: its node template")))?
            .into_inner();
        let node = super::k8s::Node::decode(answer.node_bytes.as_slice())
            .map_err(ClientError::Template)?;
        let mut row = template_row(&node, answer.node_info == answer.node_bytes);
        for bytes in &answer.resource_slice_bytes {
            let slice = super::k8s::ResourceSlice::decode(bytes.as_slice())
                .map_err(ClientError::Template)?;
            let spec = slice.spec.unwrap_or_default();
            let driver = spec.driver.unwrap_or_default();
            row.devices.extend(
                spec.devices
                    .into_iter()
                    .map(|d| format!("{driver}/{}", d.name.unwrap_or_default())),
            );
        }
        Ok(row)
    }
}

fn instance_row(i: Instance) -> AutoscalerInstanceRow {
    let status = i.status.unwrap_or_default();
    let state = match InstanceState::try_from(status.instance_state) {
        Ok(InstanceState::InstanceRunning) => "running",
        Ok(InstanceState::InstanceCreating) => "creating",
        Ok(InstanceState::InstanceDeleting) => "deleting",
        _ => "unspecified",
    };
    let error = status.error_info.filter(|e| !e.error_code.is_empty());
    AutoscalerInstanceRow {
        id: i.id,
        state,
        error_code: error.as_ref().map(|e| e.error_code.clone()),
        error_message: error.as_ref().map(|e| e.error_message.clone()),
        error_class: error.as_ref().map(|e| {
            if e.instance_error_class == OUT_OF_RESOURCES {
                "out-of-resources"
            } else {
                "other"
            }
        }),
    }
}

fn template_row(node: &super::k8s::Node, legacy_field_matches: bool) -> AutoscalerTemplateRow {
    let meta = node.metadata.clone().unwrap_or_default();
    let spec = node.spec.clone().unwrap_or_default();
    let status = node.status.clone().unwrap_or_default();
    AutoscalerTemplateRow {
        name: meta.name.unwrap_or_default(),
        labels: meta.labels,
        taints: spec
            .taints
            .iter()
            .map(|t| {
                format!(
                    "{}{}:{}",
                    t.key.clone().unwrap_or_default(),
                    t.value
                        .as_ref()
                        .map(|v| format!("={v}"))
                        .unwrap_or_default(),
                    t.effect.clone().unwrap_or_default()
                )
            })
            .collect(),
        capacity: status
            .capacity
            .iter()
            .map(|(k, q)| (k.clone(), q.string.clone().unwrap_or_default()))
            .collect(),
        conditions: status
            .conditions
            .iter()
            .map(|c| {
                format!(
                    "{}={}",
                    c.r#type.clone().unwrap_or_default(),
                    c.status.clone().unwrap_or_default()
                )
            })
            .collect(),
        legacy_field_matches,
        devices: Vec::new(),
    }
}
