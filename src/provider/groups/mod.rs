//! The provider's executor (SPEC §6.3): what a call reads of a group and changes in it, through
//! the store and the command layer (`requests`). Every rule it follows is `domain::sizing`'s;
//! this module only reads, writes and retries.
//!
//! Every answer is computed from the store's claims and the configuration, read fresh for each
//! call. Changes to a group are serialized by a lock per group (cluster-autoscaler calls
//! concurrently), and each change is a claim request through the store's atomic scripts, so min,
//! max and one live claim per slot hold under any concurrency. When Redis cannot be read, reads
//! are answered from the last snapshot, with its age.

mod change;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use tracing::warn;

use crate::config::{Config, Group};
use crate::domain::claim::Claim;
use crate::domain::name::GroupName;
use crate::domain::sizing::{self, Room};
use crate::store::claims::ClaimStore;
use crate::store::operations::Operations;

use super::error::ProviderError;
use super::leader::Leader;
use super::snapshot::Snapshots;

/// A group as one fresh read saw it.
pub(super) struct Fresh {
    pub claims: Arc<Vec<Claim>>,
    pub ops: Arc<Operations>,
    /// The store's time of the read.
    pub now: DateTime<Utc>,
}

/// An answer read from the last snapshot because Redis could not be read.
pub(super) struct Stale {
    /// The snapshot's age.
    pub age: Duration,
    /// Why Redis could not be read.
    pub cause: ProviderError,
}

/// A group's claims as a read found them: fresh, or the last snapshot's.
pub(super) enum Seen {
    Fresh(Fresh),
    Stale {
        claims: Arc<Vec<Claim>>,
        stale: Stale,
    },
}

impl Seen {
    pub fn claims(&self) -> &[Claim] {
        match self {
            Seen::Fresh(fresh) => &fresh.claims,
            Seen::Stale { claims, .. } => claims,
        }
    }
}

/// The groups of one claim store, as the provider reads and changes them.
pub(super) struct Groups<C> {
    store: ClaimStore<C>,
    leader: Leader,
    locks: Mutex<HashMap<GroupName, Arc<tokio::sync::Mutex<()>>>>,
    snapshots: Snapshots,
    /// The max sizes the last NodeGroups answered, for NodeGroupForNode in the same loop.
    max_sizes: Mutex<HashMap<GroupName, u32>>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Groups<C> {
    pub fn new(store: ClaimStore<C>) -> Self {
        Groups {
            store,
            leader: Leader::default(),
            locks: Mutex::new(HashMap::new()),
            snapshots: Snapshots::default(),
            max_sizes: Mutex::new(HashMap::new()),
        }
    }

    /// Changes only under `leader`.
    pub fn led_by(mut self, leader: Leader) -> Self {
        self.leader = leader;
        self
    }

    fn lock(&self, group: &GroupName) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(group.clone()).or_default().clone()
    }

    /// The group's claims and operation records read now, with the server's time of the read; a
    /// change needs them fresh. The snapshot a stale read would answer from follows.
    pub async fn fresh(&self, group: &GroupName) -> Result<Fresh, ProviderError> {
        let read = self
            .store
            .read_groups(std::slice::from_ref(group))
            .await?
            .pop()
            .ok_or(ProviderError::Internal("a group read returned no group"))?;
        let claims = read.claims;
        self.snapshots.claims_read(group, &claims);
        Ok(Fresh {
            claims,
            ops: Arc::new(read.operations),
            now: read.now,
        })
    }

    /// The group's target size: fresh in one round trip when Redis answers, else the last one
    /// read and its age.
    pub async fn target(&self, group: &GroupName) -> Result<(usize, Option<Stale>), ProviderError> {
        match self.store.target(group).await {
            Ok(n) => {
                self.snapshots.target_read(group, n);
                Ok((n, None))
            }
            Err(e) => match self.snapshots.target(group) {
                Some((n, age)) => Ok((
                    n,
                    Some(Stale {
                        age,
                        cause: e.into(),
                    }),
                )),
                None => Err(e.into()),
            },
        }
    }

    /// The group's claims for a read: fresh (with the operation records and the server's time)
    /// when Redis answers, else the last snapshot and its age (SPEC §5.5).
    pub async fn claims(&self, group: &GroupName) -> Result<Seen, ProviderError> {
        match self.fresh(group).await {
            Ok(fresh) => Ok(Seen::Fresh(fresh)),
            Err(cause) => match self.snapshots.claims(group) {
                Some((claims, age)) => Ok(Seen::Stale {
                    claims,
                    stale: Stale { age, cause },
                }),
                None => Err(cause),
            },
        }
    }

    /// What `group` has room for (SPEC §6.3): its unclaimed slots (`sizing::unclaimed`), their
    /// last claims read in one round trip, ranked (`sizing::room`).
    pub async fn room(
        &self,
        config: &Config,
        group: &Group,
        claims: &[Claim],
        ops: &Operations,
        now: DateTime<Utc>,
    ) -> Result<Room, ProviderError> {
        let unclaimed = sizing::unclaimed(
            config.slots_of(&group.name).map(|s| &s.name),
            claims,
            &ops.by_slot,
            now,
            group.timings.job_monitor_poll_interval,
        );
        let digests = self.store.read_slots(&group.name, &unclaimed.slots).await?;
        Ok(sizing::room(
            unclaimed,
            digests.iter().map(|(_, last)| last.as_ref()),
            now,
            &group.timings,
        ))
    }

    /// Each group's max size as cluster-autoscaler should see it this loop (SPEC §6.3,
    /// `sizing::reachable_max`). One read of every group's claims, one read of each group's
    /// slots. When the store cannot be read, the configured max.
    pub async fn max_sizes(&self, config: &Config) -> HashMap<GroupName, u32> {
        let names: Vec<GroupName> = config.groups.keys().cloned().collect();
        let mut out: HashMap<GroupName, u32> = config
            .groups
            .values()
            .map(|g| (g.name.clone(), g.max_size))
            .collect();
        let read = match self.store.read_groups(&names).await {
            Ok(read) => read,
            Err(e) => {
                warn!(
                    error = fleet_redis::connect::chain(&e),
                    "NodeGroups: the claims cannot be read; answering the configured max sizes"
                );
                return out;
            }
        };
        for g in read {
            let Some(group) = config.group(&g.group) else {
                continue;
            };
            match self
                .room(config, group, &g.claims, &g.operations, g.now)
                .await
            {
                Ok(room) => {
                    let max = sizing::reachable_max(
                        group.min_size,
                        group.max_size,
                        sizing::target(&g.claims),
                        room.free.len(),
                    );
                    out.insert(group.name.clone(), max);
                }
                Err(e) => {
                    warn!(group = %group.name, error = fleet_redis::connect::chain(&e), "NodeGroups: the slots cannot be read; answering the configured max size")
                }
            }
        }
        let mut cached = self.max_sizes.lock().unwrap_or_else(|e| e.into_inner());
        cached.clone_from(&out);
        out
    }

    /// The max size of `group` the last NodeGroups answered.
    pub fn last_max_size(&self, group: &GroupName) -> Option<u32> {
        self.max_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(group)
            .copied()
    }
}
