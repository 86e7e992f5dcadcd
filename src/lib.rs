//! fleet: a fleet presence service and power-lifecycle controller.
//!
//! Machines ("benches") write their own heartbeat key in Redis, each write with its own TTL and
//! an optional hold. The pure `domain::state` module decides UP, HELD or DOWN from the key and
//! its TTL alone; load rides beside it and never has a say.
//!
//! The module map follows the layers of SPEC §1, from the top down; the number is the layer. A
//! module imports only modules of a lower layer, never one of its own or a higher one
//! (`tests/pure/hygiene.rs` reads the imports and holds this).
//!
//! - [`cli`] (8): the `fleet` command line, one file per verb; rows are built from domain values.
//! - [`agent`] (7): the heartbeat agent that a bench runs.
//! - [`provider`] (7): cluster-autoscaler's `externalgrpc` provider; its wire types stay inside.
//! - [`kubernetes`] (7): the Kubernetes client behind the Nodes port and the Job runner: the
//!   Node watch and writes, Events, Jobs.
//! - [`page`] (7): the live page of `fleet serve`; its actions run the verbs `cli` hands it.
//! - [`reconcile`] (6): the lifecycle controller: the loop, leadership, one pass, the executor
//!   of `domain::slot`'s plans, and the BMC reading that runs with it.
//! - [`views`] (6): the read model the verbs and the page share, and what a verb runs with.
//! - [`requests`] (5): the command layer that makes and ends claims, for `cli` and `provider`.
//! - [`lifecycle`] (5): the operations that power a slot's machine on and off, and their
//!   wrapper's work (a command, or a driver of `power`).
//! - [`telemetry`] (5): the metrics with their typed labels, health, and their HTTP server.
//! - [`store`] (4): Redis. One module names every key; every store call is one round trip.
//! - [`config`] (3): the configuration file of `fleet serve` (groups, slots) and its validation;
//!   a slot's driver is read by `power`.
//! - [`power`] (2): fleet's own power drivers (Wake-on-LAN, Redfish, IPMI) and the agent's off
//!   through a port, each with its configuration beside its code; they know no Redis and no
//!   configuration file.
//! - [`domain`] (1): pure decisions. No I/O, no clock, no environment, no async; `now` is a
//!   parameter.
//! - [`units`] (0): durations and quantities read from text, for the configuration and the flags.

pub mod agent;
pub mod cli;
pub mod config;
pub use fleet_core::domain;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod lifecycle;
#[cfg(feature = "page")]
pub mod page;
pub mod power;
#[cfg(feature = "provider")]
pub mod provider;
pub mod reconcile;
pub mod requests;
pub mod store;
pub mod telemetry;
pub mod views;
pub use fleet_core::units;
