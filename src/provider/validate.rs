//! Validating cluster-autoscaler's requests against the configuration (SPEC §6.3): the group a
//! request names, the sign of a delta, the nodes a DeleteNodes names and the node a price is
//! asked for. Pure: the configuration is a parameter.

use crate::config::{Config, Group};
use crate::domain::name::{BenchName, GroupName};
use crate::domain::sizing::{self, Fake};

use super::error::ProviderError;
use super::template;
use super::wire::ExternalGrpcNode;

/// The group a request names: an empty id is invalid, an unknown one not found.
pub fn group<'a>(config: &'a Config, id: &str) -> Result<&'a Group, ProviderError> {
    if id.is_empty() {
        return Err(ProviderError::EmptyGroupId);
    }
    let name = GroupName::parse(id).map_err(ProviderError::InvalidGroupId)?;
    config
        .group(&name)
        .ok_or_else(|| ProviderError::NoSuchGroup {
            id: id.to_owned(),
            groups: config.groups.keys().cloned().collect(),
        })
}

/// An IncreaseSize's delta: positive.
pub fn increase(delta: i32) -> Result<usize, ProviderError> {
    if delta <= 0 {
        return Err(ProviderError::NotAnIncrease(delta));
    }
    Ok(usize::try_from(delta).unwrap_or(usize::MAX))
}

/// A DecreaseTargetSize's delta: negative; the number of requests to take back.
pub fn decrease(delta: i32) -> Result<usize, ProviderError> {
    if delta >= 0 {
        return Err(ProviderError::NotADecrease(delta));
    }
    Ok(usize::try_from(delta.unsigned_abs()).unwrap_or(usize::MAX))
}

/// The slots a DeleteNodes names, each once and as real as its realest naming
/// (`sizing::namings`). Every node must be one of the group's slots: the whole call is refused
/// otherwise, naming the first that is not.
pub fn deletion(
    config: &Config,
    group: &Group,
    nodes: &[ExternalGrpcNode],
) -> Result<Vec<(BenchName, Fake)>, ProviderError> {
    if nodes.is_empty() {
        return Err(ProviderError::NoNodes);
    }
    let mut named = Vec::with_capacity(nodes.len());
    for node in nodes {
        let Some(slot) = config.slot_for_node(&node.provider_id, &node.name) else {
            return Err(ProviderError::NotASlot {
                name: node.name.clone(),
                provider_id: node.provider_id.clone(),
            });
        };
        if slot.group != group.name {
            return Err(ProviderError::OtherGroup {
                name: node.name.clone(),
                provider_id: node.provider_id.clone(),
                slot: slot.name.clone(),
                of: slot.group.clone(),
                asked: group.name.clone(),
            });
        }
        named.push((slot.name.clone(), Fake::from(node)));
    }
    Ok(sizing::namings(named))
}

/// The group a node to price belongs to: a slot's, or the group whose label a node
/// cluster-autoscaler made from a group's template carries (renamed, no provider ID).
pub fn priced<'a>(config: &'a Config, node: &ExternalGrpcNode) -> Result<&'a Group, ProviderError> {
    config
        .slot_for_node(&node.provider_id, &node.name)
        .and_then(|slot| config.group(&slot.group))
        .or_else(|| {
            node.labels
                .get(template::GROUP_LABEL)
                .and_then(|g| GroupName::parse(g).ok())
                .and_then(|g| config.group(&g))
        })
        .ok_or_else(|| ProviderError::NotPriced {
            name: node.name.clone(),
            provider_id: node.provider_id.clone(),
            label: template::GROUP_LABEL,
        })
}
