//! The Redis users fleet runs as, and what each may do: the lines of an ACL file (SPEC §2.11,
//! §7).
//!
//! Three kinds of user. The controller runs `fleet serve` and the verbs that write (claims,
//! holds, forget): every key under the prefix, and only the commands fleet sends, its scripts
//! among them. The viewer runs the views: it reads the same keys with plain commands, writes
//! none and runs no script. Each bench has a user of its own that may write its own heartbeat,
//! join key and power-off acknowledgement, read the hold requests and its own power-off request,
//! and publish on the wake channel, and nothing else: no script (a user that may run one may run
//! any, and one that never ends freezes Redis for everyone), and nothing shared it could add
//! names to (a user that may add one member to a set may add millions).
//!
//! Under the default prefix the users are `fleet-controller`, `fleet-viewer` and each slot's
//! name, as they always were; under any other prefix `P` they are `P+controller`, `P+viewer`
//! and `P+bench.<slot>`, so two fleets on one Redis each have users of their own (a bench name
//! and a prefix cannot hold `+`, so no name of one fleet is a name of another).
//!
//! The command lists are the commands fleet's store sends and its scripts call, held to the
//! scripts and to the beat by this module's tests. Pure: no I/O. A password is written only as
//! its SHA-256 (`#<hex>`), so the file can be shown and kept in a repository without giving a
//! password away.

use sha2::{Digest, Sha256};

use crate::domain::name::BenchName;

use super::keys::Keys;

/// The user `fleet serve`, its operations and the writing verbs run as, under the default prefix.
pub const CONTROLLER: &str = "fleet-controller";
/// The user the views run as (`fleet state`, `live`, `slots`, `claims`, `groups`, `describe`),
/// under the default prefix.
pub const VIEWER: &str = "fleet-viewer";

/// What a connection needs whatever it does: the check `Endpoint::connect` makes, `ROLE` (a
/// connection found through Sentinel checks it reached the primary, SPEC §2.7), `SELECT` for a
/// URL that names a database (key patterns hold in every database alike), and `CLUSTER SLOTS`,
/// which a Redis Cluster connection reads the slot map with.
const CONNECTION: &[&str] = &["cluster|slots", "ping", "role", "select"];

/// The commands of the views, all plain reads: the fleet read (its pipeline, a bounded `GETRANGE`
/// of every value a bench writes), the last-seen read, the catalog, the groups' claims in
/// batches, the slots' statuses and digests, the timelines. No script: `EVAL_RO` runs any code a
/// user sends, and a loop in it freezes Redis as surely as one in `EVAL` (SPEC §7).
const READS: &[&str] = &[
    "exists",
    "get",
    "getrange",
    "hget",
    "hgetall",
    "hmget",
    "lrange",
    "mget",
    "scard",
    "sismember",
    "smembers",
    "time",
    "type",
    "zcard",
    "zrange",
];

/// What the controller, the provider and the writing verbs add to the reads: the scripts, and
/// the writes they and the store's pipelines make.
const WRITES: &[&str] = &[
    "del", "eval", "eval_ro", "evalsha", "hdel", "hexists", "hset", "incr", "ltrim", "pexpire",
    "rpush", "sadd", "set", "spublish", "srem", "zadd", "zrem",
];

/// What the controller's wake listener sends on its own connection (SPEC §4.5): the subscription
/// to the wake channel, the one channel any of fleet's users may use.
const WAKE: &[&str] = &["ssubscribe"];

/// What the replica gate sends before a power action (SPEC §5.6), beside its counter's `INCR`.
const GATE: &[&str] = &["wait"];

/// What `fleet serve` asks of each connection it keeps (SPEC §7.2, S8): never to be the client
/// Redis cuts off when its clients' memory passes `maxmemory-clients`. It changes that connection
/// alone, no other client and no setting of the server's.
const KEEP: &[&str] = &["client|no-evict"];

/// What a bench's beat does (`store::presence`, one pipeline of plain commands), on its own keys:
/// the server's clock, its key's read (did its state change?) and write (or its deletion, for a
/// TTL of 0), the announcement of a change on the wake channel; and its power-off
/// acknowledgement (`SET`). No script and no transaction: a transaction of millions of queued
/// commands runs as one, and holds Redis for everyone while it does (SPEC §7 S1). Nothing shared
/// it may write.
const BEAT: &[&str] = &["del", "get", "set", "spublish", "time"];

/// The only thing a bench may do to the hold requests: read its own (a hash's fields cannot be
/// told apart by an ACL, so it may read them all; they are no secret, every view shows them).
const BEAT_HOLDS: &[&str] = &["hget"];

/// What a bench may do to its power-off request, and its own acknowledgement, in its beat and
/// when it answers (SPEC §4.10): read each. It writes its acknowledgement with the root's `SET`,
/// since that key is its own.
const BEAT_OFF: &[&str] = &["get"];

/// One of fleet's Redis users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum User {
    Controller,
    Viewer,
    Bench(BenchName),
}

/// A bench whose name is one of the names the ACL needs for itself.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the slot {0} has the name of a Redis user fleet needs for itself ({CONTROLLER}, {VIEWER}, \
     default): rename the slot in the configuration, or give the fleet a prefix of its own \
     (--prefix), whose users are named after it"
)]
pub struct ReservedName(pub String);

impl User {
    /// The users of a fleet with these benches under `keys`' prefix: the controller, the viewer,
    /// then one per bench in the order given. Under the default prefix a bench's user is the
    /// bench's name, and a bench named like one of the others would take its user's place.
    pub fn all<'a>(
        keys: &Keys,
        benches: impl IntoIterator<Item = &'a BenchName>,
    ) -> Result<Vec<User>, ReservedName> {
        let mut users = vec![User::Controller, User::Viewer];
        for bench in benches {
            if is_default(keys) && [CONTROLLER, VIEWER, "default"].contains(&bench.as_str()) {
                return Err(ReservedName(bench.to_string()));
            }
            users.push(User::Bench(bench.clone()));
        }
        Ok(users)
    }

    /// The user's name in Redis. Under the default prefix, `fleet-controller`, `fleet-viewer` and
    /// a bench's own name; under a prefix `P`, `P+controller`, `P+viewer` and `P+bench.<name>`.
    pub fn name(&self, keys: &Keys) -> String {
        if is_default(keys) {
            return match self {
                User::Controller => CONTROLLER.to_owned(),
                User::Viewer => VIEWER.to_owned(),
                User::Bench(name) => name.as_str().to_owned(),
            };
        }
        let prefix = keys.prefix();
        match self {
            User::Controller => format!("{prefix}+controller"),
            User::Viewer => format!("{prefix}+viewer"),
            User::Bench(name) => format!("{prefix}+bench.{name}"),
        }
    }

    /// What the user may do, as ACL rules after its password: keys, then commands; a bench's
    /// grants on shared keys each in a selector of its own, so a command granted on one key is
    /// granted on that key alone.
    pub fn rules(&self, keys: &Keys) -> String {
        let all = [keys.acl_pattern(), keys.acl_group_pattern()];
        match self {
            User::Controller => format!(
                "~{} ~{} &{} {}",
                all[0],
                all[1],
                keys.wake_channel(),
                grants(&[CONNECTION, READS, WRITES, WAKE, GATE, KEEP])
            ),
            User::Viewer => format!(
                "%R~{} %R~{} {}",
                all[0],
                all[1],
                grants(&[CONNECTION, READS])
            ),
            User::Bench(name) => format!(
                "~{} ~{} ~{} &{} {} ({}) (%R~{} {})",
                keys.heartbeat(name),
                keys.joined_key(name),
                keys.off_ack(name),
                keys.wake_channel(),
                grants(&[CONNECTION, BEAT]),
                selector("%R~", &keys.hold_requests(), BEAT_HOLDS),
                keys.off_request(name),
                selector("%R~", &keys.off_ack(name), BEAT_OFF),
            ),
        }
    }

    /// The user's line of an ACL file. `reset` first, so the line says everything the user may
    /// do, whatever the server had before (`ACL LOAD`).
    pub fn line(&self, keys: &Keys, password: &str) -> String {
        format!(
            "user {} reset on #{} {}",
            self.name(keys),
            sha256_hex(password),
            self.rules(keys)
        )
    }
}

/// Whether `keys` are the default prefix's, whose users keep the names they always had.
fn is_default(keys: &Keys) -> bool {
    keys.prefix() == super::keys::DEFAULT_PREFIX
}

/// `-@all` then each command, sorted: nothing is granted by category, so a command Redis adds to
/// a category later is not granted by accident.
fn grants(lists: &[&[&str]]) -> String {
    let mut commands = lists.concat();
    commands.sort_unstable();
    let mut out = String::from("-@all");
    for c in commands {
        out.push_str(" +");
        out.push_str(c);
    }
    out
}

fn selector(permission: &str, key: &str, commands: &[&str]) -> String {
    format!("{permission}{key} {}", grants(&[commands]))
}

/// The SHA-256 of a password in lowercase hex, as Redis's `#<hash>` rule takes it.
pub fn sha256_hex(password: &str) -> String {
    Sha256::digest(password.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(s: &str) -> BenchName {
        BenchName::parse(s).unwrap()
    }

    /// The commands a line grants, in the root and in each selector.
    fn granted(rules: &str) -> Vec<String> {
        rules
            .split_whitespace()
            .filter_map(|w| w.trim_start_matches('(').strip_prefix('+'))
            .map(|c| c.trim_end_matches(')').to_owned())
            .collect()
    }

    #[test]
    fn a_password_is_written_as_its_sha256_never_as_itself() {
        assert_eq!(
            sha256_hex("pw"),
            "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
        );
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let line = User::Viewer.line(&Keys::default(), "s3cret");
        assert!(!line.contains("s3cret"), "{line}");
        assert!(!line.contains('>'), "no plaintext password rule: {line}");
        assert!(line.starts_with(&format!(
            "user fleet-viewer reset on #{} ",
            sha256_hex("s3cret")
        )));
    }

    #[test]
    fn the_users_are_the_controller_the_viewer_and_one_per_bench_in_order() {
        let benches = [bench("bench-a"), bench("gpu-01")];
        let names = |keys: &Keys| -> Vec<String> {
            User::all(keys, &benches)
                .unwrap()
                .iter()
                .map(|u| u.name(keys))
                .collect()
        };
        assert_eq!(
            names(&Keys::default()),
            [CONTROLLER, VIEWER, "bench-a", "gpu-01"]
        );
        assert_eq!(
            names(&Keys::new("team-a").unwrap()),
            [
                "team-a+controller",
                "team-a+viewer",
                "team-a+bench.bench-a",
                "team-a+bench.gpu-01"
            ]
        );
        for taken in [CONTROLLER, VIEWER, "default"] {
            assert_eq!(
                User::all(&Keys::default(), &[bench(taken)]),
                Err(ReservedName(taken.to_owned()))
            );
            // Under a prefix of its own, a bench's user is named after the prefix: no name is
            // taken.
            assert!(User::all(&Keys::new("team-a").unwrap(), &[bench(taken)]).is_ok());
        }
    }

    // Two fleets on one Redis (SPEC §2.11): no user of one has the name of a user of the other,
    // whatever their prefixes and slot names; the default prefix keeps its names.
    #[test]
    fn two_prefixes_never_name_the_same_user() {
        let prefixes = [
            "fleet",
            "team",
            "team-a",
            "a.b",
            "a:b",
            "team+x",
            "fleet-controller",
        ]
        .into_iter()
        .filter_map(|p| Keys::new(p).ok())
        .collect::<Vec<_>>();
        let slots = [
            "controller",
            "viewer",
            "bench.a",
            "a",
            "b",
            "a-controller",
            "fleet-viewer",
            "team",
        ]
        .map(bench);
        let mut seen = std::collections::HashMap::new();
        for keys in &prefixes {
            let users = User::all(
                keys,
                slots.iter().filter(|s| {
                    keys.prefix() != "fleet" || !["fleet-viewer"].contains(&s.as_str())
                }),
            )
            .unwrap();
            for user in users {
                let name = user.name(keys);
                assert!(!name.contains(' '), "{name}");
                if let Some(other) = seen.insert(name.clone(), keys.prefix().to_owned()) {
                    panic!("{name} is a user of both {other} and {}", keys.prefix());
                }
            }
        }
    }

    #[test]
    fn each_user_gets_exactly_its_keys_and_commands() {
        let keys = Keys::new("team-a").unwrap();
        assert_eq!(
            User::Controller.rules(&keys),
            "~{team-a}:* ~{team-a:*}:* &{team-a}:wake -@all +client|no-evict +cluster|slots +del \
             +eval +eval_ro +evalsha +exists +get +getrange +hdel +hexists +hget +hgetall +hmget +hset +incr \
             +lrange +ltrim +mget +pexpire +ping +role +rpush +sadd +scard +select +set \
             +sismember +smembers +spublish +srem +ssubscribe +time +type +wait +zadd +zcard \
             +zrange +zrem"
        );
        assert_eq!(
            User::Viewer.rules(&keys),
            "%R~{team-a}:* %R~{team-a:*}:* -@all +cluster|slots +exists +get +getrange +hget \
             +hgetall +hmget +lrange +mget +ping +role +scard +select +sismember +smembers +time \
             +type +zcard +zrange"
        );
        assert_eq!(
            User::Bench(bench("bench-a")).rules(&keys),
            "~{team-a}:bench:bench-a ~{team-a}:joined:bench-a ~{team-a}:off:bench-a:ack \
             &{team-a}:wake -@all +cluster|slots +del +get +ping +role +select +set +spublish \
             +time \
             (%R~{team-a}:holds -@all +hget) \
             (%R~{team-a}:off:bench-a %R~{team-a}:off:bench-a:ack -@all +get)"
        );
    }

    #[test]
    fn no_user_may_run_a_command_that_reaches_past_its_keys_or_the_server() {
        let keys = Keys::default();
        for user in [User::Controller, User::Viewer, User::Bench(bench("b"))] {
            let rules = user.rules(&keys);
            assert!(!rules.contains("+@"), "no category is granted: {rules}");
            assert!(
                !rules.contains("~*") && !rules.contains("allkeys"),
                "{rules}"
            );
            for c in granted(&rules) {
                assert!(
                    ![
                        "flushall", "flushdb", "config", "keys", "scan", "acl", "debug",
                        "shutdown", "module", "script", "function", "fcall", "migrate", "rename",
                        "move", "copy", "client", "monitor", "sort",
                    ]
                    .contains(&c.as_str()),
                    "{} may run {c}",
                    user.name(&keys)
                );
                // Of CLIENT, only the controller may run NO-EVICT, which touches its own
                // connection alone (SPEC §7.2, S8).
                assert!(
                    !c.starts_with("client|")
                        || (c == "client|no-evict" && user == User::Controller),
                    "{} may run {c}",
                    user.name(&keys)
                );
            }
        }
        // SPEC §7: no code of a bench's or the viewer's choosing runs in Redis. A user that may
        // run one script may run any, and one that never ends answers BUSY to everyone; a
        // transaction of millions of queued commands holds Redis the same while it runs.
        for user in [User::Viewer, User::Bench(bench("b"))] {
            for c in granted(&user.rules(&keys)) {
                assert!(
                    ![
                        "eval",
                        "eval_ro",
                        "evalsha",
                        "evalsha_ro",
                        "fcall",
                        "fcall_ro",
                        "script",
                        "function",
                        "multi",
                        "exec"
                    ]
                    .contains(&c.as_str()),
                    "{} may run {c}",
                    user.name(&keys)
                );
            }
        }
        // SPEC §7: a bench may write nothing shared: its writes name only its own keys, and its
        // one selector that names a shared key is read-only.
        let rules = User::Bench(bench("b")).rules(&keys);
        let writable: Vec<&str> = rules
            .split_whitespace()
            .filter_map(|w| w.trim_start_matches('(').strip_prefix('~'))
            .collect();
        assert_eq!(
            writable,
            ["{fleet}:bench:b", "{fleet}:joined:b", "{fleet}:off:b:ack"]
        );
        // The viewer writes nothing: no command it may run writes, and its keys are read-only.
        let viewer = User::Viewer.rules(&keys);
        for c in granted(&viewer) {
            assert!(!WRITES.contains(&c.as_str()), "viewer: {c}");
        }
        assert!(
            viewer
                .split_whitespace()
                .filter(|w| w.contains('~'))
                .all(|w| w.starts_with("%R~")),
            "{viewer}"
        );
    }

    /// Every command a script of fleet calls, read from the scripts themselves.
    fn script_commands() -> Vec<(String, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/lua");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            for call in ["redis.call('", "redis.pcall('", "acl_check_cmd('"] {
                for part in text.split(call).skip(1) {
                    let command = part.split('\'').next().unwrap().to_ascii_lowercase();
                    found.push((file.clone(), command));
                }
            }
        }
        assert!(found.len() > 50, "the scripts were read: {found:?}");
        found
    }

    #[test]
    fn the_controller_may_run_every_command_of_every_script() {
        let controller = granted(&User::Controller.rules(&Keys::default()));
        for (file, command) in script_commands() {
            assert!(controller.contains(&command), "{file} calls {command}");
        }
    }

    // The beat's pipeline, command by command, against what a bench's user may run on which key
    // (the transaction of its power-off answer beside it: SPEC §4.10).
    #[test]
    fn a_bench_may_run_every_command_of_its_beat_on_the_keys_it_names() {
        let keys = Keys::default();
        let b = bench("b");
        let rules = User::Bench(b.clone()).rules(&keys);
        let mut sent = crate::store::presence::beat_commands(&keys, &b);
        sent.extend(
            [
                ("set", Some(keys.off_ack(&b))),
                ("get", Some(keys.off_request(&b))),
            ]
            .map(|(c, k)| (c.to_owned(), k)),
        );
        // Each selector of the line, and the root, as (key patterns, commands).
        let mut scopes: Vec<(Vec<String>, Vec<String>)> = Vec::new();
        let mut root = (Vec::new(), Vec::new());
        for part in rules.split('(') {
            let inner = part.trim().trim_end_matches(')');
            let keys: Vec<String> = inner
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("%R~").or(w.strip_prefix('~')))
                .map(str::to_owned)
                .collect();
            let commands = granted(inner);
            if root.1.is_empty() {
                root = (keys, commands);
            } else {
                scopes.push((keys, commands));
            }
        }
        scopes.push(root);
        for (command, key) in sent {
            let allowed = scopes.iter().any(|(patterns, commands)| {
                commands.contains(&command)
                    && key.as_ref().is_none_or(|k| patterns.iter().any(|p| p == k))
            });
            let channel = command == "spublish";
            assert!(allowed || channel, "the beat sends {command} {key:?}");
        }
    }

    #[test]
    fn the_viewer_may_run_every_command_of_the_views_and_no_script() {
        let viewer = granted(&User::Viewer.rules(&Keys::default()));
        for read in [
            "getrange", "scard", "smembers", "hgetall", "mget", "zrange", "time",
        ] {
            assert!(viewer.contains(&read.to_owned()), "{read}");
        }
    }
}
