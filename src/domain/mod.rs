//! The pure core: decisions as functions of their inputs (SPEC §1).
//!
//! Nothing here does I/O, reads a clock or the environment, or is async. The caller passes `now`
//! and logs the decisions these functions return.

pub mod name;
pub mod state;
