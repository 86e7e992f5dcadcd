//! The catalog: the groups and slots `fleet serve` runs with, published in Redis so the views and
//! verbs (`fleet slots`, `fleet claim`, ...) need only Redis, not the configuration file
//! (SPEC §4.6). Written by the controller at start, on every reload, and whenever the leader finds
//! it missing (a wiped store); read by everyone else. Beside it, the controller's status: who
//! leads and whether it is blind, why and until when (SPEC §4.7). Both are reports: nothing
//! decides from them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::domain::claim::Timings;
use crate::domain::energy::Draw;
use crate::domain::name::{BenchName, GroupName};

use super::keys::Keys;

/// One group as published.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatalogGroup {
    pub name: GroupName,
    pub min_size: u32,
    pub max_size: u32,
    pub max_node_provision_time: Option<Duration>,
    pub timings: Timings,
    pub slots: Vec<CatalogSlot>,
}

/// One slot as published.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatalogSlot {
    pub name: BenchName,
    pub provider_id: String,
    pub kubernetes_node: Option<String>,
    /// What the machine draws and costs, for `fleet energy` (SPEC §4.12); absent in a catalog
    /// published before the energy ledger.
    #[serde(default)]
    pub power: Option<Draw>,
}

/// Everything published.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Catalog {
    pub groups: Vec<CatalogGroup>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("publishing the catalog")]
    Publish(#[source] redis::RedisError),
    #[error("reading the catalog")]
    Read(#[source] redis::RedisError),
    #[error("the published catalog is unreadable ({0}); restart fleet serve to publish it again")]
    Unreadable(String),
    #[error(
        "no catalog is published under this prefix: is `fleet serve` running with this --redis and --prefix?"
    )]
    Missing,
    #[error("publishing the controller's status")]
    Status(#[source] redis::RedisError),
}

/// How long a published controller status lasts unless the leader writes it again.
pub const STATUS_TTL: Duration = Duration::from_secs(30);

/// The controller's status as the leader publishes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ControllerStatus {
    /// The lease holder that leads.
    pub holder: String,
    /// The server time of the pass that wrote it.
    pub updated_at: DateTime<Utc>,
    /// Set while the controller takes no power action (SPEC §5.2).
    pub blind: Option<Blindness>,
}

pub use crate::domain::sight::Blindness;

impl ControllerStatus {
    /// Publishes the status for `STATUS_TTL`. One round trip.
    pub async fn publish<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &Keys,
    ) -> Result<(), CatalogError> {
        let text =
            serde_json::to_string(self).map_err(|e| CatalogError::Unreadable(e.to_string()))?;
        redis::cmd("SET")
            .arg(keys.controller())
            .arg(text)
            .arg("PX")
            .arg(u64::try_from(STATUS_TTL.as_millis()).unwrap_or(u64::MAX))
            .query_async::<()>(conn)
            .await
            .map_err(CatalogError::Status)
    }
}

impl Catalog {
    pub fn of(config: &Config) -> Self {
        Catalog {
            groups: config
                .groups
                .values()
                .map(|g| CatalogGroup {
                    name: g.name.clone(),
                    min_size: g.min_size,
                    max_size: g.max_size,
                    max_node_provision_time: g.max_node_provision_time,
                    timings: g.timings.clone(),
                    slots: config
                        .slots_of(&g.name)
                        .map(|s| CatalogSlot {
                            name: s.name.clone(),
                            provider_id: s.provider_id.clone(),
                            kubernetes_node: s.kubernetes_node.clone(),
                            power: s.power,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The group a slot belongs to.
    pub fn group_of(&self, slot: &BenchName) -> Option<&CatalogGroup> {
        self.groups
            .iter()
            .find(|g| g.slots.iter().any(|s| &s.name == slot))
    }

    pub fn group(&self, name: &GroupName) -> Option<&CatalogGroup> {
        self.groups.iter().find(|g| &g.name == name)
    }

    pub fn group_names(&self) -> Vec<GroupName> {
        self.groups.iter().map(|g| g.name.clone()).collect()
    }

    /// Publishes the catalog and registers its slots (SPEC §2.3): a bench's own Redis user may
    /// not write the registry (a user that may add one name to a set may add millions, SPEC §7),
    /// so the slots' benches are registered by the controller that runs them, at start, at each
    /// reload and when the store lost them. One round trip.
    pub async fn publish<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &Keys,
    ) -> Result<(), CatalogError> {
        let text =
            serde_json::to_string(self).map_err(|e| CatalogError::Unreadable(e.to_string()))?;
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(keys.config()).arg(text).ignore();
        let slots: Vec<&str> = (self.groups.iter())
            .flat_map(|g| g.slots.iter().map(|s| s.name.as_str()))
            .collect();
        // In batches, so Redis serves the beats between them.
        for batch in slots.chunks(1_000) {
            pipe.cmd("SADD").arg(keys.registry()).arg(batch).ignore();
        }
        pipe.query_async::<()>(conn)
            .await
            .map_err(CatalogError::Publish)
    }

    pub async fn read<C: ConnectionLike + Send>(
        conn: &mut C,
        keys: &Keys,
    ) -> Result<Catalog, CatalogError> {
        Ok(Self::read_with_status(conn, keys).await?.0)
    }

    /// The catalog and the controller's status (`None` when no leader wrote one within its TTL),
    /// in one round trip.
    pub async fn read_with_status<C: ConnectionLike + Send>(
        conn: &mut C,
        keys: &Keys,
    ) -> Result<(Catalog, Option<ControllerStatus>), CatalogError> {
        let (text, status): (Option<String>, Option<String>) = redis::pipe()
            .cmd("GET")
            .arg(keys.config())
            .cmd("GET")
            .arg(keys.controller())
            .query_async(conn)
            .await
            .map_err(CatalogError::Read)?;
        let text = text.ok_or(CatalogError::Missing)?;
        let catalog =
            serde_json::from_str(&text).map_err(|e| CatalogError::Unreadable(e.to_string()))?;
        Ok((catalog, status.and_then(|s| serde_json::from_str(&s).ok())))
    }
}
