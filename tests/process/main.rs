//! The process tier (SPEC §1, CONTRIBUTING.md): fleet's binaries as processes (`CARGO_BIN_EXE_*`),
//! and the real peers that install here (ipmi_sim, sushy-tools, chromium), against real
//! redis-servers.

#[path = "../support/mod.rs"]
mod support;

mod acl;
mod agent;
mod autoscaler;
mod bmc;
mod browser_smoke;
mod budget;
mod cli;
mod cluster;
mod dist;
mod drivers;
mod energy;
mod files;
mod hostile;
mod ipmi;
mod kube_scenario;
mod leaders;
mod manifests;
mod operations;
mod operator;
mod page;
mod page_browser;
mod page_hostile;
mod page_views;
mod protocol;
mod provider_hostile;
mod redfish;
mod replicas;
mod sentinel;
mod serve;
mod up;
