//! A redis-server started with the deployment's configuration (`deploy/base/redis.conf`) and the
//! ACL file `fleet acl` prints (SPEC §2.11), and every user through the real binary over
//! `redis://user:password@host:port/`: the harness of `tests/process/acl.rs` and
//! `tests/process/hostile.rs`.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use fleet::store::keys::Keys;
use fleet_redis::connect::Endpoint;
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, Options, RedisServer};
use redis::aio::MultiplexedConnection;

use super::*;

/// A redis-server started with the ACL file `fleet acl` printed for a configuration's slots. Each
/// user's password is `pw-<user>`. The server's default user is left as Redis has it, so a test
/// still looks at keys with `raw` (over the unix socket).
pub struct Acl {
    pub server: RedisServer,
    pub dir: tempfile::TempDir,
    pub port: u16,
}

/// The configuration of `Acl::start`: two slots whose operations beat as the slot's own user, as
/// a machine that boots would, on the server's port (`PORT`, unknown until the server runs).
pub fn yaml(port: u16) -> String {
    pool(port, &["bench-a", "bench-b"])
}

/// A group `pool-a` of `slots`, each booted and stopped by an operation that beats as the slot's
/// own user (TTL 1h, then 0) on the server at `port`.
pub fn pool(port: u16, slots: &[&str]) -> String {
    let redis = "redis://$FLEET_SLOT:pw-$FLEET_SLOT@127.0.0.1:$PORT/";
    let beat = |ttl: &str| {
        Op::sh(&format!(
            r#""$BIN" --redis "{redis}" beat "$FLEET_SLOT" --ttl {ttl}"#
        ))
    };
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("PORT", port.to_string())
                .startup(beat("1h"))
                .shutdown(beat("0"))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool-a", slots)
        .yaml()
}

impl Acl {
    /// The server of `yaml`'s two slots, bench-a and bench-b, both registered.
    pub fn start() -> Acl {
        Acl::with(&["bench-a", "bench-b"], yaml)
    }

    /// A server for the configuration `config(port)` of `slots`, with every user `fleet acl`
    /// prints for it, the slots registered as `fleet serve` registers them when it starts (a
    /// bench's own user may not register itself, SPEC §2.3).
    pub fn with(slots: &[&str], config: fn(u16) -> String) -> Acl {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fleet.yaml");
        // The ACL needs the slots' names alone; the port is written in once the server runs.
        std::fs::write(&file, config(0)).unwrap();
        let passwords = dir.path().join("passwords");
        std::fs::create_dir(&passwords).unwrap();
        let mut users = vec!["fleet-controller", "fleet-viewer"];
        users.extend_from_slice(slots);
        for user in &users {
            std::fs::write(passwords.join(user), format!("pw-{user}\n")).unwrap();
        }
        let o = acl_verb(&file, &passwords);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let acl_text = text(&o.stdout);
        assert_eq!(acl_text.lines().count(), users.len(), "{acl_text}");
        assert!(
            !acl_text.contains("pw-"),
            "no password in the clear: {acl_text}"
        );
        let aclfile = dir.path().join("users.acl");
        std::fs::write(&aclfile, &acl_text).unwrap();
        // The deployment's own limits (SPEC §7.2, S8): what a bench's user may do to Redis is
        // played against them.
        let server = RedisServer::with(Options {
            tcp: true,
            args: vec!["--aclfile".into(), aclfile.display().to_string()],
            conf: Some(fleet_testing::DEPLOYED_CONF.into()),
            ..Options::default()
        })
        .expect("starting redis-server with the deployment's configuration and the ACL file");
        let port = server.port().expect("a TCP port");
        std::fs::write(&file, config(port)).unwrap();
        let acl = Acl { server, dir, port };
        let mut register = vec!["register"];
        register.extend_from_slice(slots);
        acl.ok("fleet-controller", &register);
        acl
    }

    /// The documented form of a user's URL: `redis://user:password@host:port/`.
    pub fn url(&self, user: &str) -> String {
        format!("redis://{user}:pw-{user}@127.0.0.1:{}/", self.port)
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("fleet.yaml")
    }

    /// Runs the binary as `user`.
    pub fn fleet(&self, user: &str, args: &[&str]) -> Output {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .arg("--redis")
            .arg(self.url(user))
            .args(args)
            .output()
            .unwrap();
        super::contract::check(args, &String::from_utf8_lossy(&o.stdout));
        o
    }

    /// Runs the binary as `user` and expects exit 0; returns its output.
    pub fn ok(&self, user: &str, args: &[&str]) -> String {
        let o = self.fleet(user, args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{user} {args:?}: {}",
            text(&o.stderr)
        );
        text(&o.stdout)
    }

    /// Runs the binary as `user` and expects it refused by Redis: exit 1, saying the user may not.
    pub fn refused(&self, user: &str, args: &[&str]) {
        let o = self.fleet(user, args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{user} {args:?}: {err}");
        assert!(
            err.contains("the user may not do this")
                && err.contains("use a URL whose Redis user may"),
            "{user} {args:?}: {err}"
        );
    }

    pub async fn conn(&self, user: &str) -> MultiplexedConnection {
        Endpoint::new(self.url(user), Duration::from_secs(10))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connecting as {user}: {e}"))
    }
}

pub fn acl_verb(config: &std::path::Path, passwords: &std::path::Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("acl")
        .arg("--config")
        .arg(config)
        .arg("--passwords")
        .arg(passwords)
        .output()
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends `args` on `conn` and expects Redis to refuse it for want of permission; returns what
/// Redis said. A command is refused with NOPERM; a command inside a script the user sent is
/// refused by the script's own check, which says the user cannot.
pub async fn nope(conn: &mut MultiplexedConnection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let err = cmd
        .query_async::<redis::Value>(conn)
        .await
        .expect_err(&format!("{args:?} was allowed"));
    let said = err.to_string();
    assert!(
        err.code() == Some("NOPERM") || said.contains("The user executing the script can't"),
        "{args:?}: {said}"
    );
    said
}

/// The rows of `fleet state -o json`, by name: (state, requested hold).
pub fn states(json: &str) -> Vec<(String, String, Option<String>)> {
    let rows: serde_json::Value = serde_json::from_str(json).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
                r["requested_hold"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

pub fn row(name: &str, state: &str, request: Option<&str>) -> (String, String, Option<String>) {
    (name.into(), state.into(), request.map(str::to_owned))
}

/// Like `nope`, but a write inside a read-only script may be refused by its own rule (a write in
/// EVAL_RO) as well as by permission.
pub async fn nope_or_ro(conn: &mut MultiplexedConnection, args: &[&str]) -> Option<String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let err = cmd.query_async::<redis::Value>(conn).await.err()?;
    let said = err.to_string();
    assert!(
        err.code() == Some("NOPERM")
            || said.contains("The user executing the script can't")
            || said.contains("Write commands are not allowed from read-only scripts"),
        "{args:?}: {said}"
    );
    Some(said)
}

/// A bench's rules as the ACL file of the previous release wrote them (release 0.1): its script
/// by `EVAL` and `EVALSHA`, and its name added to the join set.
pub fn previous_rules(keys: &Keys, bench: &str) -> String {
    let n = name(bench);
    format!(
        "~{} ~{} ~{} &{} -@all +cluster|slots +del +eval +evalsha +get +ping +role +select +set \
         +spublish +time (%R~{} -@all +hget) (~{} -@all +sadd) (%R~{} %R~{} -@all +get)",
        keys.heartbeat(&n),
        keys.joined_key(&n),
        keys.off_ack(&n),
        keys.wake_channel(),
        keys.hold_requests(),
        keys.joined(),
        keys.off_request(&n),
        keys.off_ack(&n),
    )
}

/// The controller's and the viewer's rules as the previous release's `fleet acl` wrote
/// them (default prefix): neither has `GETRANGE`, which this release's read sends.
pub fn previous_fleet_rules(keys: &Keys, controller: bool) -> String {
    let (p, q) = (keys.prefix(), keys.prefix());
    if controller {
        format!(
            "~{{{p}}}:* ~{{{q}:*}}:* &{{{p}}}:wake -@all +cluster|slots +del +eval +eval_ro \
             +evalsha +exists +get +hdel +hexists +hget +hgetall +hmget +hset +incr +lrange \
             +ltrim +mget +pexpire +ping +role +rpush +sadd +scard +select +set +sismember \
             +smembers +spublish +srem +ssubscribe +time +type +wait +zadd +zcard +zrange +zrem"
        )
    } else {
        format!(
            "%R~{{{p}}}:* %R~{{{q}:*}}:* -@all +cluster|slots +eval_ro +exists +get +hget \
             +hgetall +hmget +lrange +mget +ping +role +scard +select +sismember +smembers +time \
             +type +zcard +zrange"
        )
    }
}

pub async fn set_rules(acl: &Acl, user: &str, rules: &str) {
    let password = format!(">pw-{user}");
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", &password];
    args.extend(rules.split_whitespace());
    let () = raw(&acl.server, &args).await;
}
