//! The shell every fenced store shares (SPEC §5.1): a connection, the keys, and the leadership
//! token its writes carry. The claims, the energy ledgers and the BMC readings are stores of the
//! controller that a deposed leader must not write to; each holds one of these and adds its own
//! records, so fencing is written once.

use crate::store::keys::Keys;

/// A connection and the keys, with the token a leader's writes carry.
#[derive(Clone)]
pub struct Fenced<C> {
    pub(super) conn: C,
    pub(super) keys: Keys,
    /// The leadership token the writes carry; `None` for readers and for operator requests,
    /// which are not fenced.
    pub(super) fence: Option<String>,
}

impl<C: Clone> Fenced<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        Fenced {
            conn,
            keys,
            fence: None,
        }
    }

    /// The same shell, its writes carrying the leadership `token`.
    pub fn fenced(&self, token: &str) -> Self {
        Fenced {
            fence: Some(token.to_owned()),
            ..self.clone()
        }
    }

    /// A handle on the connection (a clone: the connections fleet uses are multiplexed).
    pub fn conn(&self) -> C {
        self.conn.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The token a fenced script checks: empty for a store that is not fenced.
    pub fn token(&self) -> &str {
        self.fence.as_deref().unwrap_or("")
    }
}
