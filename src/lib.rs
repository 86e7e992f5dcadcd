//! fleet: a fleet presence service and power-lifecycle controller.
//!
//! Machines ("benches") write their own heartbeat key in Redis, each write with its own TTL and
//! an optional hold. The pure `domain::state` module decides UP, HELD or DOWN from the key and
//! its TTL alone; load rides beside it and never has a say. The module map follows the layers of
//! SPEC §1: dependencies point downward only.
//!
//! - [`domain`]: pure decisions. No I/O, no clock, no environment, no async; `now` is a parameter.
//! - [`store`]: Redis. One module names every key; every store call is one round trip.
//! - [`agent`]: the heartbeat agent that a bench runs.
//! - [`cli`]: one file per verb; rows are built from domain values.
//! - [`testing`]: a private `redis-server` for tests, benchmarks and the local stack.

pub mod agent;
pub mod cli;
pub mod config;
pub mod domain;
pub mod lifecycle;
pub mod provider;
pub mod reconcile;
pub mod requests;
pub mod store;
pub mod telemetry;
pub mod testing;
