//! The cold fleet read (SPEC §2.5): a reader that holds no current copy of the registry lists
//! it (its version and the members of both its sets) and then sends the warm plan's pipeline over
//! the listing. Two round trips, neither of which moves a value through Lua: the read script,
//! which resolves the registry on the server in one, held Redis's thread about ten times as long
//! as the `MGET` of the same keys while every beat waited. The script stays, for a registry that
//! keeps changing between the listing and the read, and for a listing that cannot be used.

use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;

use crate::domain::name::BenchName;
use crate::domain::state::Reading;
use crate::store::script::eval_ro;

use super::decode::{assemble, mark_wrong_types, parse, parse_result};
use super::read::{Registry, Typing, other_type};
use super::{Presence, PresenceError, READ, Snapshot};

/// How often the cold read lists the registry again when it changed between the listing and the
/// read; after that the read script resolves it atomically.
const COLD_TRIES: usize = 3;

impl<C: ConnectionLike + Clone + Send> Presence<C> {
    /// The cold plan: the registry is listed, then read over as a held copy would be (two round
    /// trips, neither holding Redis longer than one `SMEMBERS`). When the registry changed
    /// between the two, it is listed again; after `COLD_TRIES` listings, or when the listing
    /// cannot be used (a set of another type), the read script resolves it on the server. The
    /// registry read is kept for the next read.
    pub(super) async fn read_cold(&self) -> Result<Snapshot, PresenceError> {
        for _ in 0..COLD_TRIES {
            let Some(listing) = self.list().await? else {
                break;
            };
            if let Some(snapshot) = self.read_listed(listing).await? {
                return Ok(snapshot);
            }
        }
        self.read_script().await
    }

    /// The cold plan's first round trip: the registry's version and the members of both its
    /// sets. `None` when a reply is an error (a key of another type): the read script then says
    /// what it says of it.
    async fn list(&self) -> Result<Option<Listing>, PresenceError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        // Both sets whole, not SDIFF: Redis builds SDIFF's result as a set of its own, which cost
        // 6 ms of its thread at 10 000 members where SMEMBERS of the same costs well under one.
        pipe.get(self.keys.registry_version())
            .smembers(self.keys.registry())
            .smembers(self.keys.joined());
        let mut conn = self.conn.clone();
        let replies: Vec<redis::RedisResult<redis::Value>> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        if replies.iter().any(Result::is_err) {
            return Ok(None);
        }
        let mut replies = replies.into_iter();
        let version: Option<String> = parse_result(replies.next())?;
        let registered: Vec<Vec<u8>> = parse_result(replies.next())?;
        let joined: Vec<Vec<u8>> = parse_result(replies.next())?;
        let size = (registered.len(), joined.len());
        let known: std::collections::HashSet<&[u8]> =
            registered.iter().map(Vec::as_slice).collect();
        let candidates = joined
            .into_iter()
            .filter(|m| !known.contains(m.as_slice()))
            .collect();
        Ok(Some(Listing {
            version: version.unwrap_or_default(),
            size,
            registered,
            candidates,
        }))
    }

    /// The cold plan's second round trip: the warm pipeline over a listing, its candidates read
    /// as benches. `None` when the registry changed since the listing. A candidate counts when
    /// one of its own two keys exists, the heartbeat or the join key, which only that bench's
    /// user (or fleet) can write (SPEC §2.3): one whose heartbeat the pipeline found is proved by
    /// it. The pipeline counts nothing else: only when some key was not found does a third round
    /// trip ask, of those alone, what each is (a key of another type) and whether a candidate's
    /// join key exists. A fleet whose benches are all up never pays it.
    async fn read_listed(&self, listing: Listing) -> Result<Option<Snapshot>, PresenceError> {
        let Named {
            mut registry,
            candidates,
            strangers,
            mut utf8,
        } = self.named(listing);
        let (stamp, mut snapshot) = self.read_registered(&registry, Typing::Later).await?;
        if !registry.is_current(&stamp) {
            return Ok(None);
        }
        let missing: Vec<usize> = (snapshot.benches.iter().enumerate())
            .filter(|(_, b)| b.reading == Reading::Missing)
            .map(|(i, _)| i)
            .collect();
        if !missing.is_empty() || !strangers.is_empty() {
            let asked = self
                .ask_missing(&registry, &missing, &candidates, &strangers)
                .await?;
            let mut types = Vec::new();
            let mut dropped = std::collections::HashSet::new();
            for (i, (kind, joined)) in missing.into_iter().zip(asked.missing) {
                let name = &registry.names[i];
                if other_type(&kind) {
                    types.push((i, kind));
                } else if joined == Some(false) && kind == "none" {
                    // A candidate with neither of its keys: no bench, left out, and watched by
                    // the next reads (only the bench names: no fleet writer makes another's).
                    registry
                        .unproven
                        .push(self.keys.joined_key(name).into_bytes());
                    dropped.insert(name.clone());
                }
            }
            mark_wrong_types(&mut snapshot, &registry.names, &types);
            // A stranger with either key is reported, as the registry's are.
            for (stranger, proven) in strangers.into_iter().zip(asked.strangers) {
                if let (Member::Foreign { text, utf8: is, .. }, true) = (stranger, proven) {
                    registry.foreign.push(text);
                    utf8 &= is;
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
        let registry = registry.counting_absent(&snapshot);
        *self.registry.lock().expect("registry lock") = utf8.then(|| Arc::new(registry));
        Ok(Some(snapshot))
    }

    /// The listing's members told apart, as a registry to read over: the bench names sorted with
    /// their heartbeat keys, whether each is a candidate, the registry's members that are no
    /// bench names (reported), the candidates that are none (asked about), and whether every
    /// member was UTF-8.
    fn named(&self, listing: Listing) -> Named {
        let mut named = Vec::with_capacity(listing.registered.len() + listing.candidates.len());
        let mut foreign = Vec::new();
        let mut utf8 = true;
        for raw in listing.registered {
            match Member::of(raw) {
                Member::Bench(name) => named.push((name, false)),
                Member::Foreign { text, utf8: is, .. } => {
                    foreign.push(text);
                    utf8 &= is;
                }
            }
        }
        let mut strangers = Vec::new();
        for raw in listing.candidates {
            match Member::of(raw) {
                Member::Bench(name) => named.push((name, true)),
                stranger => strangers.push(stranger),
            }
        }
        named.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let (names, candidates): (Vec<BenchName>, Vec<bool>) = named.into_iter().unzip();
        let registry = Registry {
            version: listing.version,
            size: listing.size,
            unproven: Vec::new(),
            keys: names.iter().map(|n| self.keys.heartbeat(n)).collect(),
            names,
            foreign,
            absent: Mutex::default(),
        };
        Named {
            registry,
            candidates,
            strangers,
            utf8,
        }
    }

    /// The cold read's third round trip, of the keys its pipeline did not find: the `TYPE` of
    /// each missing heartbeat key and, for a candidate, whether its join key exists; and whether
    /// either key of each member that is no bench name exists (as the read script asks).
    async fn ask_missing(
        &self,
        registry: &Registry,
        missing: &[usize],
        candidates: &[bool],
        strangers: &[Member],
    ) -> Result<Asked, PresenceError> {
        let mut pipe = redis::pipe();
        let mut joined = Vec::with_capacity(missing.len());
        for &i in missing {
            pipe.cmd("TYPE").arg(&registry.keys[i]);
            let candidate = candidates[i];
            if candidate {
                pipe.exists(self.keys.joined_key(&registry.names[i]));
            }
            joined.push(candidate);
        }
        let (join, beat) = (self.keys.joined_key_prefix(), self.keys.heartbeat_prefix());
        for stranger in strangers {
            let raw = stranger.raw();
            pipe.exists(&[
                [join.as_bytes(), raw].concat(),
                [beat.as_bytes(), raw].concat(),
            ]);
        }
        let mut conn = self.conn.clone();
        let replies: Vec<redis::Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        let mut replies = replies.into_iter();
        let mut asked = Asked::default();
        for candidate in joined {
            let kind: String = parse(replies.next())?;
            let join = if candidate {
                Some(parse::<usize>(replies.next())? > 0)
            } else {
                None
            };
            asked.missing.push((kind, join));
        }
        for _ in strangers {
            asked.strangers.push(parse::<usize>(replies.next())? > 0);
        }
        Ok(asked)
    }

    /// The read script: the registry resolved on the server, in one round trip that holds Redis
    /// while it moves every value through Lua. The registry it returns is kept for the next read.
    async fn read_script(&self) -> Result<Snapshot, PresenceError> {
        let keys = [
            self.keys.registry(),
            self.keys.registry_version(),
            self.keys.hold_requests(),
            self.keys.joined(),
        ];
        // What the script returns, in its order.
        type ColdReply = (
            String,
            (String, String),
            Vec<Vec<u8>>,
            Vec<Option<Vec<u8>>>,
            Vec<(Vec<u8>, Vec<u8>)>,
            Vec<(usize, String)>,
            i64,
            usize,
            usize,
            Vec<Vec<u8>>,
        );
        let mut conn = self.conn.clone();
        let reply: ColdReply = eval_ro(READ, &keys)
            .arg(self.keys.heartbeat_prefix())
            .arg(self.keys.joined_key_prefix())
            .query_async(&mut conn)
            .await
            .map_err(|source| PresenceError::Read { source })?;
        let (version, time, members, values, holds, types, holds_ok, registered, joined, unproven) =
            reply;
        if values.len() != members.len() {
            return Err(PresenceError::ReadReply(format!(
                "{} members but {} values",
                members.len(),
                values.len()
            )));
        }
        let Members {
            mut benches,
            mut foreign,
            utf8,
            wrong_names,
        } = Members::of(members, values, types);
        benches.sort_by(|a, b| a.0.cmp(&b.0));
        foreign.sort();
        let (names, values): (Vec<BenchName>, Vec<Option<Vec<u8>>>) = benches.into_iter().unzip();
        let mut snapshot = assemble(time, &names, values, holds, foreign.clone())?;
        let types: Vec<(usize, String)> = wrong_names
            .into_iter()
            .filter_map(|(name, t)| Some((names.binary_search(&name).ok()?, t)))
            .collect();
        mark_wrong_types(&mut snapshot, &names, &types);
        if holds_ok == 0 {
            snapshot.problems = vec![self.holds_problem()];
        }
        // A name of the join set that is not a bench name has no join key fleet writes: only the
        // bench names among them are watched.
        let unproven = unproven
            .iter()
            .filter_map(|raw| std::str::from_utf8(raw).ok())
            .filter_map(|text| BenchName::parse(text).ok())
            .map(|name| self.keys.joined_key(&name).into_bytes())
            .collect();
        // A member that is not UTF-8 has no name to build a key from: with one in the registry
        // nothing is kept, and every read is cold, so it is still reported.
        let keys = names.iter().map(|n| self.keys.heartbeat(n)).collect();
        let (size, absent) = ((registered, joined), Mutex::default());
        let registry = Registry {
            version,
            size,
            unproven,
            keys,
            names,
            foreign,
            absent,
        };
        let registry = utf8.then(|| Arc::new(registry.counting_absent(&snapshot)));
        *self.registry.lock().expect("registry lock") = registry;
        Ok(snapshot)
    }
}

/// What the cold read's third round trip found: per missing heartbeat key its type and, for a
/// candidate, whether its join key exists; per member that is no bench name, whether either of
/// its keys exists.
#[derive(Default)]
struct Asked {
    missing: Vec<(String, Option<bool>)>,
    strangers: Vec<bool>,
}

/// A listing told apart (`Presence::named`).
struct Named {
    registry: Registry,
    /// Whether each of the registry's names is a candidate (in the join set alone).
    candidates: Vec<bool>,
    /// The candidates that are no bench names.
    strangers: Vec<Member>,
    utf8: bool,
}

/// The registry as the cold plan's first round trip lists it.
struct Listing {
    version: String,
    /// The sizes of the registry proper and of the join set.
    size: (usize, usize),
    /// The registry proper's members.
    registered: Vec<Vec<u8>>,
    /// The join set's members that the registry proper lacks.
    candidates: Vec<Vec<u8>>,
}

/// One member of the registry's sets: a bench name, or something else (reported, never read),
/// with the bytes it was.
enum Member {
    Bench(BenchName),
    Foreign {
        text: String,
        utf8: bool,
        raw: Vec<u8>,
    },
}

impl Member {
    fn of(raw: Vec<u8>) -> Member {
        match std::str::from_utf8(&raw) {
            Ok(text) => match BenchName::parse(text) {
                Ok(name) => Member::Bench(name),
                Err(_) => Member::Foreign {
                    text: text.to_owned(),
                    utf8: true,
                    raw,
                },
            },
            Err(_) => Member::Foreign {
                text: String::from_utf8_lossy(&raw).into_owned(),
                utf8: false,
                raw,
            },
        }
    }

    /// The member as the set holds it.
    fn raw(&self) -> &[u8] {
        match self {
            Member::Bench(name) => name.as_str().as_bytes(),
            Member::Foreign { raw, .. } => raw,
        }
    }
}

/// The members the read script returned, told apart: the bench names with their values, the
/// foreign ones (reported, never read), whether every member was UTF-8, and the benches whose key
/// holds another type.
struct Members {
    benches: Vec<(BenchName, Option<Vec<u8>>)>,
    foreign: Vec<String>,
    utf8: bool,
    wrong_names: Vec<(BenchName, String)>,
}

impl Members {
    /// `types` names (1-based) the members whose key holds another type.
    fn of(
        members: Vec<Vec<u8>>,
        values: Vec<Option<Vec<u8>>>,
        types: Vec<(usize, String)>,
    ) -> Members {
        let wrong: std::collections::HashMap<usize, String> = types.into_iter().collect();
        let mut out = Members {
            benches: Vec::with_capacity(members.len()),
            foreign: Vec::new(),
            utf8: true,
            wrong_names: Vec::new(),
        };
        for (i, (raw, value)) in members.into_iter().zip(values).enumerate() {
            match Member::of(raw) {
                Member::Bench(name) => {
                    if let Some(t) = wrong.get(&(i + 1)) {
                        out.wrong_names.push((name.clone(), t.clone()));
                    }
                    out.benches.push((name, value))
                }
                Member::Foreign { text, utf8, .. } => {
                    out.utf8 &= utf8;
                    out.foreign.push(text);
                }
            }
        }
        out
    }
}
