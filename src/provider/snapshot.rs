//! What was last read of each group, for reads while Redis cannot be read (SPEC §5.5): a read
//! is answered from the last snapshot, with its age, and every fresh read or change renews it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::claim::Claim;
use crate::domain::name::GroupName;
use crate::domain::sizing;

#[derive(Default)]
struct Snapshot {
    claims: Option<(Arc<Vec<Claim>>, Instant)>,
    target: Option<(usize, Instant)>,
}

/// The last read of every group.
#[derive(Default)]
pub(super) struct Snapshots {
    groups: Mutex<HashMap<GroupName, Snapshot>>,
}

impl Snapshots {
    /// Keeps a fresh read of the group's claims, and the target they make.
    pub fn claims_read(&self, group: &GroupName, claims: &Arc<Vec<Claim>>) {
        let target = sizing::target(claims);
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = groups.entry(group.clone()).or_default();
        let now = Instant::now();
        snapshot.target = Some((target, now));
        snapshot.claims = Some((claims.clone(), now));
    }

    /// Keeps a fresh read of the group's target.
    pub fn target_read(&self, group: &GroupName, target: usize) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.entry(group.clone()).or_default().target = Some((target, Instant::now()));
    }

    /// The group's last claims read, and their age.
    pub fn claims(&self, group: &GroupName) -> Option<(Arc<Vec<Claim>>, Duration)> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let (claims, at) = groups.get(group)?.claims.clone()?;
        Some((claims, at.elapsed()))
    }

    /// The group's last target read, and its age.
    pub fn target(&self, group: &GroupName) -> Option<(usize, Duration)> {
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let (target, at) = groups.get(group)?.target?;
        Some((target, at.elapsed()))
    }
}
