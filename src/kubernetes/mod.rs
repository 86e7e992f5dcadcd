//! The Kubernetes side (SPEC §3.12): a thin layer behind the ports the controller already has.
//! `nodes` watches the Nodes into a reflector and writes fleet's taints, provider IDs and stale
//! Node deletions; `events` publishes one Event per claim move from a bounded queue; `jobs` runs
//! operations as Kubernetes Jobs; [`client`] builds the client from `fleet serve`'s settings
//! (`--kubeconfig`, `--kube-context`, the usual kubeconfig rules, else in-cluster). Without
//! `fleet serve --kubernetes` none of it is built.
//!
//! Every call is bounded: the client has no retry policy of its own (kube's default one can wait
//! up to 1000 s on a 429/503/504), every call but the watch runs under `CALL_TIMEOUT`, and the
//! watch asks the server to end it every `WATCH_TIMEOUT`, so a dead connection is noticed within
//! about a minute rather than five.

pub mod client;
pub mod events;
pub mod jobs;
pub mod nodes;

use std::time::Duration;

/// The bound on one API call other than a watch.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The server-side timeout of a watch request: the longest a dead connection goes unnoticed.
pub const WATCH_TIMEOUT: u32 = 50;
