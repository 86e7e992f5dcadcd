//! `fleet autoscaler groups|nodes|increase|delete|decrease|template`: cluster-autoscaler's calls,
//! made over gRPC exactly as cluster-autoscaler makes them (SPEC §6.5), for operators and for
//! the local stack. The TLS flags are those of CA's cloud-config: a client certificate and key,
//! and the CA that signed the server's certificate.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::provider::client::{Client, ClientError, Target};

use super::output::grid;
use super::output::{Format, TABLE_JSON};
use super::{Error, args};

#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Provider options")]
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
    #[arg(long, env = "FLEET_CLIENT_TLS_CERT", global = true)]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM), as CA's `key`.
    #[arg(
        long,
        env = "FLEET_CLIENT_TLS_KEY",
        global = true,
        hide_env_values = true
    )]
    pub tls_key: Option<PathBuf>,
    /// The CA that signed the server's certificate (PEM), as CA's `cacert`.
    #[arg(long, env = "FLEET_CLIENT_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Each call's deadline, as CA's `grpc_timeout`.
    #[arg(long, default_value = "5s", value_parser = args::call_timeout, allow_hyphen_values = true, global = true)]
    pub grpc_timeout: Duration,
    /// Output format of `groups` and `nodes`.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = Format::offered(TABLE_JSON), global = true)]
    pub format: Format,
    #[command(subcommand)]
    pub call: Call,
}

#[derive(Debug, clap::Subcommand)]
pub enum Call {
    /// NodeGroups, and each group's NodeGroupTargetSize.
    Groups,
    /// NodeGroupNodes: the group's instances and their states.
    Nodes {
        /// The node group (`fleet autoscaler groups` lists them).
        group: String,
    },
    /// NodeGroupIncreaseSize by N machines.
    Increase {
        /// The node group.
        group: String,
        /// How many machines to add.
        #[arg(value_name = "N")]
        delta: i32,
    },
    /// NodeGroupDeleteNodes: each NODE is a provider ID (`scheme://...`) or a node name.
    Delete {
        /// The node group.
        group: String,
        /// The nodes to remove: provider IDs (`fleet://bench-01`) or node names.
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
    },
    /// NodeGroupDecreaseTargetSize by N pending requests.
    Decrease {
        /// The node group.
        group: String,
        /// How many pending requests to take back.
        #[arg(allow_negative_numbers = true, value_name = "N")]
        delta: i32,
    },
    /// NodeGroupTemplateNodeInfo: the node a machine of the group becomes.
    Template {
        /// The node group.
        group: String,
    },
}

/// A refusal the user can act on is exit 2; the provider out of reach or failing is exit 1.
fn client_error(e: ClientError) -> Error {
    if e.is_refusal() {
        Error::Usage(e.into())
    } else {
        Error::Runtime(e.into())
    }
}

#[derive(tabled::Tabled)]
struct GroupLine {
    #[tabled(rename = "GROUP")]
    group: String,
    #[tabled(rename = "MIN")]
    min: i32,
    #[tabled(rename = "MAX")]
    max: i32,
    #[tabled(rename = "TARGET")]
    target: i32,
}

#[derive(tabled::Tabled)]
struct NodeLine {
    #[tabled(rename = "INSTANCE")]
    instance: String,
    #[tabled(rename = "STATE")]
    state: String,
    #[tabled(rename = "ERROR")]
    error: String,
    #[tabled(rename = "MESSAGE")]
    message: String,
}

impl Args {
    pub async fn run(self, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        if matches!(self.call, Call::Decrease { delta: 0, .. }) {
            return Err(Error::usage(
                "decrease by 0 changes nothing: give how many pending requests to take back, like 2",
            ));
        }
        let mut client = Client::connect(&self.target())
            .await
            .map_err(client_error)?;
        let json = self.format == Format::Json;
        match &self.call {
            Call::Groups => {
                let rows = client.groups().await.map_err(client_error)?;
                write_groups(out, &rows, json)?;
            }
            Call::Nodes { group } => {
                let rows = client.nodes(group).await.map_err(client_error)?;
                write_nodes(out, &rows, json)?;
            }
            Call::Increase { group, delta } => {
                let before = client.target(group).await.map_err(client_error)?;
                client.increase(group, *delta).await.map_err(client_error)?;
                let after = client.target(group).await.map_err(client_error)?;
                writeln!(
                    out,
                    "{group}: target {before} -> {after}; the machines power on in the background (watch them with `fleet autoscaler nodes {group}`)"
                )?;
            }
            Call::Delete { group, nodes } => {
                let before = client.target(group).await.map_err(client_error)?;
                client.delete(group, nodes).await.map_err(client_error)?;
                let after = client.target(group).await.map_err(client_error)?;
                writeln!(
                    out,
                    "{group}: target {before} -> {after}; the machines power off in the background"
                )?;
            }
            Call::Decrease { group, delta } => {
                let before = client.target(group).await.map_err(client_error)?;
                client.decrease(group, *delta).await.map_err(client_error)?;
                let after = client.target(group).await.map_err(client_error)?;
                writeln!(out, "{group}: target {before} -> {after}")?;
            }
            Call::Template { group } => {
                let row = client.template(group).await.map_err(client_error)?;
                write_template(out, &row, json)?;
            }
        }
        Ok(())
    }

    /// The provider to call, as the flags name it.
    fn target(&self) -> Target {
        Target {
            addr: self.grpc_addr.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            ca: self.tls_ca.clone(),
            timeout: self.grpc_timeout,
        }
    }
}

/// The node groups, their bounds and target sizes.
fn write_groups(
    out: &mut dyn Write,
    rows: &[crate::views::rows::AutoscalerGroupRow],
    json: bool,
) -> std::io::Result<()> {
    if json {
        return super::output::json_rows(out, "autoscaler-groups", rows, false);
    }
    grid(
        out,
        rows.iter().map(|r| GroupLine {
            group: r.id.clone(),
            min: r.min_size,
            max: r.max_size,
            target: r.target_size,
        }),
    )
}

/// A group's instances, their states and errors.
fn write_nodes(
    out: &mut dyn Write,
    rows: &[crate::views::rows::AutoscalerInstanceRow],
    json: bool,
) -> std::io::Result<()> {
    if json {
        return super::output::json_rows(out, "autoscaler-nodes", rows, false);
    }
    grid(
        out,
        rows.iter().map(|r| NodeLine {
            instance: r.id.clone(),
            state: r.state.to_owned(),
            error: r.error_class.unwrap_or("-").to_owned(),
            message: r.error_message.clone().unwrap_or_else(|| "-".to_owned()),
        }),
    )
}

/// The node a machine of the group becomes, a line a field.
fn write_template(
    out: &mut dyn Write,
    row: &crate::views::rows::AutoscalerTemplateRow,
    json: bool,
) -> std::io::Result<()> {
    if json {
        return super::output::json_doc(out, "autoscaler-template", row, false);
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
    for d in &row.devices {
        writeln!(out, "device:   {d}")?;
    }
    writeln!(
        out,
        "legacy field 1 carries the same bytes: {}",
        row.legacy_field_matches
    )
}
