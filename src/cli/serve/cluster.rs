//! `fleet serve --kubernetes` (SPEC §3.12): the client, the Nodes watched, Job operations and
//! the Job reporter beside the controller. Built with the `kubernetes` feature only.

use tokio::sync::watch;
use tracing::info;

use crate::kubernetes::client::{self, Connected, Settings};
use crate::kubernetes::events::Events;
use crate::kubernetes::jobs::{JobRunner, Reporter as JobReporter};
use crate::kubernetes::nodes::KubeNodes;
use crate::lifecycle::{Dispatch, Exec};
use crate::store::claims::ClaimStore;

use super::super::{Ctx, Error};
use super::{Args, Parts, WRAPPER, report_to};

impl Args {
    /// The Kubernetes client, with `--kubernetes`. Building it contacts nothing: an API server
    /// out of reach is blindness for the bound slots, not a failed start; a configuration that
    /// cannot be found or read is the caller's input (exit 2).
    pub(super) async fn kube(&self) -> Result<Option<Connected>, Error> {
        if !self.kubernetes {
            return Ok(None);
        }
        let settings = Settings {
            kubeconfig: self.kubeconfig.clone(),
            context: self.kube_context.clone(),
            namespace: self.kube_namespace.clone(),
        };
        let connected = client::connect(&settings)
            .await
            .map_err(|e| Error::Usage(e.into()))?;
        info!(namespace = %connected.namespace, "Kubernetes: watching the Nodes, Jobs in this namespace");
        Ok(Some(connected))
    }

    /// The controller with Kubernetes: the Nodes watched (claim moves told as Events), Job
    /// operations beside commands, and the Job reporter while this process leads.
    pub(super) async fn control_in_cluster(
        &self,
        ctx: &Ctx,
        parts: Parts,
        k: Connected,
        leadership: watch::Receiver<Option<String>>,
        tasks: &tokio_util::task::TaskTracker,
    ) {
        let stop = parts.shutdown.clone();
        let reporter = JobReporter::new(
            k.client.clone(),
            &k.namespace,
            ClaimStore::new(parts.conn.clone(), ctx.keys.clone()),
        );
        tasks.spawn(reporter.run(leadership, stop.clone()));
        let events = Events::start(
            k.client.clone(),
            k.namespace.clone(),
            self.holder(),
            parts.metrics.kubernetes_events_dropped.clone(),
            stop.clone(),
        );
        let nodes = KubeNodes::start(k.client.clone(), stop).with_events(events);
        let runner = Dispatch {
            commands: Exec::new(WRAPPER).reporting_to(report_to(ctx)),
            jobs: JobRunner::new(k.client, &k.namespace),
        };
        self.control(ctx, parts, nodes, runner).await;
    }
}
