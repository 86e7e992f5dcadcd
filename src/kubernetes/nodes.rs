//! The Nodes port over the API server (SPEC §3.1, §3.12): a watch into a reflector, read once a
//! pass, and fleet's writes to the Nodes.
//!
//! Sight comes from the watch itself, not from the reflector, which keeps stale objects while
//! the stream fails: an error makes the Nodes unseen until a complete list lands again. So every
//! error ends the watch and the next one lists from scratch (a resumed watch that stays quiet
//! would never say that it works again).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint as KubeTaint};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::domain::node::{Effect, NodeView, Taint, TaintEdit};
use crate::domain::slot::{NodeAction, NodeWrite};
use crate::reconcile::{ClaimMove, NodeWarning, NodeWriteError, Nodes};

use super::events::Events;

use super::{CALL_TIMEOUT, WATCH_TIMEOUT};

/// Whether the watch has listed every Node since its last error, and why not.
#[derive(Debug)]
enum Sight {
    Listed,
    Lost(String),
}

/// The Nodes as the API server shows them.
#[derive(Clone)]
pub struct KubeNodes {
    api: Api<Node>,
    store: Store<Node>,
    sight: Arc<Mutex<Sight>>,
    events: Option<Events>,
}

impl KubeNodes {
    /// Starts the watch; it runs until `stop`. The Nodes are unseen until its first list.
    pub fn start(client: Client, stop: CancellationToken) -> Self {
        let (store, writer) = reflector::store();
        let sight = Arc::new(Mutex::new(Sight::Lost(
            "the Nodes are not listed yet".to_owned(),
        )));
        let nodes = KubeNodes {
            api: Api::all(client),
            store,
            sight: sight.clone(),
            events: None,
        };
        tokio::spawn(watch(nodes.api.clone(), writer, sight, stop));
        nodes
    }

    /// Claim moves are told as Events through `events`.
    pub fn with_events(mut self, events: Events) -> Self {
        self.events = Some(events);
        self
    }

    fn set_sight(sight: &Mutex<Sight>, next: Sight) {
        if let Ok(mut s) = sight.lock() {
            *s = next;
        }
    }
}

/// The watch loop: list, then watch; on any error, sight is lost and the loop lists again after
/// a pause that doubles up to 30 s and starts again from one second after a good list.
async fn watch(
    api: Api<Node>,
    mut writer: reflector::store::Writer<Node>,
    sight: Arc<Mutex<Sight>>,
    stop: CancellationToken,
) {
    let mut pause = Duration::from_secs(1);
    loop {
        let config = watcher::Config::default().timeout(WATCH_TIMEOUT);
        let mut events = watcher(api.clone(), config).boxed();
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = events.next() => next,
            };
            match next {
                Some(Ok(event)) => {
                    writer.apply_watcher_event(&event);
                    match event {
                        watcher::Event::InitDone => {
                            let was_lost = matches!(
                                *sight.lock().unwrap_or_else(|e| e.into_inner()),
                                Sight::Lost(_)
                            );
                            KubeNodes::set_sight(&sight, Sight::Listed);
                            if was_lost {
                                info!("the Kubernetes Nodes are listed: bound slots seen again");
                            }
                            pause = Duration::from_secs(1);
                        }
                        // A list in progress replaces the store only at its end.
                        watcher::Event::Init
                        | watcher::Event::InitApply(_)
                        | watcher::Event::Apply(_)
                        | watcher::Event::Delete(_) => {}
                    }
                }
                Some(Err(e)) => {
                    warn!(error = %e, "the Kubernetes Node watch broke: the slots bound to a Node are blind until the Nodes are listed again");
                    KubeNodes::set_sight(&sight, Sight::Lost(e.to_string()));
                    break;
                }
                None => break,
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

/// What fleet reads of a Node (SPEC §3.1): its identity, provider ID, whether its Ready
/// condition is exactly True, cordoned, and its taints. A taint with an effect Kubernetes does
/// not define is left out of the view (it matches no readiness taint and is not fleet's), and
/// kept by every write, which starts from the Node's own list.
pub fn view(node: &Node) -> NodeView {
    let spec = node.spec.as_ref();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    NodeView {
        name: node.name_any(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        resource_version: node.resource_version().unwrap_or_default(),
        provider_id: spec
            .and_then(|s| s.provider_id.clone())
            .filter(|p| !p.is_empty()),
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .map(|ts| ts.iter().filter_map(domain_taint).collect())
            .unwrap_or_default(),
    }
}

fn effect(name: &str) -> Option<Effect> {
    match name {
        "NoSchedule" => Some(Effect::NoSchedule),
        "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
        "NoExecute" => Some(Effect::NoExecute),
        _ => None,
    }
}

fn domain_taint(t: &KubeTaint) -> Option<Taint> {
    Some(Taint {
        key: t.key.clone(),
        value: t.value.clone().filter(|v| !v.is_empty()),
        effect: effect(&t.effect)?,
    })
}

/// The Node's new taint list: its own list, as read (every field of everyone else's taints
/// kept, `timeAdded` included), without the taints the edit removes, with the ones it adds.
pub fn edited(taints: &[KubeTaint], edit: &TaintEdit) -> Vec<KubeTaint> {
    let removed = |t: &KubeTaint| effect(&t.effect).is_some_and(|e| edit.removes(&t.key, e));
    taints
        .iter()
        .filter(|t| !removed(t))
        .cloned()
        .chain(edit.add.iter().map(|t| KubeTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().to_owned(),
            time_added: None,
        }))
        .collect()
}

/// The merge patch of a taint edit: the whole list (`spec.taints` is atomic), guarded by the
/// resourceVersion the list was read at, so a Node changed since is refused with 409.
pub fn taints_patch(resource_version: &str, taints: &[KubeTaint]) -> serde_json::Value {
    json!({
        "metadata": { "resourceVersion": resource_version },
        "spec": { "taints": taints },
    })
}

/// The merge patch that fills an empty `spec.providerID`.
pub fn provider_id_patch(resource_version: &str, provider_id: &str) -> serde_json::Value {
    json!({
        "metadata": { "resourceVersion": resource_version },
        "spec": { "providerID": provider_id },
    })
}

fn write_error(e: kube::Error) -> NodeWriteError {
    match e {
        kube::Error::Api(status) if status.code == 409 || status.code == 404 => {
            NodeWriteError::Conflict(status.message)
        }
        other => NodeWriteError::Failed(other.to_string()),
    }
}

async fn bounded<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, NodeWriteError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map_err(write_error),
        Err(_) => Err(NodeWriteError::Failed(format!(
            "the API server did not answer within {CALL_TIMEOUT:?}"
        ))),
    }
}

impl Nodes for KubeNodes {
    async fn read(&self) -> Result<Vec<NodeView>, String> {
        if let Sight::Lost(why) = &*self.sight.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(why.clone());
        }
        Ok(self.store.state().iter().map(|n| view(n)).collect())
    }

    fn observed(&self) -> bool {
        true
    }

    fn moved(&self, m: ClaimMove) {
        if let Some(events) = &self.events {
            events.tell(m);
        }
    }

    fn warned(&self, w: NodeWarning) {
        if let Some(events) = &self.events {
            events.warn(w);
        }
    }

    async fn write(&self, w: &NodeWrite) -> Result<(), NodeWriteError> {
        let params = PatchParams::default();
        match &w.action {
            NodeAction::Taints(edit) => {
                // The list is rebuilt from the Node the pass judged: a newer one in the store
                // means the judgment is stale, and the API server would refuse it anyway.
                let node = self
                    .store
                    .get(&ObjectRef::new(&w.node))
                    .filter(|n| n.resource_version().as_deref() == Some(&w.resource_version))
                    .ok_or_else(|| {
                        NodeWriteError::Conflict(format!(
                            "Node {} changed since the pass read it",
                            w.node
                        ))
                    })?;
                let taints = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default();
                let patch = taints_patch(&w.resource_version, &edited(&taints, edit));
                bounded(self.api.patch(&w.node, &params, &Patch::Merge(&patch))).await?;
            }
            NodeAction::ProviderId(id) => {
                let patch = provider_id_patch(&w.resource_version, id);
                bounded(self.api.patch(&w.node, &params, &Patch::Merge(&patch))).await?;
            }
            NodeAction::Delete => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(w.uid.clone()),
                        resource_version: Some(w.resource_version.clone()),
                    }),
                    ..DeleteParams::default()
                };
                bounded(self.api.delete(&w.node, &params)).await?;
            }
        }
        Ok(())
    }
}
