//! The calls fleet makes about its Jobs, each bounded by `CALL_TIMEOUT` (SPEC §3.12): create a
//! Job, read one, list the pods of one, list fleet's Jobs. Nothing here decides; a refusal is
//! returned with the name it concerns.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use super::spec::{JOB_NAME_LABEL, MANAGED_BY, MANAGER};
use crate::kubernetes::CALL_TIMEOUT;

/// Every call this module makes, as (verb, API group, resource) for the RBAC that grants them:
/// create, get and list Jobs, list their pods. The contract tests check each against the
/// requests they see (`tests/redis/jobs_contract.rs`).
pub const CALLS: [(&str, &str, &str); 4] = [
    ("create", "batch", "jobs"),
    ("get", "batch", "jobs"),
    ("list", "batch", "jobs"),
    ("list", "", "pods"),
];

/// Why one call gave no answer to use.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("no answer within {}s", CALL_TIMEOUT.as_secs())]
    Timeout,
    #[error("the API server refused or could not be reached")]
    Kube(#[source] kube::Error),
}

impl CallError {
    /// The API server's own status code, when it answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            CallError::Kube(kube::Error::Api(status)) => Some(status.code),
            CallError::Kube(_) | CallError::Timeout => None,
        }
    }

    /// Whether the server surely did not act on the call: it answered, with a refusal. A
    /// timeout or a lost connection may come after the server acted.
    pub fn answered(&self) -> bool {
        self.code().is_some()
    }
}

/// An error and its causes in words, for a tail and a log: the API server's refusal said as its
/// code, reason and message (kube's own rendering repeats the whole status).
pub fn words(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(kube::Error::Api(status)) = err.downcast_ref::<kube::Error>() {
            parts.push(format!(
                "{} {}: {}",
                status.code, status.reason, status.message
            ));
            break;
        }
        parts.push(err.to_string());
        next = err.source();
    }
    parts.join(": ")
}

/// A call about Jobs that failed, naming what it was about.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error("creating the Job {name}")]
    Create {
        name: String,
        #[source]
        source: CallError,
    },
    #[error("reading the Job {name}")]
    Get {
        name: String,
        #[source]
        source: CallError,
    },
    #[error("listing the pods of the Job {name}")]
    Pods {
        name: String,
        #[source]
        source: CallError,
    },
    #[error("listing fleet's Jobs in namespace {namespace}")]
    List {
        namespace: String,
        #[source]
        source: CallError,
    },
}

/// How a create ended.
#[derive(Debug)]
pub enum Created {
    /// The server made it: the Job as it stored it.
    New(Box<Job>),
    /// A Job of that name was there already (409 AlreadyExists).
    Exists,
}

/// fleet's Jobs and their pods, in one namespace.
#[derive(Clone)]
pub struct Jobs {
    jobs: Api<Job>,
    pods: Api<Pod>,
    namespace: String,
}

/// Runs one call under `CALL_TIMEOUT`.
async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(CallError::Kube(e)),
        Err(_) => Err(CallError::Timeout),
    }
}

impl Jobs {
    pub fn new(client: Client, namespace: &str) -> Self {
        Jobs {
            jobs: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Creates `job`, as fleet's field manager.
    pub async fn create(&self, job: &Job) -> Result<Created, JobsError> {
        let name = job.metadata.name.clone().unwrap_or_default();
        let params = PostParams {
            dry_run: false,
            field_manager: Some(MANAGER.to_owned()),
        };
        match bounded(self.jobs.create(&params, job)).await {
            Ok(job) => Ok(Created::New(Box::new(job))),
            Err(CallError::Kube(kube::Error::Api(status))) if status.is_already_exists() => {
                Ok(Created::Exists)
            }
            Err(source) => Err(JobsError::Create { name, source }),
        }
    }

    /// The Job named `name`; `None` when there is none.
    pub async fn get(&self, name: &str) -> Result<Option<Job>, JobsError> {
        bounded(self.jobs.get_opt(name))
            .await
            .map_err(|source| JobsError::Get {
                name: name.to_owned(),
                source,
            })
    }

    /// The pods the Job controller made for the Job named `name`.
    pub async fn pods(&self, name: &str) -> Result<Vec<Pod>, JobsError> {
        let params = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}"));
        bounded(self.pods.list(&params))
            .await
            .map(|list| list.items)
            .map_err(|source| JobsError::Pods {
                name: name.to_owned(),
                source,
            })
    }

    /// Every Job fleet made in the namespace.
    pub async fn list(&self) -> Result<Vec<Job>, JobsError> {
        let params = ListParams::default().labels(&format!("{MANAGED_BY}={MANAGER}"));
        bounded(self.jobs.list(&params))
            .await
            .map(|list| list.items)
            .map_err(|source| JobsError::List {
                namespace: self.namespace.clone(),
                source,
            })
    }
}
