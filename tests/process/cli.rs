//! The command line: verbs called as library functions with a `Vec<u8>` writer, and the binary
//! for exit codes and messages (SPEC §2.6).

use crate::support;

use std::process::Output;
use std::time::{Duration, Instant};

use clap::Parser;
use fleet::cli::Cli;
use fleet_testing::RedisServer;
use support::*;
use tokio_util::sync::CancellationToken;

/// Runs a command line through the library against `server`; returns its output and exit code.
async fn run(server: &RedisServer, args: &[&str]) -> (String, u8) {
    let url = server.url();
    let mut argv = vec!["fleet", "--redis", &url];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let ctx = cli.global.ctx(CancellationToken::new(), false);
    let mut out = Vec::new();
    let code = match bounded("verb", cli.command.run(&ctx, &mut out)).await {
        Ok(()) => 0,
        Err(e) => e.exit_code(),
    };
    let out = String::from_utf8(out).unwrap();
    support::contract::check(args, &out);
    (out, code)
}

fn fleet(args: &[&str], env: &[(&str, &str)]) -> Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("FLEET_REDIS_URL")
        .output()
        .expect("running fleet");
    support::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn state_json_has_exactly_the_pinned_fields_sorted_by_name() {
    let server = server();
    assert_eq!(
        run(
            &server,
            &["beat", "bench-b", "--load", "21", "--cores", "16"]
        )
        .await
        .1,
        0
    );
    assert_eq!(
        run(
            &server,
            &["beat", "bench-a", "--ttl", "1h", "--hold", "sleeping"]
        )
        .await
        .1,
        0
    );
    let (out, code) = run(
        &server,
        &["state", "-o", "json", "bench-b", "bench-a", "never"],
    )
    .await;
    assert_eq!(code, 0);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bench-a", "bench-b", "never"]);
    for r in rows {
        let mut fields: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "cores",
                "error",
                "error_kind",
                "expires_in_ms",
                "hold",
                "load",
                "name",
                "requested_hold",
                "schema",
                "state",
                "ttl_ms"
            ]
        );
        assert_eq!(r["schema"], "fleet/state/v1");
        assert_eq!(
            r["error_kind"],
            serde_json::Value::Null,
            "no error, no kind"
        );
    }
    assert_eq!(rows[0]["state"], "HELD");
    assert_eq!(rows[0]["hold"], "sleeping");
    assert_eq!(rows[0]["ttl_ms"], 3_600_000);
    assert_eq!(rows[1]["state"], "UP");
    assert_eq!(rows[1]["load"], 21.0);
    assert_eq!(rows[1]["cores"], 16);
    assert_eq!(rows[2]["state"], "DOWN");
    assert_eq!(rows[2]["expires_in_ms"], serde_json::Value::Null);
}

// docs/protocol.md §3: each error of a row carries its kind beside the words, so a program tells
// a wrong type from an outlived key without reading the prose (SPEC §2.6 1).
#[tokio::test]
async fn state_json_names_the_kind_of_each_error() {
    let server = server();
    let now: Vec<String> = raw(&server, &["TIME"]).await;
    let ms: i64 = now[0].parse::<i64>().unwrap() * 1000;
    let beat = |at: i64| format!(r#"{{"v":1,"at":{at},"ttl":30000}}"#);
    let _: i64 = raw(&server, &["HSET", "{fleet}:bench:b-hash", "f", "v"]).await;
    let big = format!("{}{}", beat(ms), " ".repeat(3000));
    let future = beat(ms + 60_000);
    let outlived = beat(ms - 60_000);
    for (name, value) in [
        ("b-big", big.as_str()),
        ("b-junk", "junk"),
        ("b-future", &future),
        ("b-outlived", &outlived),
        (
            "b-cores",
            &format!(r#"{{"v":1,"at":{ms},"ttl":60000,"cores":-1,"load":"x"}}"#),
        ),
    ] {
        let _: () = raw(&server, &["SET", &format!("{{fleet}}:bench:{name}"), value]).await;
    }
    let names = [
        "b-big",
        "b-cores",
        "b-future",
        "b-hash",
        "b-junk",
        "b-never",
        "b-outlived",
    ];
    let mut args = vec!["state", "-o", "json"];
    args.extend(names);
    let (out, code) = run(&server, &args).await;
    assert_eq!(code, 0);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<(&str, &str, Option<&str>, bool)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["state"].as_str().unwrap(),
                r["error_kind"].as_str(),
                r["error"].is_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("b-big", "DOWN", Some("too_large"), true),
            // Out-of-range cores and a load of another type are dropped: the beat counts.
            ("b-cores", "UP", None, false),
            ("b-future", "DOWN", Some("future"), true),
            ("b-hash", "DOWN", Some("wrong_type"), true),
            ("b-junk", "DOWN", Some("unreadable"), true),
            ("b-never", "DOWN", None, false),
            ("b-outlived", "DOWN", Some("outlived"), true),
        ]
    );
    assert_eq!(
        (&rows[1]["load"], &rows[1]["cores"]),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );
    let (tsv, _) = run(&server, &["state", "-o", "tsv", "b-hash"]).await;
    let lines: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines[0].last(), Some(&"error_kind"));
    assert_eq!(lines[1].last(), Some(&"wrong_type"));
}

#[tokio::test]
async fn live_lists_up_and_held_benches_sorted_and_down_ones_not_at_all() {
    let server = server();
    for args in [
        &["beat", "c"][..],
        &["beat", "a", "--hold", "x"],
        &["beat", "b", "--ttl", "0"],
        &["hold", "d", "--reason", "asked", "--register"],
    ] {
        assert_eq!(run(&server, args).await.1, 0, "{args:?}");
    }
    assert_eq!(run(&server, &["live"]).await, ("a\nc\n".to_owned(), 0));
    assert_eq!(
        run(&server, &["live", "b", "c"]).await,
        ("c\n".to_owned(), 0)
    );
}

#[tokio::test]
async fn live_answers_in_json_and_up_alone_leaves_the_held_out() {
    let server = server();
    for args in [
        &["beat", "c"][..],
        &["beat", "a", "--hold", "x"],
        &["beat", "b", "--ttl", "0"],
    ] {
        assert_eq!(run(&server, args).await.1, 0, "{args:?}");
    }
    // UP alone: the benches that may take work.
    assert_eq!(run(&server, &["live", "--up"]).await, ("c\n".to_owned(), 0));
    let (out, code) = run(&server, &["live", "-o", "json"]).await;
    assert_eq!(code, 0);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        rows,
        serde_json::json!([
            {"schema": "fleet/live/v1", "name": "a", "state": "HELD", "hold": "x"},
            {"schema": "fleet/live/v1", "name": "c", "state": "UP", "hold": null},
        ])
    );
    // The version asked by name is the same output.
    let (pinned, _) = run(&server, &["live", "-o", "json=v1"]).await;
    assert_eq!(pinned, out);
    let (up, _) = run(&server, &["live", "--up", "-o", "json"]).await;
    let up: serde_json::Value = serde_json::from_str(&up).unwrap();
    assert_eq!(up.as_array().map(Vec::len), Some(1));
    assert_eq!(up[0]["name"], "c");
}

#[tokio::test]
async fn an_output_that_breaks_its_schema_is_caught() {
    let server = server();
    run(&server, &["beat", "a", "--load", "1.5"]).await;
    let (out, _) = run(&server, &["state", "-o", "json"]).await;
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    support::contract::validate(&rows);
    let broken = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut doctored = rows.clone();
        f(&mut doctored[0]);
        std::panic::catch_unwind(|| support::contract::validate(&doctored)).is_err()
    };
    assert!(broken(&|r| r["state"] = "MAYBE".into()), "an unknown state");
    assert!(broken(&|r| r["load"] = "high".into()), "a retyped field");
    assert!(
        broken(&|r| {
            r.as_object_mut().unwrap().remove("ttl_ms");
        }),
        "a field gone"
    );
    assert!(
        broken(&|r| r["extra"] = 1.into()),
        "a field the schema lacks"
    );
    assert!(
        broken(&|r| r["schema"] = "fleet/state/v9".into()),
        "a foreign version"
    );
}

#[tokio::test]
async fn schema_prints_each_views_schema_and_refuses_an_unknown_view() {
    let server = server();
    let (list, code) = run(&server, &["schema"]).await;
    assert_eq!(code, 0);
    let views: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for view in [
        "state", "live", "slots", "claims", "groups", "describe", "energy",
    ] {
        assert!(views.contains(&view), "{view} in {list}");
        let (schema, code) = run(&server, &["schema", view]).await;
        assert_eq!(code, 0);
        let schema: serde_json::Value = serde_json::from_str(&schema).unwrap();
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(schema["title"], format!("fleet/{view}/v1"));
        assert!(
            jsonschema::meta::is_valid(&schema),
            "{view}'s schema is a valid 2020-12 schema"
        );
    }
    let (out, code) = run(&server, &["schema", "nope"]).await;
    assert_eq!((out.as_str(), code), ("", 2));
}

#[tokio::test]
async fn state_tsv_and_table_show_every_row() {
    let server = server();
    run(&server, &["beat", "bench-01", "--load", "3.5"]).await;
    run(
        &server,
        &["hold", "bench-01", "--reason", "drain me", "--for", "10m"],
    )
    .await;
    let (tsv, _) = run(&server, &["state", "-o", "tsv"]).await;
    let lines: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines[0][..3], ["name", "state", "hold"]);
    assert_eq!(lines[1][..5], ["bench-01", "UP", "", "drain me", "3.5"]);
    let (table, _) = run(&server, &["state"]).await;
    assert!(table.contains("(requested: drain me)"), "{table}");
}

#[tokio::test]
async fn hold_release_and_forget_say_what_they_did() {
    let server = server();
    let (out, code) = run(
        &server,
        &[
            "hold",
            "bench-01",
            "--reason",
            "upgrade",
            "--for",
            "1h",
            "--register",
        ],
    )
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("hold requested for 1h (upgrade)"), "{out}");
    assert!(
        run(&server, &["release", "bench-01"])
            .await
            .0
            .contains("withdrawn")
    );
    assert!(
        run(&server, &["release", "bench-01"])
            .await
            .0
            .contains("no hold was requested")
    );
    let (out, _) = run(&server, &["forget", "bench-01", "bench-02"]).await;
    assert_eq!(out, "bench-01: forgotten\nbench-02: was not registered\n");
}

#[tokio::test]
async fn watch_redraws_until_shutdown() {
    let server = server();
    run(&server, &["beat", "bench-01"]).await;
    let url = server.url();
    let cli = Cli::try_parse_from([
        "fleet",
        "--redis",
        &url,
        "state",
        "--watch",
        "-o",
        "json",
        "--interval",
        "100ms",
    ])
    .unwrap();
    let shutdown = CancellationToken::new();
    let ctx = cli.global.ctx(shutdown.clone(), false);
    // A writer that cancels the watch once it has written three frames (one JSON array a line).
    struct Frames {
        buf: Vec<u8>,
        shutdown: CancellationToken,
    }
    impl std::io::Write for Frames {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.buf.extend_from_slice(data);
            if self.buf.iter().filter(|&&b| b == b'\n').count() >= 3 {
                self.shutdown.cancel();
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Frames {
        buf: Vec::new(),
        shutdown,
    };
    bounded("watch", cli.command.run(&ctx, &mut out))
        .await
        .unwrap();
    let text = String::from_utf8(out.buf).unwrap();
    let frames: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(frames.len() >= 3);
    assert!(frames.iter().all(|f| f[0]["state"] == "UP"));
}

#[test]
fn bad_input_exits_2_with_what_is_valid() {
    let cases: &[(&[&str], &str)] = &[
        (&["state", "Bench_01"], "RFC 1123"),
        (&["beat", "-x"], "unexpected argument"),
        (&["beat", "ok", "--ttl", "ten"], "like 30s"),
        (&["beat", "ok", "--ttl", "31d"], "longest promise"),
        (&["beat", "ok", "--load=-1"], "invalid load"),
        (&["beat", "ok", "--cores", "0"], "invalid core count"),
        (&["beat", "ok", "--hold", ""], "say why"),
        (&["hold", "ok"], "--reason"),
        (&["hold", "ok", "--reason", "a\tb"], "control character"),
        (
            &["hold", "ok", "--reason", "x", "--for", "0s"],
            "longer than zero",
        ),
        (
            &["agent", "ok", "--interval", "10s", "--ttl", "15s"],
            "shorter than two intervals",
        ),
        (&["--prefix", "a{b}", "state"], "invalid prefix"),
        (&["--timeout", "0", "state"], "longer than zero"),
        (
            &["--redis", "http://localhost", "state"],
            "invalid Redis URL",
        ),
        (&["forget"], "required"),
        (&["nonsense"], "unrecognized subcommand"),
    ];
    for (args, want) in cases {
        let o = fleet(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_unreachable_redis_exits_1_naming_the_url_within_the_timeout() {
    // Refused at once.
    let o = fleet(&["--redis", "redis://127.0.0.1:1", "state"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot reach Redis at redis://127.0.0.1:1"),
        "{}",
        stderr(&o)
    );
    // A peer that accepts and never answers: the timeout bounds the wait.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://:hunter2@127.0.0.1:{}",
        silent.local_addr().unwrap().port()
    );
    let start = Instant::now();
    let o = fleet(&["--redis", &url, "--timeout", "300ms", "live"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        !stderr(&o).contains("hunter2"),
        "the password never reaches a message"
    );
    assert!(stderr(&o).contains(":***@127.0.0.1"), "{}", stderr(&o));
}

#[test]
fn flags_also_come_from_the_environment() {
    let server = server();
    let url = server.url();
    let env = [
        ("FLEET_REDIS_URL", url.as_str()),
        ("FLEET_PREFIX", "envtest"),
    ];
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["beat", "bench-01"])
        .envs(env)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("live")
        .envs(env)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bench-01\n");
    let o = fleet(&["--redis", &url, "live"], &[]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "",
        "another prefix is another fleet"
    );
}

#[tokio::test]
async fn acl_users_with_passwords_connect_and_a_wrong_password_is_a_runtime_error() {
    let server = RedisServer::with(fleet_testing::Options {
        tcp: true,
        args: [
            "--user", "bench", "on", ">s3cret", "~*", "&*", "+@all", "--user", "default", "off",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    })
    .unwrap();
    let port = server.port().unwrap();
    let good = format!("redis://bench:s3cret@127.0.0.1:{port}");
    let o = fleet(&["--redis", &good, "beat", "bench-01"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = fleet(&["--redis", &good, "live"], &[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bench-01\n");
    let bad = format!("redis://bench:wrong@127.0.0.1:{port}");
    let o = fleet(&["--redis", &bad, "live"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!stderr(&o).contains("wrong"), "{}", stderr(&o));
}

#[test]
fn tls_redis_with_a_ca_file_connects() {
    // A CA, and a server certificate for 127.0.0.1 signed by it (the harness's, with openssl).
    let ca = fleet_testing::TestCa::new().expect("making the test certificates");
    let server = RedisServer::with(fleet_testing::Options {
        tcp: true,
        tls: Some(ca.files().clone()),
        ..Default::default()
    })
    .expect("a TLS redis-server on a free port");
    let port = server.port().expect("a TLS port");
    let url = format!("rediss://127.0.0.1:{port}");
    let ca_file = ca.ca().display().to_string();
    let o = fleet(
        &["--redis", &url, "--redis-ca", &ca_file, "beat", "bench-01"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = fleet(&["--redis", &url, "--redis-ca", &ca_file, "live"], &[]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bench-01\n");
    // Without the CA the server's certificate is not trusted: a runtime failure, not a hang.
    let o = fleet(&["--redis", &url, "live"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    drop(server);
}

// SPEC §2.2: the bench's clock is never compared with the reader's. A bench whose clock runs an
// hour fast (libfaketime) writes a beat that reads UP with its full TTL on the server's clock.
#[test]
fn a_bench_whose_clock_is_an_hour_off_still_reads_correctly() {
    let server = server();
    let url = server.url();
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("libfaketime is missing: install it (apt-get install faketime)");
    for offset in ["+1h", "-1h"] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args(["--redis", &url, "beat", "skewed", "--ttl", "30s"])
            .env("LD_PRELOAD", lib)
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_RESET", "1")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let o = fleet(&["--redis", &url, "state", "-o", "json", "skewed"], &[]);
        let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(rows[0]["state"], "UP", "clock {offset}");
        let left = rows[0]["expires_in_ms"].as_u64().unwrap();
        assert!((25_000..=30_000).contains(&left), "clock {offset}: {left}");
    }
}

// Durations past any range panicked (exit 101) or made a controller that never led.
// Every duration has a range and is exit 2 outside it; the lease must outlast a pass.
#[test]
fn durations_outside_their_range_are_usage_errors() {
    for args in [
        &["agent", "bench-01", "--interval", "7000000000000000000s"][..],
        &["--timeout", "10000000000000000000s", "live"],
        &[
            "serve",
            "--config",
            "/nonexistent.yaml",
            "--interval",
            "5000000000000000000s",
        ],
        &[
            "serve",
            "--config",
            "/nonexistent.yaml",
            "--lease",
            "5000000000000000000s",
        ],
        &["agent", "bench-01", "--ttl", "31days"],
        &["state", "--watch", "--interval", "0s"],
        &["hold", "bench-01", "--reason", "x", "--for", "400days"],
        &[
            "serve",
            "--config",
            "/nonexistent.yaml",
            "--blind-grace",
            "2h",
        ],
        &["autoscaler", "--grpc-timeout", "2h", "groups"],
    ] {
        let o = fleet(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("it must be from"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = fleet(
        &[
            "serve",
            "--config",
            "/nonexistent.yaml",
            "--interval",
            "2s",
            "--lease",
            "2s",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--lease 2s must be longer than --interval 2s"),
        "{}",
        stderr(&o)
    );
}

// The password in a unix URL's query, or one with an unescaped `/`, was printed
// whole in errors.
#[test]
fn no_form_of_redis_url_prints_its_password() {
    for url in [
        "redis+unix:///nonexistent/redis.sock?pass=hunter2",
        "redis+unix:///nonexistent/redis.sock?db=0&pass=hunter2",
        "redis://user:hun/ter2@127.0.0.1:1",
        "redis://user:hun?ter2@127.0.0.1:1",
        "redis://user:hunter2@127.0.0.1:notaport",
        "user:hunter2@nowhere",
    ] {
        let o = fleet(&["--redis", url, "--timeout", "300ms", "live"], &[]);
        assert_ne!(o.status.code(), Some(0), "{url}");
        let err = stderr(&o);
        for secret in ["hunter2", "hun/ter2", "hun?ter2", "ter2"] {
            assert!(!err.contains(secret), "{url}: {err}");
        }
        assert!(err.contains("***"), "{url}: {err}");
    }
}

// `--help` printed `[env: FLEET_REDIS_URL=redis://:s3cret@…]`. No help text shows the
// value of a variable that may hold a secret: every verb's help, with secrets in the environment.
#[test]
fn no_help_text_shows_a_secret_from_the_environment() {
    use clap::CommandFactory;
    fn paths(cmd: &clap::Command, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(prefix.clone());
        for sub in cmd.get_subcommands() {
            let mut p = prefix.clone();
            p.push(sub.get_name().to_owned());
            paths(sub, p, out);
        }
    }
    let mut all = Vec::new();
    paths(&fleet::cli::Cli::command(), Vec::new(), &mut all);
    assert!(all.len() > 20, "{all:?}");
    for path in all {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args(&path)
            .arg("--help")
            .env("FLEET_REDIS_URL", "redis://admin:s3cret@10.0.0.1:6379")
            .env("FLEET_CLIENT_TLS_KEY", "/etc/fleet/s3cret-key.pem")
            .env("FLEET_TLS_KEY", "/etc/fleet/s3cret-key.pem")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{path:?}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            !text.contains("s3cret"),
            "{path:?} --help shows a secret:\n{text}"
        );
    }
}

// A Redis error names its real cause, once: a refused connection, a wrong password
// (and whose), a missing one (naming the URL), a database out of range, a timeout (the only one
// that says "within"). redis-rs's own rendering repeated itself (`Connection refused (os error
// 111): Connection refused (os error 111)`).
#[test]
fn redis_errors_name_their_cause_once() {
    let server = fleet_testing::RedisServer::with(fleet_testing::Options {
        tcp: true,
        args: vec!["--requirepass".into(), "s3cret".into()],
        ..Default::default()
    })
    .unwrap();
    let port = server.port().unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let cases = [
        (
            "redis://127.0.0.1:1".to_owned(),
            "connection refused: is redis-server running there?",
        ),
        (
            format!("redis://:wrong@127.0.0.1:{port}"),
            "authentication failed for user default",
        ),
        (
            format!("redis://bob:wrong@127.0.0.1:{port}"),
            "authentication failed for user bob",
        ),
        (
            format!("redis://127.0.0.1:{port}"),
            "this Redis requires a password",
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{port}/99"),
            "database number in the URL (/N) is out of range",
        ),
        (
            format!("redis://127.0.0.1:{silent_port}"),
            "no answer within 300ms",
        ),
    ];
    for (url, want) in cases {
        let o = fleet(&["--redis", &url, "--timeout", "300ms", "live"], &[]);
        assert_eq!(o.status.code(), Some(1), "{url}");
        let err = stderr(&o);
        assert!(err.contains(want), "{url}: {err}");
        assert!(
            err.contains("cannot reach Redis at redis://"),
            "{url}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{url}: {err}");
        if !want.starts_with("no answer") {
            assert!(!err.contains("within"), "{url}: {err}");
        }
        let parts: Vec<&str> = err.trim().split(": ").collect();
        for pair in parts.windows(2) {
            assert_ne!(pair[0], pair[1], "a cause said twice: {err}");
        }
        assert!(
            !err.contains("wrong") && !err.contains("s3cret"),
            "{url}: {err}"
        );
    }
    drop(silent);
}

// `fleet state --watch` shows a Redis error where the rows were and keeps trying,
// instead of exiting; the rows come back when Redis does.
#[tokio::test]
async fn state_watch_shows_a_redis_error_and_keeps_trying() {
    let mut server = fleet_testing::RedisServer::with(fleet_testing::Options {
        aof: true,
        ..Default::default()
    })
    .unwrap();
    run(&server, &["beat", "bench-01", "--ttl", "1h"]).await;
    let url = server.url();
    let cli = Cli::try_parse_from([
        "fleet",
        "--redis",
        &url,
        "--timeout",
        "500ms",
        "state",
        "--watch",
        "--interval",
        "100ms",
    ])
    .unwrap();
    let shutdown = CancellationToken::new();
    let ctx = cli.global.ctx(shutdown.clone(), false);
    /// Kills the server after the first frame, restarts it once an error is shown, and stops
    /// when the rows are back.
    struct Outage {
        buf: Vec<u8>,
        step: u8,
        events: std::sync::mpsc::Sender<u8>,
        shutdown: CancellationToken,
    }
    impl std::io::Write for Outage {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.buf.extend_from_slice(data);
            let text = String::from_utf8_lossy(&self.buf).into_owned();
            let step = match self.step {
                0 if text.contains("bench-01") => 1,
                1 if text.contains("retrying every 100ms") => 2,
                2 if text.rsplit("retrying").next().unwrap().contains("bench-01") => 3,
                s => s,
            };
            if step != self.step {
                self.step = step;
                let _ = self.events.send(step);
                if step == 3 {
                    self.shutdown.cancel();
                }
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let mut out = Outage {
        buf: Vec::new(),
        step: 0,
        events: tx,
        shutdown,
    };
    let watching = async { cli.command.run(&ctx, &mut out).await.unwrap() };
    let outage = async {
        loop {
            match rx.try_recv() {
                Ok(1) => server.kill(),
                Ok(2) => server.restart().unwrap(),
                Ok(_) => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    bounded("the watch through an outage", async {
        tokio::join!(watching, outage);
    })
    .await;
    let text = String::from_utf8(out.buf).unwrap();
    assert!(
        text.contains(
            "error: reading the fleet's heartbeat keys: the connection to Redis was lost"
        ),
        "{text}"
    );
}

// Every argument and option of every verb says what it is for (a help line), and
// the positional ones are named for what they take.
#[test]
fn every_argument_of_every_verb_has_a_help_line() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if arg.get_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(&fleet::cli::Cli::command(), "fleet", &mut missing);
    assert!(missing.is_empty(), "no help line: {missing:#?}");
    let help = fleet(&["autoscaler", "--help"], &[]);
    let text = String::from_utf8_lossy(&help.stdout);
    let own = text.find("Provider options:").expect("its own heading");
    let global = text.find("Global options:").expect("the global heading");
    assert!(text[own..global].contains("--grpc-addr"), "{text}");
    assert!(text[global..].contains("--redis"), "{text}");
}

// Every bad input is exit 2 with what is valid.
#[test]
fn bad_input_of_every_kind_is_exit_2_saying_what_is_valid() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["serve", "--config", "/nonexistent/fleet.yaml"],
            "cannot read the configuration file /nonexistent/fleet.yaml",
        ),
        (
            &[
                "--redis",
                "rediss://127.0.0.1:1",
                "--redis-ca",
                "/nonexistent/ca.pem",
                "live",
            ],
            "reading the Redis CA file /nonexistent/ca.pem",
        ),
        (&["cancel", ""], "invalid claim name"),
        (
            &["beat", "ok", "--ttl", "-5s"],
            "a duration is not negative",
        ),
        (&["beat", "ok", "--ttl", "31days"], "30days"),
        (&["beat", "ok", "--ttl", "5x"], "units: ms, s, m, h, d"),
        (&["agent", "ok", "--interval", "50ms"], "from 100ms"),
        (&["beat", "ok", "--load", "1e7"], "from 0 to 1000000"),
        (&["beat", "ok", "--load", "inf"], "from 0 to 1000000"),
    ];
    for (args, want) in cases {
        let o = fleet(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("os error 2): No such"),
            "a cause said twice: {}",
            stderr(&o)
        );
    }
    let o = fleet(&["beat", "ok", "--ttl", "5x"], &[]);
    assert!(
        !stderr(&o).contains("months"),
        "only units that are accepted: {}",
        stderr(&o)
    );
}

// `fleet hold` of a bench that never beat is refused unless --register.
#[tokio::test]
async fn hold_of_a_bench_that_never_beat_needs_register() {
    let server = server();
    let url = server.url();
    let o = fleet(
        &["--redis", &url, "hold", "typo-01", "--reason", "disk"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("never beat") && stderr(&o).contains("--register"),
        "{}",
        stderr(&o)
    );
    let (out, code) = run(
        &server,
        &["hold", "typo-01", "--reason", "disk", "--register"],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let (out, code) = run(&server, &["hold", "typo-01", "--reason", "again"]).await;
    assert_eq!(code, 0, "registered now: {out}");
}

#[test]
fn completions_and_version_need_no_redis() {
    // An unreachable Redis: neither verb may try it.
    let env = [("FLEET_REDIS_URL", "redis://127.0.0.1:1")];
    for (shell, marker) in [
        ("bash", "complete -F _fleet"),
        ("zsh", "#compdef fleet"),
        ("fish", "complete -c fleet"),
    ] {
        let o = fleet(&["completions", shell], &env);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        for verb in ["state", "serve", "autoscaler", "describe"] {
            assert!(script.contains(verb), "{shell} completes {verb}");
        }
        assert!(
            !script.contains("operation\"") && !script.contains("operation)"),
            "{shell}: the hidden verb is not offered"
        );
    }
    let o = fleet(&["completions", "tcsh"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("bash"),
        "lists the shells: {}",
        stderr(&o)
    );

    let version = fleet(&["version"], &env);
    assert_eq!(version.status.code(), Some(0), "{}", stderr(&version));
    let line = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        line.starts_with(&format!("fleet {} (", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    // The commit when built from a checkout (this test is), else a sentence saying it is not.
    let commit = line
        .trim_end()
        .trim_end_matches(')')
        .rsplit('(')
        .next()
        .unwrap();
    assert!(
        commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())
            || commit == "not built from a git checkout",
        "{line}"
    );
    let flag = fleet(&["--version"], &env);
    assert_eq!(String::from_utf8_lossy(&flag.stdout), line);
}

// A key of another type than fleet writes there. The hold-request hash costs
// only the requests (every beat still lands; it used to fail every beat, and so the fleet within
// a TTL); any other key fails the write naming that key, never a script hash.
#[tokio::test]
async fn a_foreign_key_type_costs_only_its_own_data_and_errors_name_the_key() {
    let server = server();
    let url = server.url();
    let keys = fleet::store::keys::Keys::default();
    let (_, code) = run(&server, &["beat", "b1"]).await;
    assert_eq!(code, 0);
    let _: () = raw(&server, &["SET", &keys.hold_requests(), "garbage"]).await;
    let o = fleet(&["--redis", &url, "beat", "b1", "--ttl", "1h"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let warning = stderr(&o);
    assert!(
        warning.contains(&format!(
            "{} is not a hash of hold requests",
            keys.hold_requests()
        )) && warning.contains("redis-cli DEL"),
        "{warning}"
    );
    let (out, _) = run(&server, &["state", "b1", "-o", "json"]).await;
    assert!(out.contains(r#""state": "UP""#), "the beat landed: {out}");

    // The registry, which a beat whose user may adds its bench to: the beat lands, unregistered,
    // and says which key and how to repair it (SPEC §2.3).
    let _: () = raw(&server, &["DEL", &keys.hold_requests()]).await;
    let _: () = raw(&server, &["SET", &keys.registry(), "garbage"]).await;
    let o = fleet(&["--redis", &url, "beat", "b1"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "{} is not the set of registered benches",
            keys.registry()
        )) && err.contains("redis-cli DEL"),
        "{err}"
    );
    assert!(
        !err.contains("script:") && !err.contains("user_script"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // A script that meets a key of another type fails naming that key, never a script hash.
    let o = fleet(&["--redis", &url, "forget", "b1"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "the key {} holds another type of value than fleet writes there",
            keys.registry()
        )),
        "{err}"
    );
    assert!(
        !err.contains("script:") && !err.contains("user_script"),
        "{err}"
    );
}

// SPEC §2.1, §7 S7: a hold reason with a bidirectional control would show on the page and in a
// terminal as another reason than the one written; it is refused, exit 2, naming the character
// and its position, before anything reaches Redis (the URL is unreachable), as a beat's explicit
// hold and a control character are.
#[test]
fn a_reason_with_a_bidi_control_is_refused_naming_it() {
    let env = [("FLEET_REDIS_URL", "redis://127.0.0.1:1")];
    for (args, says) in [
        (
            &["hold", "bench-01", "--reason", "ok \u{202E}gnp.exe"][..],
            "character 4 is U+202E (RIGHT-TO-LEFT OVERRIDE), a bidirectional control",
        ),
        (
            &["beat", "bench-01", "--hold", "\u{2067}x"],
            "character 1 is U+2067 (RIGHT-TO-LEFT ISOLATE)",
        ),
        (
            &["hold", "bench-01", "--reason", "a\u{1b}[2Jb"],
            "character 2 is U+001B (ESCAPE), a control character",
        ),
        (
            &[
                "serve",
                "--config",
                "/nonexistent.yaml",
                "--holder",
                "leader\u{202E}",
            ],
            "invalid holder \"leader\\u{202e}\": character 7 is U+202E",
        ),
    ] {
        let o = fleet(args, &env);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        // The value refused is echoed as text, never as the character itself.
        assert!(
            !stderr(&o)
                .chars()
                .any(|c| c != '\n' && fleet::domain::text::is_unsafe(c)),
            "{args:?}: {:?}",
            stderr(&o)
        );
    }
}

// A Sentinel URL whose password held an unescaped `/` waited the whole `--timeout`,
// said `TLS failed` and exited 1, while the same password in a `redis://` URL was exit 2 at once
// in words that named no part. Every form is now read whole before anything connects: exit 2
// at once, naming the part and the fix, never the password (SPEC §2.7).
#[test]
fn a_url_that_cannot_be_read_is_exit_2_at_once_naming_the_part() {
    for (url, part, fix) in [
        (
            "redis+sentinel://:pa/ss@127.0.0.1:26379/mymaster",
            "the password holds an unescaped `/`",
            "%2F",
        ),
        (
            "rediss+sentinel://u:pa?ss@127.0.0.1/mymaster",
            "the password holds an unescaped `?`",
            "%3F",
        ),
        (
            "redis+cluster://u:pa/ss@127.0.0.1:7000,127.0.0.1:7001",
            "the password",
            "%2F",
        ),
        ("redis://:pa/ss@127.0.0.1:6379", "the password", "%2F"),
        ("rediss://u:pa#ss@127.0.0.1:6379/0", "the password", "%23"),
        (
            "redis://127.0.0.1:6379/0?db=3",
            "the database",
            "redis://host:port/N",
        ),
        (
            "redis+unix:///tmp/r.sock?password=pa/ss",
            "the password is given as password=",
            "pass=",
        ),
        (
            "redis+sentinel://127.0.0.1:26379",
            "the service name",
            "/mymaster",
        ),
        (
            "redis+sentinel://127.0.0.1:99999/m",
            "the port",
            "1 to 65535",
        ),
        ("redis+sentinel://0.0.0.0/mymaster", "the host", "127.0.0.1"),
    ] {
        for verb in [
            &["state"][..],
            &["beat", "bench-01"],
            &["agent", "bench-01"],
        ] {
            let mut args = vec!["--redis", url, "--timeout", "5s"];
            args.extend_from_slice(verb);
            let started = Instant::now();
            let o = fleet(&args, &[]);
            let took = started.elapsed();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{url} {verb:?}: {err}");
            assert!(
                took < Duration::from_secs(1),
                "{url} {verb:?}: refused after {took:?}, not at once"
            );
            assert!(err.contains(part), "{url} {verb:?}: {err}");
            assert!(err.contains(fix), "{url} {verb:?}: {err}");
            if url.contains("pa") {
                assert!(
                    err.contains("***"),
                    "{url} {verb:?}: the URL redacted: {err}"
                );
            }
            assert!(
                !err.contains("pa/ss") && !err.contains("pa?ss") && !err.contains("pa#ss"),
                "{url} {verb:?}: {err}"
            );
        }
    }
    // The same from the environment, as a deployment gives it.
    let started = Instant::now();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--timeout", "5s", "live"])
        .env(
            "FLEET_REDIS_URL",
            "redis+sentinel://:pa/ss@127.0.0.1:26379/mymaster",
        )
        .output()
        .expect("running fleet");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        stderr(&o).contains("percent-encode it as %2F"),
        "{}",
        stderr(&o)
    );
}
