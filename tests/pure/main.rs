//! The pure tier (SPEC §1, CONTRIBUTING.md): no redis-server and no process of fleet's or a peer's:
//! the configuration, the layers and the code's own rules, and the Kubernetes client against a
//! mocked API server.

mod config;
mod contracts;
mod hygiene;
mod kube_contract;
mod protocol;
