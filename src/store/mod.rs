//! Redis: connecting, the key schema, and the presence store (SPEC §2.3 to §2.7).
//!
//! Every key is named in [`keys`]; every store method is one round trip.

// The transport (connecting, URLs, Sentinel, Cluster, one call over any topology) is a crate of its
// own below the records: it knows no key and no record (SPEC §1).
pub use fleet_redis::{cluster, conn, connect, counting, sentinel, url};

pub mod acl;
pub mod bmc;
pub mod catalog;
pub mod claims;
mod claims_read;
pub mod energy;
pub mod fenced;
pub mod groups;
pub mod keys;
pub mod lease;
pub mod operation_record;
pub mod operations;
pub mod power_off;
pub mod presence;
pub mod replicas;
pub mod script;
pub mod slots;
