//! Leader gating (SPEC §5.1, §6.4): only the leader changes node groups, and its writes carry
//! its fencing token, so a deposed leader's provider is refused by the store like its
//! controller. A follower answers reads and refuses changes.

use redis::aio::ConnectionLike;
use tokio::sync::watch;

use crate::store::claims::ClaimStore;

use super::error::ProviderError;

/// The leadership a provider changes under.
#[derive(Default)]
pub(super) struct Leader {
    /// The leader's fencing token while this process leads; `None` when the provider acts alone
    /// (no lease: it always leads, unfenced).
    leadership: Option<watch::Receiver<Option<String>>>,
}

impl Leader {
    pub fn following(leadership: watch::Receiver<Option<String>>) -> Self {
        Leader {
            leadership: Some(leadership),
        }
    }

    /// The store a change writes through: the leader's, fenced with its token. A follower
    /// refuses: its answer would be a guess, and a fenced write would be refused anyway.
    pub fn writer<C: ConnectionLike + Clone + Send>(
        &self,
        store: &ClaimStore<C>,
    ) -> Result<ClaimStore<C>, ProviderError> {
        let Some(leadership) = &self.leadership else {
            return Ok(store.clone());
        };
        match leadership.borrow().as_deref() {
            Some(token) => Ok(store.fenced(token)),
            None => Err(ProviderError::NotLeader),
        }
    }
}
