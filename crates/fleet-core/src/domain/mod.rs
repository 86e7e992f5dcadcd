//! The pure core: decisions as functions of their inputs (SPEC §1).
//!
//! Nothing here does I/O, reads a clock or the environment, or is async. The caller passes `now`
//! and logs the decisions these functions return.
//!
//! - [`name`]: bench, group and claim names, hold reasons and environment variable names,
//!   validated once (SPEC §2.1).
//! - [`heartbeat`]: the heartbeat value and the hold request read by the protocol's rules, in
//!   strict JSON (docs/protocol.md §2).
//! - [`state`]: presence, UP / HELD / DOWN from a heartbeat key (SPEC §2).
//! - [`beat`]: the agent's rules: the hold it carries, what it announces, when it beats again at
//!   once (docs/protocol.md §5).
//! - [`power`]: the machine's observed power, on or off, from its presence (SPEC §3.1).
//! - [`law`]: the input law, the triple to the report, the state and what fires (SPEC §3.1).
//! - [`budget`]: the power-on budget: room and grants in request order (SPEC §4.11).
//! - [`claim`]: claim phases, legal moves, deadlines, attempts, machine-gone (SPEC §3.2–§3.8).
//! - [`fsm`]: the node state machine (SPEC §3.4).
//! - [`node`]: the usability predicate (SPEC §3.1).
//! - [`operation`]: the slot's operation record and the rules that read it (SPEC §4.3, §5.4).
//! - [`energy`]: the energy ledger: time on and off by UTC day, what powering off saved
//!   (SPEC §4.12).
//! - [`history`]: the slot's history and the group's status, one writer (SPEC §3.10).
//! - [`slot`]: one slot's pass as a plan of steps, with its report (SPEC §4.5).
//! - [`timeline`]: a claim's timeline entries (SPEC §4.4).
//! - [`sight`]: blindness and its grace, mass vanishing, the windows of a wiped store (SPEC §5.2).
//! - [`text`]: the characters a text a person reads may hold: no control, no bidi control
//!   (SPEC §2.1).
//! - [`wake`]: when the controller passes next to see a key's expiry (SPEC §4.5).
//! - [`sizing`]: a group's sizes for cluster-autoscaler: target, room, reachable max, the
//!   plans of its changes (SPEC §6.3).

pub mod beat;
pub mod budget;
pub mod claim;
pub mod energy;
pub mod fsm;
pub mod heartbeat;
pub mod history;
pub mod law;
pub mod name;
pub mod node;
pub mod operation;
pub mod power;
pub mod sight;
pub mod sizing;
pub mod slot;
pub mod state;
pub mod text;
pub mod timeline;
pub mod wake;
