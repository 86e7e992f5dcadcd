//! Power without scripts (SPEC §4.10): fleet's own power drivers, run behind the operation port
//! like a command or a Job. Each driver turns an intent (on, off) into its protocol's calls and
//! reports what it did as an audit record; none decides anything about claims. The heartbeat
//! stays the observation of record: a driver's power reading is a second opinion that confirms
//! an off landed, never what makes a machine count as on.
//!
//! - [`action`]: what a driver is asked and answers: the intent, the power reading, the audit
//!   record, the error, and the password, which never shows.
//! - [`drive`]: running a slot's driver for one operation, in the operation wrapper.
//! - `wol`: Wake-on-LAN magic packets (on only).
//! - `redfish`: `ComputerSystem.Reset` and `PowerState` over HTTPS.
//! - `ipmi`: chassis power through `ipmitool` (LAN+).
//! - `secrets`: the BMC passwords fleet took out of its environment at start.
//!
//! The leader's periodic reading of each Redfish and IPMI slot's BMC runs with the controller
//! (`reconcile::bmc`), over `drive::read_state`.
//!
//! Secrets (BMC passwords) are read when an operation runs, from a file or an environment
//! variable named in the configuration (held in [`secrets`] since start); they are held in
//! [`Secret`], whose `Debug` and `Display` never show them.

pub mod action;
pub mod drive;
pub mod ipmi;
pub mod redfish;
pub mod secrets;
pub mod wol;

pub use self::action::{Audit, Bmc, Intent, PowerError, PowerState, SOFT_SHARE, Secret, Sent};
