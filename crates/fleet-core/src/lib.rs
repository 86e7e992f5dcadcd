//! fleet's pure core (SPEC §1): every rule, and the units they are stated in.
//!
//! - [`domain`]: pure decisions. No I/O, no clock, no environment, no async; `now` is a
//!   parameter. The crate's dependencies hold this: none of them can reach a socket, a file, the
//!   clock or a runtime.
//! - [`units`]: durations and quantities read from text, for the configuration and the flags.

pub mod domain;
pub mod units;
