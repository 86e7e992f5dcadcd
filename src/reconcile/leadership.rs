//! Leadership (SPEC §5.1): the lease, the fences it raises, and stepping down. One leadership
//! signal (`Health::lead`) tells the provider whether this process leads.

use std::time::Instant;

use redis::aio::ConnectionLike;
use tracing::{info, warn};

use crate::domain::name::GroupName;
use crate::lifecycle::Runner;
use std::collections::HashSet;
use std::sync::atomic::AtomicBool;

use crate::store::lease::{Leadership, Lease, Signal};

use super::{Controller, Nodes, Sight};

/// This controller's leadership: the lease it competes for, the fencing token while it leads,
/// the fences it raised, and the signal the provider follows.
pub(super) struct Leading<C> {
    /// The lease, when this controller competes for leadership (`run_leading`).
    pub lease: Option<Lease<C>>,
    /// The fencing token of this controller's leadership, while it leads.
    pub token: Option<String>,
    /// Set when a write was refused by a newer leader's fence: stop acting at once.
    pub deposed: AtomicBool,
    /// The groups whose fence this leadership has raised (a group added on reload is raised on
    /// the next pass).
    pub fenced: HashSet<GroupName>,
    /// The leadership this controller announces to the provider (SPEC §5.1).
    pub signal: Signal,
}

impl<C: ConnectionLike + Clone + Send> Leading<C> {
    /// The lease holder id of this controller, for the operations it fires.
    pub(super) fn holder(&self) -> String {
        self.lease
            .as_ref()
            .map(|l| l.id().to_owned())
            .unwrap_or_default()
    }
}

impl<C> Leading<C> {
    pub fn new() -> Self {
        Leading {
            lease: None,
            token: None,
            deposed: AtomicBool::new(false),
            fenced: HashSet::new(),
            signal: Signal::new().0,
        }
    }
}

impl<C, R, N> Controller<C, R, N>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    R: Runner,
    N: Nodes,
{
    /// Takes or renews the lease; on a new leadership raises every group's fence. Returns whether
    /// this controller leads now.
    pub async fn lead(&mut self) -> bool {
        let Some(lease) = self.leading.lease.clone() else {
            return true;
        };
        if self
            .leading
            .deposed
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            self.follow("a write was refused by a newer leader's fence");
        }
        match lease.acquire(self.leading.token.as_deref()).await {
            Ok(Leadership::Leader(token))
                if self.leading.token.as_deref() == Some(token.as_str()) =>
            {
                true
            }
            Ok(Leadership::Leader(token)) => {
                let groups: Vec<GroupName> = self.config.borrow().groups.keys().cloned().collect();
                self.leading.fenced.clear();
                if !self.raise_fences(&groups, &token).await {
                    return false;
                }
                self.store = self.base_store.fenced(&token);
                self.leading.token = Some(token.clone());
                // A new leadership expects no written mark: it checks those it sets.
                self.seeing.written = None;
                // The previous leader wrote the statuses: read them again.
                self.memory.forget_store();
                self.metrics.leader.set(1);
                self.health.following(false);
                self.leading.signal.announce(self.leading.token.as_deref());
                // Said once everything that acts as the leader (the provider too) knows it.
                info!(holder = lease.id(), token, "became the leader");
                true
            }
            Ok(Leadership::Follower(holder)) => {
                self.health.following(true);
                // Sight returned while following: the grace runs from now, not from the first
                // pass this controller may run much later.
                if self.seeing.sight == Sight::Lost {
                    self.seeing.sight = Sight::Back(Instant::now());
                }
                if self.leading.token.is_some() {
                    self.follow(&format!("the lease is held by {holder}"));
                }
                false
            }
            Err(e) => {
                warn!(
                    error = fleet_redis::connect::chain(&e),
                    "cannot reach the lease"
                );
                // The store is out of reach, so presence is too: when it returns, the grace.
                self.seeing.sight = Sight::Lost;
                // A leader that cannot renew stops acting: its lease may lapse unseen.
                if self.leading.token.is_some() {
                    self.follow("the lease could not be renewed");
                }
                false
            }
        }
    }

    /// Raises the fence of every group not raised yet in this leadership. Returns false when a
    /// newer leader's fence is up (or Redis refused), so this controller must not act.
    pub(super) async fn raise_fences(&mut self, groups: &[GroupName], token: &str) -> bool {
        for group in groups {
            if self.leading.fenced.contains(group) {
                continue;
            }
            match self.base_store.raise_fence(group, token).await {
                Ok(true) => {
                    self.leading.fenced.insert(group.clone());
                }
                Ok(false) => {
                    warn!(%group, token, "a newer leader's fence is up; not leading");
                    return false;
                }
                Err(e) => {
                    warn!(%group, error = fleet_redis::connect::chain(&e), "raising the fence failed; not leading yet");
                    return false;
                }
            }
        }
        true
    }

    pub(super) fn follow(&mut self, why: &str) {
        warn!(why, "lost leadership; no longer acting");
        self.leading.token = None;
        self.leading.signal.announce(None);
        self.store = self.base_store.clone();
        self.metrics.leader.set(0);
    }
}
