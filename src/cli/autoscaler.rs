//! `fleet autoscaler groups|nodes|increase|delete|decrease|template`: cluster-autoscaler's calls,
//! made over gRPC exactly as cluster-autoscaler makes them (SPEC §6.5), for operators and for
//! the local stack. The TLS flags are those of CA's cloud-config: a client certificate and key,
//! and the CA that signed the server's certificate.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prost::Message;
use serde::Serialize;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::provider::service::OUT_OF_RESOURCES;
use crate::provider::wire::cloud_provider_client::CloudProviderClient;
use crate::provider::wire::instance_status::InstanceState;
use crate::provider::wire::*;

use super::output::grid;
use super::{Error, ViewFormat, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The provider's address, `host:port` (the host is also the TLS server name).
    #[arg(
        long,
        env = "FLEET_GRPC_ADDR",
        default_value = "127.0.0.1:8086",
        global = true
    )]
    pub grpc_addr: String,
    /// The client certificate (PEM): with it the call uses mutual TLS, as CA's `cert`.
    #[arg(long, env = "FLEET_TLS_CERT", global = true)]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM), as CA's `key`.
    #[arg(long, env = "FLEET_TLS_KEY", global = true)]
    pub tls_key: Option<PathBuf>,
    /// The CA that signed the server's certificate (PEM), as CA's `cacert`.
    #[arg(long, env = "FLEET_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Each call's deadline, as CA's `grpc_timeout`.
    #[arg(long, default_value = "5s", value_parser = args::positive_duration, global = true)]
    pub grpc_timeout: Duration,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ViewFormat::Table, global = true)]
    pub format: ViewFormat,
    #[command(subcommand)]
    pub call: Call,
}

#[derive(Debug, clap::Subcommand)]
pub enum Call {
    /// NodeGroups, and each group's NodeGroupTargetSize.
    Groups,
    /// NodeGroupNodes: the group's instances and their states.
    Nodes { group: String },
    /// NodeGroupIncreaseSize by N machines.
    Increase { group: String, delta: i32 },
    /// NodeGroupDeleteNodes: each NODE is a provider ID (`scheme://...`) or a node name.
    Delete {
        group: String,
        #[arg(required = true)]
        nodes: Vec<String>,
    },
    /// NodeGroupDecreaseTargetSize by N pending requests.
    Decrease {
        group: String,
        #[arg(allow_negative_numbers = true)]
        delta: i32,
    },
    /// NodeGroupTemplateNodeInfo: the node a machine of the group becomes.
    Template { group: String },
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        Error::Usage(anyhow::Error::new(e).context(format!("reading {flag} {}", path.display())))
    })
}

/// A refusal the user can act on is exit 2; the provider out of reach or failing is exit 1.
fn status_error(method: &str, status: tonic::Status) -> Error {
    let e = anyhow::anyhow!(
        "{method}: {} ({:?})",
        if status.message().is_empty() {
            "no message"
        } else {
            status.message()
        },
        status.code()
    );
    match status.code() {
        Code::InvalidArgument
        | Code::NotFound
        | Code::OutOfRange
        | Code::FailedPrecondition
        | Code::ResourceExhausted
        | Code::AlreadyExists => Error::Usage(e),
        _ => Error::Runtime(e),
    }
}

impl Args {
    async fn client(&self) -> Result<CloudProviderClient<Channel>, Error> {
        let host = self
            .grpc_addr
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                Error::usage(format!(
                    "invalid --grpc-addr {:?}: write host:port, like 127.0.0.1:8086",
                    self.grpc_addr
                ))
            })?
            .to_owned();
        let tls = match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
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
                return Err(Error::usage(
                    "--tls-cert, --tls-key and --tls-ca go together, as cert, key and cacert do \
                     in cluster-autoscaler's cloud-config: give all three (mutual TLS) or none \
                     (plaintext)",
                ));
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", self.grpc_addr))
            .map_err(|e| {
                Error::Usage(
                    anyhow::Error::new(e)
                        .context(format!("invalid --grpc-addr {}", self.grpc_addr)),
                )
            })?
            .timeout(self.grpc_timeout)
            .connect_timeout(self.grpc_timeout);
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).map_err(|e| {
                Error::Usage(anyhow::Error::new(e).context("the TLS files do not make a client"))
            })?;
        }
        let channel = endpoint.connect().await.map_err(|e| {
            Error::Runtime(anyhow::Error::new(e).context(format!(
                "cannot reach the provider at {}: is `fleet serve` running with --grpc-addr {}?",
                self.grpc_addr, self.grpc_addr
            )))
        })?;
        Ok(CloudProviderClient::new(channel))
    }

    pub async fn run(self, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        if matches!(self.call, Call::Decrease { delta: 0, .. }) {
            return Err(Error::usage(
                "decrease by 0 changes nothing: give how many pending requests to take back, like 2",
            ));
        }
        let mut client = self.client().await?;
        match &self.call {
            Call::Groups => {
                let groups = client
                    .node_groups(NodeGroupsRequest {})
                    .await
                    .map_err(|s| status_error("NodeGroups", s))?
                    .into_inner()
                    .node_groups;
                let mut rows = Vec::new();
                for g in groups {
                    let target = target(&mut client, &g.id).await?;
                    rows.push(GroupRow {
                        id: g.id,
                        min_size: g.min_size,
                        max_size: g.max_size,
                        target_size: target,
                    });
                }
                if self.format == ViewFormat::Json {
                    return Ok(super::output::json(out, &rows)?);
                }
                let cells: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.id.clone(),
                            r.min_size.to_string(),
                            r.max_size.to_string(),
                            r.target_size.to_string(),
                        ]
                    })
                    .collect();
                grid(out, &["GROUP", "MIN", "MAX", "TARGET"], &cells)?;
            }
            Call::Nodes { group } => {
                let instances = client
                    .node_group_nodes(NodeGroupNodesRequest { id: group.clone() })
                    .await
                    .map_err(|s| status_error("NodeGroupNodes", s))?
                    .into_inner()
                    .instances;
                let rows: Vec<InstanceRow> = instances.into_iter().map(InstanceRow::of).collect();
                if self.format == ViewFormat::Json {
                    return Ok(super::output::json(out, &rows)?);
                }
                let cells: Vec<Vec<String>> = rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.id.clone(),
                            r.state.to_owned(),
                            r.error_class.unwrap_or("-").to_owned(),
                            r.error_message.clone().unwrap_or_else(|| "-".to_owned()),
                        ]
                    })
                    .collect();
                grid(out, &["INSTANCE", "STATE", "ERROR", "MESSAGE"], &cells)?;
            }
            Call::Increase { group, delta } => {
                let before = target(&mut client, group).await?;
                client
                    .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                        delta: *delta,
                        id: group.clone(),
                    })
                    .await
                    .map_err(|s| status_error("NodeGroupIncreaseSize", s))?;
                let after = target(&mut client, group).await?;
                writeln!(
                    out,
                    "{group}: target {before} -> {after}; the machines power on in the background (watch them with `fleet autoscaler nodes {group}`)"
                )?;
            }
            Call::Delete { group, nodes } => {
                let before = target(&mut client, group).await?;
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
                client
                    .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
                        nodes,
                        id: group.clone(),
                    })
                    .await
                    .map_err(|s| status_error("NodeGroupDeleteNodes", s))?;
                let after = target(&mut client, group).await?;
                writeln!(
                    out,
                    "{group}: target {before} -> {after}; the machines power off in the background"
                )?;
            }
            Call::Decrease { group, delta } => {
                let before = target(&mut client, group).await?;
                client
                    .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
                        delta: -delta.saturating_abs(),
                        id: group.clone(),
                    })
                    .await
                    .map_err(|s| status_error("NodeGroupDecreaseTargetSize", s))?;
                let after = target(&mut client, group).await?;
                writeln!(out, "{group}: target {before} -> {after}")?;
            }
            Call::Template { group } => {
                let answer = client
                    .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
                        id: group.clone(),
                    })
                    .await
                    .map_err(|s| status_error("NodeGroupTemplateNodeInfo", s))?
                    .into_inner();
                let node = k8s_pb::api::core::v1::Node::decode(answer.node_bytes.as_slice())
                    .map_err(|e| {
                        Error::Runtime(
                            anyhow::Error::new(e)
                                .context("the template's node bytes do not decode"),
                        )
                    })?;
                let row = TemplateRow::of(&node, answer.node_info == answer.node_bytes);
                if self.format == ViewFormat::Json {
                    return Ok(super::output::json(out, &row)?);
                }
                writeln!(out, "name:     {}", row.name)?;
                for (k, v) in &row.labels {
                    writeln!(out, "label:    {k}={v}")?;
                }
                for t in &row.taints {
                    writeln!(out, "taint:    {t}")?;
                }
                for (k, v) in &row.capacity {
                    writeln!(out, "capacity: {k}={v}")?;
                }
                for c in &row.conditions {
                    writeln!(out, "condition: {c}")?;
                }
                writeln!(
                    out,
                    "legacy field 1 carries the same bytes: {}",
                    row.legacy_field_matches
                )?;
            }
        }
        Ok(())
    }
}

async fn target(client: &mut CloudProviderClient<Channel>, group: &str) -> Result<i32, Error> {
    Ok(client
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: group.to_owned(),
        })
        .await
        .map_err(|s| status_error("NodeGroupTargetSize", s))?
        .into_inner()
        .target_size)
}

#[derive(Serialize)]
struct GroupRow {
    id: String,
    min_size: i32,
    max_size: i32,
    target_size: i32,
}

#[derive(Serialize)]
struct InstanceRow {
    id: String,
    state: &'static str,
    error_code: Option<String>,
    error_message: Option<String>,
    error_class: Option<&'static str>,
}

impl InstanceRow {
    /// Read as cluster-autoscaler reads it: an error counts only with a code.
    fn of(i: Instance) -> Self {
        let status = i.status.unwrap_or_default();
        let state = match InstanceState::try_from(status.instance_state) {
            Ok(InstanceState::InstanceRunning) => "running",
            Ok(InstanceState::InstanceCreating) => "creating",
            Ok(InstanceState::InstanceDeleting) => "deleting",
            _ => "unspecified",
        };
        let error = status.error_info.filter(|e| !e.error_code.is_empty());
        InstanceRow {
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
}

#[derive(Serialize)]
struct TemplateRow {
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    taints: Vec<String>,
    capacity: std::collections::BTreeMap<String, String>,
    conditions: Vec<String>,
    legacy_field_matches: bool,
}

impl TemplateRow {
    fn of(node: &k8s_pb::api::core::v1::Node, legacy_field_matches: bool) -> Self {
        let meta = node.metadata.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.clone().unwrap_or_default();
        TemplateRow {
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
        }
    }
}
