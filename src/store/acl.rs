//! The Redis users fleet runs as, and what each may do: the lines of an ACL file (SPEC §2.11).
//!
//! Three kinds of user. `fleet-controller` runs `fleet serve` and the verbs that write (claims,
//! holds, forget): every key under the prefix, and only the commands fleet sends. `fleet-viewer`
//! runs the views: it reads the same keys and writes none. Each bench has a user of its own name
//! that can write its own heartbeat, join key and power-off acknowledgement, read the hold
//! requests and its own power-off request, and add its name to the join set, and nothing else, so a bench's credentials cannot change another bench's heartbeat,
//! hold or registration (SPEC §2.3 says why the join set may hold any name and still registers
//! none).
//!
//! The command lists are the commands fleet's store sends and its scripts call, held to the
//! scripts by this module's tests. Pure: no I/O. A password is written only as its SHA-256
//! (`#<hex>`), so the file can be shown and kept in a repository without giving a password away.

use sha2::{Digest, Sha256};

use crate::domain::name::BenchName;

use super::keys::Keys;

/// The user `fleet serve`, its operations and the writing verbs run as.
pub const CONTROLLER: &str = "fleet-controller";
/// The user the views run as (`fleet state`, `live`, `slots`, `claims`, `groups`, `describe`).
pub const VIEWER: &str = "fleet-viewer";

/// What a connection needs whatever it does: the check `Endpoint::connect` makes, `ROLE` (a
/// connection found through Sentinel checks it reached the primary, SPEC §2.7), `SELECT` for a
/// URL that names a database (key patterns hold in every database alike), and `CLUSTER SLOTS`,
/// which a Redis Cluster connection reads the slot map with.
const CONNECTION: &[&str] = &["cluster|slots", "ping", "role", "select"];

/// The commands of the views: the fleet read (its pipeline, and the read script through
/// `EVAL_RO`), the last-seen read, the catalog, the group read script, the slots' statuses and
/// digests, the timelines.
const READS: &[&str] = &[
    "eval_ro",
    "exists",
    "get",
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
    "del", "eval", "evalsha", "hdel", "hexists", "hset", "incr", "ltrim", "pexpire", "rpush",
    "sadd", "set", "spublish", "srem", "zadd", "zrem",
];

/// What the controller's wake listener sends on its own connection (SPEC §4.5): the subscription
/// to the wake channel, the one channel any of fleet's users may use.
const WAKE: &[&str] = &["ssubscribe"];

/// What the replica gate sends before a power action (SPEC §5.6), beside its counter's `INCR`.
const GATE: &[&str] = &["wait"];

/// What a bench's beat does (`beat.lua`), on its own two keys: the script (by its hash, and whole
/// when the server lacks it, `store::script`), the server's clock, the key's read (was its state
/// about to change?) and write (or its deletion, for a TTL of 0), and the announcement of a
/// change on the wake channel.
const BEAT: &[&str] = &["eval", "evalsha", "time", "get", "set", "del", "spublish"];

/// The only thing a bench may do to the hold requests: read its own (a hash's fields cannot be
/// told apart by an ACL, so it may read them all; they are no secret, every view shows them).
const BEAT_HOLDS: &[&str] = &["hget"];

/// The only thing a bench may do to the join set: add a name.
const BEAT_JOIN: &[&str] = &["sadd"];

/// The only thing a bench may do to its power-off request, and the read of its own
/// acknowledgement, both in its beat (SPEC §4.10): a `GET` of each. It writes its acknowledgement
/// with the root's `SET`, since that key is its own.
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
     default): rename the slot in the configuration"
)]
pub struct ReservedName(pub String);

impl User {
    /// The users of a fleet with these benches: the controller, the viewer, then one per bench in
    /// the order given. A bench named like one of the others would take its user's place.
    pub fn all<'a>(
        benches: impl IntoIterator<Item = &'a BenchName>,
    ) -> Result<Vec<User>, ReservedName> {
        let mut users = vec![User::Controller, User::Viewer];
        for bench in benches {
            if [CONTROLLER, VIEWER, "default"].contains(&bench.as_str()) {
                return Err(ReservedName(bench.to_string()));
            }
            users.push(User::Bench(bench.clone()));
        }
        Ok(users)
    }

    /// The user's name in Redis: a bench's own name for a bench.
    pub fn name(&self) -> &str {
        match self {
            User::Controller => CONTROLLER,
            User::Viewer => VIEWER,
            User::Bench(name) => name.as_str(),
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
                grants(&[CONNECTION, READS, WRITES, WAKE, GATE])
            ),
            User::Viewer => format!(
                "%R~{} %R~{} {}",
                all[0],
                all[1],
                grants(&[CONNECTION, READS])
            ),
            User::Bench(name) => format!(
                "~{} ~{} ~{} &{} {} ({}) ({}) (%R~{} {})",
                keys.heartbeat(name),
                keys.joined_key(name),
                keys.off_ack(name),
                keys.wake_channel(),
                grants(&[CONNECTION, BEAT]),
                selector("%R~", &keys.hold_requests(), BEAT_HOLDS),
                selector("~", &keys.joined(), BEAT_JOIN),
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
            self.name(),
            sha256_hex(password),
            self.rules(keys)
        )
    }
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
        let names: Vec<String> = User::all(&benches)
            .unwrap()
            .iter()
            .map(|u| u.name().to_owned())
            .collect();
        assert_eq!(names, [CONTROLLER, VIEWER, "bench-a", "gpu-01"]);
        for taken in [CONTROLLER, VIEWER, "default"] {
            assert_eq!(
                User::all(&[bench(taken)]),
                Err(ReservedName(taken.to_owned()))
            );
        }
    }

    #[test]
    fn each_user_gets_exactly_its_keys_and_commands() {
        let keys = Keys::new("team-a").unwrap();
        assert_eq!(
            User::Controller.rules(&keys),
            "~{team-a}:* ~{team-a:*}:* &{team-a}:wake -@all +cluster|slots +del +eval +eval_ro \
             +evalsha +exists +get +hdel +hexists +hget +hgetall +hmget +hset +incr +lrange +ltrim \
             +mget +pexpire +ping +role +rpush +sadd +scard +select +set +sismember +smembers \
             +spublish +srem +ssubscribe +time +type +wait +zadd +zcard +zrange +zrem"
        );
        assert_eq!(
            User::Viewer.rules(&keys),
            "%R~{team-a}:* %R~{team-a:*}:* -@all +cluster|slots +eval_ro +exists +get +hget \
             +hgetall +hmget +lrange +mget +ping +role +scard +select +sismember +smembers +time \
             +type +zcard +zrange"
        );
        assert_eq!(
            User::Bench(bench("bench-a")).rules(&keys),
            "~{team-a}:bench:bench-a ~{team-a}:joined:bench-a ~{team-a}:off:bench-a:ack \
             &{team-a}:wake -@all +cluster|slots +del +eval +evalsha +get +ping +role +select +set \
             +spublish +time \
             (%R~{team-a}:holds -@all +hget) \
             (~{team-a}:joined -@all +sadd) \
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
                    user.name()
                );
            }
        }
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

    #[test]
    fn a_bench_may_run_every_command_of_the_beat_but_the_clearing_of_a_lapsed_request() {
        let rules = User::Bench(bench("b")).rules(&Keys::default());
        let bench = granted(&rules);
        for (file, command) in script_commands() {
            if file == "beat.lua" && command != "hdel" {
                assert!(bench.contains(&command), "beat.lua calls {command}");
            }
        }
        assert!(!bench.contains(&"hdel".to_owned()));
    }

    #[test]
    fn the_viewer_may_run_every_command_of_the_read_scripts() {
        let viewer = granted(&User::Viewer.rules(&Keys::default()));
        for (file, command) in script_commands() {
            if file == "read.lua" || file == "group_read.lua" {
                assert!(viewer.contains(&command), "{file} calls {command}");
            }
        }
    }
}
