//! Operations as Kubernetes Jobs (SPEC §4.2, Jobs as operations). A group whose `startup` or
//! `shutdown` names a `job` has it run as a Job in fleet's namespace rather than as a command
//! through the operation wrapper; the controller does not tell them apart (one `Runner`,
//! `lifecycle::Dispatch`).
//!
//! - `spec`: the Job an operation becomes, and the operation read back from a Job (pure).
//! - `outcome`: a Job's conditions to an outcome, its pods to a tail (pure).
//! - `api`: the calls, each bounded by `CALL_TIMEOUT`.
//! - `runner`: `JobRunner`, create or adopt, then wait for the outcome.
//! - `reporter`: `Reporter`, the leader's sweep that writes finished Jobs' outcomes to the
//!   store, as the wrapper does, for a controller that was not there to wait.
//!
//! The calls it makes are `api::CALLS`, for the RBAC that grants them.

pub mod api;
pub mod outcome;
pub mod reporter;
pub mod runner;
pub mod spec;

pub use api::{CallError, Jobs, JobsError};
pub use outcome::{Finished, JobState};
pub use reporter::{Reporter, Swept};
pub use runner::JobRunner;
