//! The long tier (SPEC §1, CONTRIBUTING.md): chaos, soak, failover chaos and the real-cluster
//! tests. Each runs a short, seeded form in CI; the long forms are `#[ignore]`d
//! (`cargo test --test long -- --ignored`).

#[path = "../support/mod.rs"]
mod support;

mod chaos;
mod kube_cluster;
mod sentinel_chaos;
mod soak;
