//! Every Redis key fleet reads or writes is named here, and only here (SPEC §2.3).
//!
//! All keys live under one prefix (`--prefix`, default `fleet`). The presence keys share the hash
//! tag `{<prefix>}`, so the one-round-trip fleet read and the beat's pipeline stay inside one Redis
//! Cluster hash slot, and the same code runs on a single Redis and on a cluster.

use crate::domain::name::{BenchName, ClaimName, GroupName};

/// The default prefix under which every key lives.
pub const DEFAULT_PREFIX: &str = "fleet";
/// The longest prefix: keys stay short enough to read in `redis-cli`.
pub const MAX_PREFIX_LEN: usize = 64;
/// What a heartbeat key has between the hash tag and the bench name.
const HEARTBEAT: &str = ":bench:";

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
    /// always; the bench's beat is its only writer (and `fleet forget`, which deletes it).
    pub fn heartbeat(&self, name: &BenchName) -> String {
        // By hand, not with format!: a fleet read builds one per bench, 100 000 at a time.
        let mut key = String::with_capacity(self.tag.len() + HEARTBEAT.len() + name.as_str().len());
        key.push_str(&self.tag);
        key.push_str(HEARTBEAT);
        key.push_str(name.as_str());
        key
    }

    /// The part of every heartbeat key before the bench name, for a member of the join set that
    /// is no bench name, whose keys the cold read asks about.
    pub fn heartbeat_prefix(&self) -> String {
        format!("{}{HEARTBEAT}", self.tag)
    }

    /// The hold requests (the seed's DesiredKey): a hash from bench name to the operator's ask,
    /// `{"reason": ..., "until": <server ms>}`, carried by the bench on its next beat. A request
    /// made `--for` a while lapses on the server's clock; a field lives until released, lapsed
    /// and beaten over, or forgotten, so the hash is bounded by the registry.
    pub fn hold_requests(&self) -> String {
        format!("{}:holds", self.tag)
    }

    /// The registry's version: changed by every write of fleet's own users that adds or removes
    /// a member (`fleet serve` publishing its slots, `fleet register`, `fleet hold --register`,
    /// `fleet forget`), so a reader holding a copy of the
    /// registry knows, in its one round trip, that the copy is current; a bench's own join shows
    /// as the join set's size instead. Starts from the server's time, so it never repeats after a
    /// wipe.
    pub fn registry_version(&self) -> String {
        format!("{}:benches:version", self.tag)
    }

    /// When each bench last beat (server ms): a hash that beats wrote before the join keys
    /// (which hold it now), still read for the benches that have not beat since. Bounded by the
    /// registry (`fleet forget` removes its field). A report: nothing decides from it.
    pub fn last_seen(&self) -> String {
        format!("{}:seen", self.tag)
    }

    /// The registry: a set of the benches registered by fleet's own users (`fleet serve`'s
    /// configured slots, `fleet register`, `fleet hold --register`) and of every bench that beat
    /// before the join set (SPEC §2.3). No TTL; members
    /// leave by `fleet forget`. A bench's own beat never writes it: a user that may add one member
    /// to a set may add any.
    pub fn registry(&self) -> String {
        format!("{}:benches", self.tag)
    }

    /// The join set: the names the previous release's beats added themselves under. Under that
    /// release's ACL file a bench's user may add to it, so it may hold any name: a name counts as
    /// registered only while one of its own two keys exists, its join key (`joined_key`) or its
    /// heartbeat, which only that bench, or fleet's controller and CLI, can write, and it is read
    /// up to a bound (SPEC §2.3, §2.11, §7 S2). This release's file lets no bench write it. No
    /// TTL; members leave by `fleet forget`.
    pub fn joined(&self) -> String {
        format!("{}:joined", self.tag)
    }

    /// A bench's own join key: the proof that the bench itself beat, and when it last beat with a
    /// TTL (server ms; 0 before its first such beat). No TTL; removed by `fleet forget`. Written
    /// by that bench's beat only, so the key per bench is what an ACL can confine a bench to.
    pub fn joined_key(&self, name: &BenchName) -> String {
        format!("{}{}", self.joined_key_prefix(), name)
    }

    /// The part of every join key before the bench name, for a member of the join set that is no
    /// bench name, whose keys the cold read asks about.
    pub fn joined_key_prefix(&self) -> String {
        format!("{}:joined:", self.tag)
    }

    /// A bench's power-off request (SPEC §4.10): JSON `{"v":1,"nonce":…,"at":<server ms>,
    /// "until":<server ms>}`, written by the operation wrapper of a slot whose driver has
    /// `off: agent`, expiring at `until` (the operation's timeout), read by the bench's own beat.
    /// One key per bench, so an ACL can let a bench read its own request and no other.
    pub fn off_request(&self, name: &BenchName) -> String {
        format!("{}:off:{}", self.tag, name)
    }

    /// A bench's acknowledgement of its power-off request (SPEC §4.10): JSON `{"v":1,
    /// "nonce":…,"answer":"accepted"|"refused","why":…}`, written by the bench's agent before it
    /// runs its power-off command, expiring a while after the request it answers. Only that
    /// bench's user (and fleet's controller) may write it; the wrapper reads it.
    pub fn off_ack(&self, name: &BenchName) -> String {
        format!("{}:off:{}:ack", self.tag, name)
    }

    /// The wake channel (SPEC §4.5): a sharded pub/sub channel, not a key, under the presence
    /// keys' hash tag so the beat's pipeline may `SPUBLISH` to it from their slot. A beat that changes
    /// its bench's state (a new key, a hold put on or taken off, a deadline brought forward, the
    /// key deleted) publishes the bench's name there; steady beats publish nothing. The
    /// controller subscribes to it and passes at once. Nothing is stored.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.tag)
    }

    /// The ACL key pattern of every key under the prefix's own hash tag (presence, leadership,
    /// the configuration), for `fleet acl`. The prefix holds no glob character (`Keys::new`).
    pub fn acl_pattern(&self) -> String {
        format!("{}:*", self.tag)
    }

    /// The ACL key pattern of every group's keys (`{<prefix>:<group>}:...`), for `fleet acl`. Any
    /// group, not only the configured ones: the controller still ends and collects the claims of
    /// a group that left the configuration (SPEC §4.1).
    pub fn acl_group_pattern(&self) -> String {
        format!("{{{}:*}}:*", self.prefix())
    }
}

/// The keys of one group's claims and slots. They share the hash tag `{<prefix>:<group>}`, so
/// every atomic operation on a group's claims stays inside one Redis Cluster hash slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupKeys {
    tag: String,
}

impl Keys {
    /// The keys of one group.
    pub fn group(&self, group: &GroupName) -> GroupKeys {
        let prefix = self.prefix();
        GroupKeys {
            tag: format!("{{{prefix}:{group}}}"),
        }
    }

    /// The prefix these keys live under.
    pub fn prefix(&self) -> &str {
        &self.tag[1..self.tag.len() - 1]
    }

    /// The configuration `fleet serve` runs with, published for the views and verbs (JSON).
    pub fn config(&self) -> String {
        format!("{}:config", self.tag)
    }

    /// Every group that may hold claims: a hash from the name of each group `fleet serve` and
    /// `fleet claim` ran with to the timings it last ran with, kept until a group that left the
    /// configuration has no claim left, so the controller still ends the claims of a group that
    /// was removed or renamed, and collects them on time (SPEC §4.1).
    pub fn groups(&self) -> String {
        format!("{}:groups", self.tag)
    }

    /// The controller's status for the views (JSON): who leads, and whether it is blind, why and
    /// until when. Written by the leader, with a TTL it keeps renewing, so a status older than the
    /// TTL is gone and the views say no controller reports.
    pub fn controller(&self) -> String {
        format!("{}:controller", self.tag)
    }

    /// The leader lease: `<holder> <token>`, with a TTL the leader renews well inside.
    pub fn leader(&self) -> String {
        format!("{}:leader", self.tag)
    }

    /// The leadership epoch: the source of fencing tokens, growing with each new leadership.
    pub fn leader_epoch(&self) -> String {
        format!("{}:leader:epoch", self.tag)
    }

    /// The store's generation marker: set once, so a controller can tell a Redis that came back
    /// without its data (the marker is gone) from one that kept it.
    pub fn generation(&self) -> String {
        format!("{}:generation", self.tag)
    }

    /// The wipe record: `<blind until ms> <adopt until ms>`, set with a fresh generation marker
    /// and expiring when adoption ends, so every leader keeps the same grace.
    pub fn wiped(&self) -> String {
        format!("{}:wiped", self.tag)
    }

    /// The leader's written mark: `<token>:<n>`, set by the leader after each pass's writes, so
    /// the next pass can tell a store that lost them (a failover to a replica that had not
    /// received them) from one that kept them (SPEC §5.3).
    pub fn written(&self) -> String {
        format!("{}:written", self.tag)
    }

    /// The replication counter: the controller increments it and waits for replicas to
    /// acknowledge it before a power action, which proves every write before it reached them
    /// (SPEC §5.6).
    pub fn replicated(&self) -> String {
        format!("{}:replicated", self.tag)
    }
}

impl GroupKeys {
    /// The group's replication counter, on a Redis Cluster: the group's writes are on the node
    /// of its own hash slot, whose replicas the controller waits for beside those of the
    /// prefix's node (SPEC §5.6).
    pub fn replicated(&self) -> String {
        format!("{}:replicated", self.tag)
    }

    /// One claim: its JSON. Deleted when the claim is cancelled or collected.
    pub fn claim(&self, name: &ClaimName) -> String {
        format!("{}{}", self.claim_prefix(), name)
    }

    /// The part of every claim key before the claim name, for the group read script.
    pub fn claim_prefix(&self) -> String {
        format!("{}:claim:", self.tag)
    }

    /// The count of the group's claim and operation-record writes: every script that writes a
    /// claim, the index, the wanted set or an operation record adds one in the same step. A read
    /// in several round trips that finds it unmoved from its first to its last read every key
    /// unchanged, as one script would have (SPEC §4.3).
    pub fn changes(&self) -> String {
        format!("{}:changes", self.tag)
    }

    /// The group's claims: a sorted set of names scored by request time (ms).
    pub fn claims(&self) -> String {
        format!("{}:claims", self.tag)
    }

    /// The group's claims that want a machine (live, not marked for deletion): a set of names,
    /// kept by the claim scripts in the same step as each claim, so its size is the target size
    /// in one round trip.
    pub fn wanted(&self) -> String {
        format!("{}:wanted", self.tag)
    }

    /// A slot's live claim: the name of the one live claim, the lock that makes one live claim
    /// per slot airtight. Set by the create script, removed by the terminal move.
    pub fn live(&self, slot: &BenchName) -> String {
        format!("{}:live:{}", self.tag, slot)
    }

    /// A slot's status: its phase and history (JSON), written by the controller's report.
    pub fn slot(&self, slot: &BenchName) -> String {
        format!("{}{}", self.slot_prefix(), slot)
    }

    pub fn slot_prefix(&self) -> String {
        format!("{}:slot:", self.tag)
    }

    /// A slot's last-claim digest (JSON): outlives the claim's collection.
    pub fn last_claim(&self, slot: &BenchName) -> String {
        format!("{}{}", self.last_claim_prefix(), slot)
    }

    pub fn last_claim_prefix(&self) -> String {
        format!("{}:last:", self.tag)
    }

    /// A slot's energy ledger (SPEC §4.12): a hash of daily buckets (`YYYY-MM-DD`) and its
    /// `mark`, written by the leader under the fence; no TTL, bounded by trimming old days.
    pub fn energy(&self, slot: &BenchName) -> String {
        format!("{}:energy:{}", self.tag, slot)
    }

    /// A slot's BMC power reading (SPEC §4.10): JSON `{"v":1,"state":"on"|"off"|"unknown",
    /// "at":<server ms>,"why":…}`, written by the leader's reader under the fence, expiring a few
    /// read periods after it was written, so a reading nobody renews is gone. A report: the claim
    /// model never reads it.
    pub fn bmc(&self, slot: &BenchName) -> String {
        format!("{}:bmc:{}", self.tag, slot)
    }

    /// The group's fence: the token of the leader allowed to write the group's claims and
    /// statuses. Raised by each new leader; a write carrying another token is refused.
    pub fn fence(&self) -> String {
        format!("{}:fence", self.tag)
    }

    /// The slots' operation records (SPEC §5.4): a hash with, per slot, the field `<slot>` (the
    /// start of the last operation fired on it), `<slot>:end` (how it ended) and `<slot>:off`
    /// (when the machine was observed off after a shutdown). A slot name never holds `:`.
    pub fn operations(&self) -> String {
        format!("{}:ops", self.tag)
    }

    /// The group's last scaling call (JSON `{at, action, count}`), written by the requests that
    /// change the target (IncreaseSize, DeleteNodes, DecreaseTargetSize, `fleet claim`,
    /// `fleet cancel`), shown by `fleet groups`. A report: nothing decides from it.
    pub fn last_scale(&self) -> String {
        format!("{}:scaled", self.tag)
    }

    /// A claim's timeline: a list of JSON entries, one per accepted move, capped in length, and
    /// expiring with the claim's collection.
    pub fn timeline(&self, claim: &ClaimName) -> String {
        format!("{}{}", self.timeline_prefix(), claim)
    }

    /// The part of every timeline key before the claim name, for the terminal write, which
    /// collects the oldest ended claims past the bound with their timelines.
    pub fn timeline_prefix(&self) -> String {
        format!("{}:timeline:", self.tag)
    }

    /// The group's ended claims (failed or completed): a sorted set of names scored by when each
    /// ended (µs, strictly increasing), kept to `claims::ENDED_KEPT` by the terminal write.
    pub fn ended(&self) -> String {
        format!("{}:ended", self.tag)
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
        assert_eq!(keys.joined(), "{fleet}:joined");
        assert_eq!(keys.joined_key(&name), "{fleet}:joined:bench-01");
        assert!(
            keys.joined_key(&name)
                .starts_with(&keys.joined_key_prefix())
        );
        assert_eq!(keys.off_request(&name), "{fleet}:off:bench-01");
        assert_eq!(keys.off_ack(&name), "{fleet}:off:bench-01:ack");
        assert_eq!(keys.wake_channel(), "{fleet}:wake");
    }

    #[test]
    fn acl_patterns_cover_the_prefix_and_every_group_and_nothing_else() {
        let keys = Keys::new("team-a").unwrap();
        assert_eq!(keys.acl_pattern(), "{team-a}:*");
        assert_eq!(keys.acl_group_pattern(), "{team-a:*}:*");
        let g = keys.group(&GroupName::parse("pool-a").unwrap());
        let slot = BenchName::parse("bench-01").unwrap();
        // Redis's glob, for the patterns' two shapes: a literal text, then one `*` or two.
        let glob = |pattern: &str, key: &str| {
            let parts: Vec<&str> = pattern.split('*').collect();
            let mut rest = key;
            for (i, part) in parts.iter().enumerate() {
                if i == 0 {
                    let Some(r) = rest.strip_prefix(part) else {
                        return false;
                    };
                    rest = r;
                } else if i == parts.len() - 1 {
                    return rest.ends_with(part);
                } else {
                    let Some(at) = rest.find(part) else {
                        return false;
                    };
                    rest = &rest[at + part.len()..];
                }
            }
            rest.is_empty()
        };
        for key in [
            keys.heartbeat(&slot),
            keys.registry(),
            keys.leader(),
            keys.config(),
        ] {
            assert!(glob(&keys.acl_pattern(), &key), "{key}");
        }
        for key in [g.claims(), g.slot(&slot), g.fence()] {
            assert!(glob(&keys.acl_group_pattern(), &key), "{key}");
        }
        for other in ["{team-b}:benches", "team-a:benches", "{fleet}:bench:x"] {
            assert!(!glob(&keys.acl_pattern(), other), "{other}");
            assert!(!glob(&keys.acl_group_pattern(), other), "{other}");
        }
    }

    #[test]
    fn a_groups_keys_share_the_groups_hash_tag() {
        let g = Keys::new("fleet")
            .unwrap()
            .group(&GroupName::parse("pool-a").unwrap());
        let slot = BenchName::parse("bench-01").unwrap();
        let claim = ClaimName::parse("bench-01-1").unwrap();
        assert_eq!(g.claim(&claim), "{fleet:pool-a}:claim:bench-01-1");
        assert_eq!(g.claims(), "{fleet:pool-a}:claims");
        assert_eq!(g.live(&slot), "{fleet:pool-a}:live:bench-01");
        assert_eq!(g.slot(&slot), "{fleet:pool-a}:slot:bench-01");
        assert_eq!(g.last_claim(&slot), "{fleet:pool-a}:last:bench-01");
        assert_eq!(g.timeline(&claim), "{fleet:pool-a}:timeline:bench-01-1");
        assert_eq!(Keys::default().config(), "{fleet}:config");
        assert_eq!(g.fence(), "{fleet:pool-a}:fence");
        assert_eq!(g.operations(), "{fleet:pool-a}:ops");
        assert_eq!(g.bmc(&slot), "{fleet:pool-a}:bmc:bench-01");
        assert_eq!(Keys::default().leader(), "{fleet}:leader");
        assert_eq!(Keys::default().leader_epoch(), "{fleet}:leader:epoch");
        assert_eq!(Keys::default().generation(), "{fleet}:generation");
        assert_eq!(Keys::default().groups(), "{fleet}:groups");
        assert_eq!(Keys::default().controller(), "{fleet}:controller");
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
