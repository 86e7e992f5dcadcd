//! The groups in the claim store (SPEC §4.1): which groups may hold claims (the configured ones
//! and those that left with claims still stored) and forgetting one that holds none; each
//! group's target size, and its last scaling call. Every call is one round trip; forgetting a
//! group takes a second only to put it back (see `forget_group`).

use chrono::{DateTime, Utc};
use fleet_redis::conn::{Order, query_by_tag};
use redis::aio::ConnectionLike;

use crate::domain::claim::Timings;
use crate::domain::history::ScaleAction;
use crate::domain::name::GroupName;

use super::claims::{ClaimStore, ClaimStoreError, LastScale, json};

impl<C: ConnectionLike + Clone + Send> ClaimStore<C> {
    /// Records `groups` (with their timings) among the groups that may hold claims and returns
    /// them all (SPEC §4.1): the configured ones, and those that left the configuration with
    /// claims still in the store, with the timings they last ran with (a removed group's claims
    /// are collected on its own `ttl_after_finished`). One round trip.
    pub async fn known_groups(
        &self,
        groups: &[(&GroupName, &Timings)],
    ) -> Result<Vec<(GroupName, Timings)>, ClaimStoreError> {
        let mut pipe = redis::pipe();
        if !groups.is_empty() {
            let cmd = pipe.cmd("HSET").arg(self.shell.keys().groups());
            for (name, timings) in groups {
                cmd.arg(name.as_str())
                    .arg(json("a group's timings", timings)?);
            }
            cmd.ignore();
        }
        pipe.cmd("HGETALL").arg(self.shell.keys().groups());
        let mut conn = self.shell.conn();
        let (members,): (Vec<(String, String)>,) = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::Groups { source })?;
        let mut known: Vec<(GroupName, Timings)> = members
            .iter()
            .filter_map(|(name, timings)| {
                Some((
                    GroupName::parse(name).ok()?,
                    serde_json::from_str(timings).unwrap_or_default(),
                ))
            })
            .collect();
        known.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(known)
    }

    /// Forgets a group that left the configuration and holds no claim any more. The two keys are
    /// in different hash slots, so this cannot be one script: it removes the group, then counts
    /// its claims in the same pipeline (in that order), and puts the group back when a request
    /// created one meanwhile. With requests recording their group again after they create
    /// (`requests::claim_slots`), no claim is ever left in a forgotten group. Returns whether the
    /// group was forgotten.
    pub async fn forget_group(
        &self,
        group: &GroupName,
        timings: &Timings,
    ) -> Result<bool, ClaimStoreError> {
        // The HDEL before the ZCARD: a claim created after the count records its group again.
        let mut forget = redis::pipe();
        forget
            .cmd("HDEL")
            .arg(self.shell.keys().groups())
            .arg(group.as_str());
        let mut count = redis::pipe();
        count
            .cmd("ZCARD")
            .arg(self.shell.keys().group(group).claims());
        let (_, claims): (i64, usize) =
            query_by_tag(&self.shell.conn(), &[forget, count], Order::AsWritten)
                .await
                .map_err(|source| ClaimStoreError::Groups { source })?;
        if claims == 0 {
            return Ok(true);
        }
        self.known_groups(&[(group, timings)]).await?;
        Ok(false)
    }

    /// Records the group's last scaling call (a report for `fleet groups`). One round trip.
    pub async fn record_scale(
        &self,
        group: &GroupName,
        at: DateTime<Utc>,
        action: ScaleAction,
        count: u32,
    ) -> Result<(), ClaimStoreError> {
        let mut conn = self.shell.conn();
        redis::cmd("SET")
            .arg(self.shell.keys().group(group).last_scale())
            .arg(json(
                "a scaling call",
                &LastScale {
                    // Milliseconds, as every time fleet shows in JSON.
                    at: crate::domain::operation::stamp(at),
                    action,
                    count,
                },
            )?)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::ReadGroup {
                group: group.clone(),
                source,
            })
    }

    /// The group's last scaling call, if any. One round trip.
    pub async fn last_scale(
        &self,
        group: &GroupName,
    ) -> Result<Option<LastScale>, ClaimStoreError> {
        let mut conn = self.shell.conn();
        let raw: Option<String> = redis::cmd("GET")
            .arg(self.shell.keys().group(group).last_scale())
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::ReadGroup {
                group: group.clone(),
                source,
            })?;
        Ok(raw.and_then(|r| serde_json::from_str(&r).ok()))
    }

    /// The group's target size: how many of its claims want a machine (live, not marked for
    /// deletion). One round trip, independent of the group's size.
    pub async fn target(&self, group: &GroupName) -> Result<usize, ClaimStoreError> {
        let mut conn = self.shell.conn();
        redis::cmd("SCARD")
            .arg(self.shell.keys().group(group).wanted())
            .query_async(&mut conn)
            .await
            .map_err(|source| ClaimStoreError::ReadGroup {
                group: group.clone(),
                source,
            })
    }
}
