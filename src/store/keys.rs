//! Every Redis key fleet reads or writes is named here, and only here (SPEC §2.3).
//!
//! All keys live under one prefix (`--prefix`, default `fleet`). The presence keys share the hash
//! tag `{<prefix>}`, so the one-round-trip fleet read and the beat script stay inside one Redis
//! Cluster hash slot, and the same code runs on a single Redis and on a cluster.

use crate::domain::name::BenchName;

/// The default prefix under which every key lives.
pub const DEFAULT_PREFIX: &str = "fleet";
/// The longest prefix: keys stay short enough to read in `redis-cli`.
pub const MAX_PREFIX_LEN: usize = 64;

/// The key namer for one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// `{<prefix>}`: the hash tag every presence key starts with.
    tag: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid prefix {0:?}: a prefix is 1 to {MAX_PREFIX_LEN} characters of letters, digits, '-', '_', '.' and ':'"
)]
pub struct InvalidPrefix(pub String);

impl Keys {
    /// A namer for `prefix`. Braces and spaces are refused: a brace would break the hash tag.
    pub fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        let valid = !prefix.is_empty()
            && prefix.len() <= MAX_PREFIX_LEN
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
        if !valid {
            return Err(InvalidPrefix(prefix.to_owned()));
        }
        Ok(Self {
            tag: format!("{{{prefix}}}"),
        })
    }

    /// The heartbeat key of one bench: the bench's own word that it is there. It has a TTL,
    /// always; the beat script is its only writer.
    pub fn heartbeat(&self, name: &BenchName) -> String {
        format!("{}{}", self.heartbeat_prefix(), name)
    }

    /// The part of every heartbeat key before the bench name, for the fleet read script, which
    /// builds the keys of the registry's members on the server.
    pub fn heartbeat_prefix(&self) -> String {
        format!("{}:bench:", self.tag)
    }

    /// The hold requests (the seed's DesiredKey): a hash from bench name to the operator's ask,
    /// `{"reason": ..., "until": <server ms>}`, carried by the bench on its next beat. A request
    /// made `--for` a while lapses on the server's clock; a field lives until released, lapsed
    /// and beaten over, or forgotten, so the hash is bounded by the registry.
    pub fn hold_requests(&self) -> String {
        format!("{}:holds", self.tag)
    }

    /// The registry's version: changed by every write that adds or removes a member, so a
    /// reader holding a copy of the registry knows, in its one round trip, that the copy is
    /// current. Starts from the server's time, so it never repeats after a wipe.
    pub fn registry_version(&self) -> String {
        format!("{}:benches:version", self.tag)
    }

    /// The registry: a set of every bench that ever beat or was registered. No TTL; members
    /// leave by `fleet forget`.
    pub fn registry(&self) -> String {
        format!("{}:benches", self.tag)
    }
}

impl Default for Keys {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX).expect("the default prefix is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Keys::new("fleet").unwrap();
        let name = BenchName::parse("bench-01").unwrap();
        assert_eq!(keys.heartbeat(&name), "{fleet}:bench:bench-01");
        assert_eq!(keys.hold_requests(), "{fleet}:holds");
        assert_eq!(keys.registry(), "{fleet}:benches");
        assert_eq!(keys.registry_version(), "{fleet}:benches:version");
        assert!(keys.heartbeat(&name).starts_with(&keys.heartbeat_prefix()));
    }

    #[test]
    fn prefixes_that_would_break_the_hash_tag_are_refused() {
        for bad in ["", "a{b", "a}b", "a b", "a\nb", &"p".repeat(65)] {
            assert_eq!(
                Keys::new(bad),
                Err(InvalidPrefix(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert!(Keys::new("team-a:prod_1.x").is_ok());
    }
}
