//! Redis: connecting, the key schema, and the presence store (SPEC §2.3 to §2.7).
//!
//! Every key is named in [`keys`]; every store method is one round trip.

pub mod acl;
pub mod bmc;
pub mod catalog;
pub mod claims;
mod claims_read;
pub mod cluster;
pub mod conn;
pub mod connect;
pub mod counting;
pub mod energy;
pub mod groups;
pub mod keys;
pub mod lease;
pub mod operation_record;
pub mod operations;
pub mod power_off;
pub mod presence;
pub mod replicas;
pub mod script;
pub mod sentinel;
pub mod slots;
pub mod url;
