//! The redis tier (SPEC §1, CONTRIBUTING.md): fleet's library in this process against a real
//! redis-server the harness starts, one per test (an operation's wrapper is the `fleet` binary).

#[path = "../support/mod.rs"]
mod support;

mod claims_store;
mod controller;
mod dra;
mod faults;
mod jobs_contract;
mod lease;
mod legacy_shape;
mod presence;
mod pricing;
mod provider;
mod verbs;
mod wake;
