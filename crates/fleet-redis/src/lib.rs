//! fleet's Redis transport: how fleet reaches Redis, whatever the topology, and nothing of what it
//! stores there (SPEC §1, §2.7). The records (keys, claims, presence, fences) are `fleet::store`,
//! above this crate; it names this crate's modules directly (`fleet_redis::connect`, ...).
//!
//! - [`url`]: the `redis://`, `rediss://`, `redis+unix://`, `redis+sentinel://` and
//!   `redis+cluster://` URLs, read without echoing a password.
//! - [`connect`]: an endpoint (URL, CA, Sentinel credentials, timeout) and its connections.
//! - [`sentinel`]: a primary found and followed through Sentinels.
//! - [`cluster`]: a Redis Cluster's client.
//! - [`conn`]: one connection type over every topology, and calls split by hash tag; `current`
//!   holds the connection a long-running process makes again after it fails.
//! - [`counting`]: a connection that counts its round trips, for the tests of the store's bound.
//! - [`file`]: the one reader of a file fleet is given (a token, a password, a PEM file, the
//!   configuration), to a bound for its kind: here, the lowest crate that may do I/O, so the
//!   Redis CA file and the product's files are read alike.

pub mod cluster;
pub mod conn;
pub mod connect;
pub mod counting;
mod current;
pub mod file;
pub mod sentinel;
pub mod url;
