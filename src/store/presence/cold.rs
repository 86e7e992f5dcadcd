//! The cold fleet read (SPEC §2.5): a reader that holds no current copy of the registry lists it
//! (its version and sizes, and the members of the registry proper) and then sends the read's
//! pipeline over the listing. Two round trips; no script (SPEC §7: no user but the controller runs
//! one, and moving values through Lua held Redis's thread ten times as long as the reads).
//!
//! The registry proper (`keys::registry`) is written only by fleet's own users. The join set
//! (`keys::joined`) is the legacy of agents before this release, whose beats added their names to
//! it, as any bench's user could under the ACL file of that release: it is read only up to a
//! bound (`read::joined_bound`), in a round trip of its own, and only while it holds names. A
//! set past the bound is not read at all, and every snapshot says so, naming it: a flooded set
//! costs a read one `SCARD`.

use std::sync::Arc;

use redis::aio::ConnectionLike;

use crate::domain::name::BenchName;
use crate::domain::state::Reading;

use super::decode::{parse, parse_result};
use super::read::{Joined, Registry, joined_bound};
use super::{Presence, PresenceError, Snapshot};

/// How often the cold read lists the registry again when it changed between the listing and the
/// read. After that the last read stands: every bench of it was read as the listing named it,
/// and only a bench registered or forgotten in between is missing or read DOWN.
const COLD_TRIES: usize = 3;

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    /// The cold plan: the registry is listed, then read over as a held copy would be. When the
    /// registry changed between the two, it is listed again, up to `COLD_TRIES` times. The
    /// registry read is kept for the next read.
    pub(super) async fn read_cold(&self) -> Result<Snapshot, PresenceError> {
        let mut last = None;
        for _ in 0..COLD_TRIES {
            let listing = self.list().await?;
            let (current, snapshot) = self.read_listed(listing).await?;
            if current {
                return Ok(snapshot);
            }
            last = Some(snapshot);
        }
        last.ok_or_else(|| PresenceError::ReadReply("no listing of the registry".into()))
    }

    /// The cold plan's first round trip: the registry's version, the sizes of both its sets and
    /// the registry proper's members; a second, only while the join set holds names and no more
    /// than its bound, lists the join set.
    async fn list(&self) -> Result<Listing, PresenceError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.get(self.keys.registry_version())
            .scard(self.keys.registry())
            .scard(self.keys.joined())
            .smembers(self.keys.registry());
        let mut conn = self.conn.clone();
        let replies: Vec<redis::RedisResult<redis::Value>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        let mut replies = replies.into_iter();
        let version: Option<String> = parse_result(replies.next())?;
        let size: usize = self.set_reply(replies.next(), &self.keys.registry())?;
        let joined_size: usize = match replies.next() {
            Some(Err(e)) if e.code() == Some("WRONGTYPE") => 0,
            other => parse_result(other)?,
        };
        let registered: Vec<Vec<u8>> = self.set_reply(replies.next(), &self.keys.registry())?;
        let joined = Joined::of(joined_size, size);
        let mut problems = Vec::new();
        let candidates = match joined {
            Joined::Empty => Vec::new(),
            Joined::Read(_) => {
                let members: Vec<Vec<u8>> = redis::cmd("SMEMBERS")
                    .arg(self.keys.joined())
                    .query_async(&mut conn)
                    .await
                    .map_err(|source| PresenceError::Read { source })?;
                let known: std::collections::HashSet<&[u8]> =
                    registered.iter().map(Vec::as_slice).collect();
                members
                    .into_iter()
                    .filter(|m| !known.contains(m.as_slice()))
                    .collect()
            }
            Joined::Over => {
                problems.push(self.joined_problem(joined_size, size));
                Vec::new()
            }
        };
        Ok(Listing {
            version: version.unwrap_or_default(),
            size: (size, joined),
            registered,
            candidates,
            problems,
        })
    }

    /// A reply about the registry proper: its error, when it holds another type, names it.
    fn set_reply<T: redis::FromRedisValue>(
        &self,
        reply: Option<redis::RedisResult<redis::Value>>,
        key: &str,
    ) -> Result<T, PresenceError> {
        match reply {
            Some(Err(e)) if e.code() == Some("WRONGTYPE") => {
                Err(PresenceError::ReadReply(format!(
                    "{key} holds another type than the set of registered benches (something else \
                 wrote it); repair it with `redis-cli DEL '{key}'` and register the benches again \
                 (`fleet serve` registers its slots when it starts)"
                )))
            }
            other => parse_result(other),
        }
    }

    /// What a join set past its bound costs, in words: it is not read (SPEC §2.5).
    fn joined_problem(&self, size: usize, registered: usize) -> String {
        let key = self.keys.joined();
        format!(
            "{key} holds {size} names, more than fleet reads ({}): it is the join set of agents \
             older than this release, which any bench's Redis user could add to under the ACL \
             file of that release, and it is not read. Load the ACL file `fleet acl` prints now, \
             then `redis-cli DEL '{key}'`; benches are registered by fleet serve (its slots), \
             by `fleet hold --register`, and by their own beats where their user may",
            joined_bound(registered)
        )
    }

    /// The cold plan's second round trip: the read over a listing, its candidates read as
    /// benches. Whether the registry was still as listed, and the snapshot. A candidate counts
    /// when one of its own two keys exists, the heartbeat or the join key, which only that
    /// bench's user (or fleet) can write (SPEC §2.3): one whose heartbeat the read found is proved
    /// by it; only when some candidate's was not found does a third round trip ask whether its
    /// join key exists.
    async fn read_listed(&self, listing: Listing) -> Result<(bool, Snapshot), PresenceError> {
        let Named {
            mut registry,
            candidates,
            strangers,
            utf8,
        } = self.told_apart(listing);
        let (stamp, mut snapshot) = self.read_registered(&registry).await?;
        let current = registry.is_current(&stamp);
        let missing: Vec<usize> = (snapshot.benches.iter().enumerate())
            .filter(|(i, b)| candidates[*i] && b.reading == Reading::Missing)
            .map(|(i, _)| i)
            .collect();
        if !missing.is_empty() || !strangers.is_empty() {
            let (joined, proven) = self.ask_joined(&registry, &missing, &strangers).await?;
            let mut dropped = std::collections::HashSet::new();
            for (i, joined) in missing.into_iter().zip(joined) {
                if !joined {
                    // A candidate with neither of its keys: no bench, left out, and both keys
                    // watched by the next reads.
                    let name = &registry.names[i];
                    registry
                        .unproven
                        .push(self.keys.joined_key(name).into_bytes());
                    registry
                        .unproven
                        .push(self.keys.heartbeat(name).into_bytes());
                    dropped.insert(name.clone());
                }
            }
            // A stranger with either key is reported, as the registry's are.
            for (stranger, proven) in strangers.into_iter().zip(proven) {
                if proven {
                    registry.foreign.push(stranger);
                }
            }
            if !dropped.is_empty() {
                snapshot.benches.retain(|b| !dropped.contains(&b.name));
                let (names, keys) = (registry.names.into_iter().zip(registry.keys))
                    .filter(|(name, _)| !dropped.contains(name))
                    .unzip();
                (registry.names, registry.keys) = (names, keys);
            }
            registry.foreign.sort();
            snapshot.foreign = registry.foreign.clone();
        }
        // A member that is not UTF-8 has no name to build a key from: with one in the registry
        // nothing is kept, and every read is cold, so it is still reported.
        let keep = current && utf8;
        // Its names may have changed since the read (candidates left out, join keys to watch):
        // the next read builds its pipeline again.
        registry.pipeline = std::sync::OnceLock::new();
        *self.registry.lock().expect("registry lock") = keep.then(|| Arc::new(registry));
        Ok((current, snapshot))
    }

    /// The listing's members told apart, as a registry to read over: the bench names sorted with
    /// their heartbeat keys, whether each is a candidate (in the join set alone), the members that
    /// are no bench names (the registry's reported, the candidates' asked about), and whether
    /// every member was UTF-8.
    fn told_apart(&self, listing: Listing) -> Named {
        let mut named = Vec::with_capacity(listing.registered.len() + listing.candidates.len());
        let mut foreign = Vec::new();
        let mut utf8 = true;
        for raw in listing.registered {
            match member(raw) {
                Ok(name) => named.push((name, false)),
                Err((text, is)) => {
                    foreign.push(text);
                    utf8 &= is;
                }
            }
        }
        // The join set's strangers: only names fleet could have keys for are asked about.
        let mut strangers = Vec::new();
        for raw in listing.candidates {
            match member(raw) {
                Ok(name) => named.push((name, true)),
                Err((text, true)) => strangers.push(text),
                Err((_, false)) => {}
            }
        }
        named.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        named.dedup_by(|a, b| a.0 == b.0);
        let (names, candidates): (Vec<BenchName>, Vec<bool>) = named.into_iter().unzip();
        let registry = Registry {
            version: listing.version,
            size: listing.size,
            unproven: Vec::new(),
            keys: names.iter().map(|n| self.keys.heartbeat(n)).collect(),
            names,
            foreign,
            problems: listing.problems,
            pipeline: std::sync::OnceLock::new(),
        };
        Named {
            registry,
            candidates,
            strangers,
            utf8,
        }
    }

    /// The cold read's third round trip: whether either key of each candidate the read found no
    /// heartbeat for exists (an empty heartbeat reads as none, and exists all the same:
    /// docs/protocol.md §4), and whether either key of each stranger does.
    async fn ask_joined(
        &self,
        registry: &Registry,
        missing: &[usize],
        strangers: &[String],
    ) -> Result<(Vec<bool>, Vec<bool>), PresenceError> {
        let mut pipe = redis::pipe();
        for &i in missing {
            let name = &registry.names[i];
            pipe.exists(&[self.keys.joined_key(name), self.keys.heartbeat(name)]);
        }
        let (join, beat) = (self.keys.joined_key_prefix(), self.keys.heartbeat_prefix());
        for stranger in strangers {
            pipe.exists(&[format!("{join}{stranger}"), format!("{beat}{stranger}")]);
        }
        let mut conn = self.conn.clone();
        let replies: Vec<redis::Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        let mut replies = replies.into_iter();
        let mut joined = Vec::with_capacity(missing.len());
        for _ in missing {
            joined.push(parse::<usize>(replies.next())? > 0);
        }
        let mut proven = Vec::with_capacity(strangers.len());
        for _ in strangers {
            proven.push(parse::<usize>(replies.next())? > 0);
        }
        Ok((joined, proven))
    }
}

/// A listing told apart (`Presence::told_apart`).
struct Named {
    registry: Registry,
    /// Whether each of the registry's names is a candidate (in the join set alone).
    candidates: Vec<bool>,
    /// The candidates that are no bench names.
    strangers: Vec<String>,
    utf8: bool,
}

/// The registry as the cold plan lists it.
struct Listing {
    version: String,
    size: (usize, Joined),
    /// The registry proper's members.
    registered: Vec<Vec<u8>>,
    /// The join set's members that the registry proper lacks (none when it is not read).
    candidates: Vec<Vec<u8>>,
    problems: Vec<String>,
}

/// One member of the registry's sets: a bench name, or the text it is and whether it was UTF-8.
fn member(raw: Vec<u8>) -> Result<BenchName, (String, bool)> {
    match String::from_utf8(raw) {
        Ok(text) => BenchName::parse(&text).map_err(|_| (text, true)),
        Err(e) => Err((String::from_utf8_lossy(e.as_bytes()).into_owned(), false)),
    }
}
