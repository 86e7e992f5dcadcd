//! The catalog: the groups and slots `fleet serve` runs with, published in Redis so the views and
//! verbs (`fleet slots`, `fleet claim`, ...) need only Redis, not the configuration file
//! (SPEC §4.6). Written by the controller at start and on every reload; read by everyone else.

use std::time::Duration;

use redis::aio::ConnectionLike;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::domain::claim::Timings;
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

    pub async fn publish<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &Keys,
    ) -> Result<(), CatalogError> {
        let text =
            serde_json::to_string(self).map_err(|e| CatalogError::Unreadable(e.to_string()))?;
        redis::cmd("SET")
            .arg(keys.config())
            .arg(text)
            .query_async::<()>(conn)
            .await
            .map_err(CatalogError::Publish)
    }

    pub async fn read<C: ConnectionLike + Send>(
        conn: &mut C,
        keys: &Keys,
    ) -> Result<Catalog, CatalogError> {
        let text: Option<String> = redis::cmd("GET")
            .arg(keys.config())
            .query_async(conn)
            .await
            .map_err(CatalogError::Read)?;
        let text = text.ok_or(CatalogError::Missing)?;
        serde_json::from_str(&text).map_err(|e| CatalogError::Unreadable(e.to_string()))
    }
}
