//! The `fleet-agent` binary, built as machines build it (fleet's library without its features),
//! against a real redis-server: it beats, stops as `fleet agent` does, and takes the same flags.

use std::time::Duration;

use clap::CommandFactory;
use fleet::domain::name::BenchName;
use fleet::domain::state::State;
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use fleet_testing::RedisServer;
use tokio::io::AsyncBufReadExt;

const AGENT: &str = env!("CARGO_BIN_EXE_fleet-agent");

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn state(server: &RedisServer) -> State {
    let conn = server.endpoint().connect().await.expect("connecting");
    let snap = Presence::new(conn, Keys::default())
        .read(&[BenchName::parse("bench-01").unwrap()])
        .await
        .unwrap();
    snap.benches[0].row(snap.now).state
}

// Issue 15: `fleet-agent` is `fleet agent` alone, a small binary of its own over the same library
// code: its beat reads UP through the library, and it stops as `fleet agent` does (a final beat,
// exit 0).
#[tokio::test]
async fn the_small_agent_binary_beats_up_and_stops_on_sigterm_with_a_final_beat() {
    let server = RedisServer::start().expect("starting redis-server");
    let mut child = tokio::process::Command::new(AGENT)
        .args(["--redis", &server.url()])
        .args(["bench-01", "--interval", "100ms"])
        .env("FLEET_LOG", "debug")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    bounded("a beat logged", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("beat written") {
                return;
            }
        }
        panic!("the agent ended before beating");
    })
    .await;
    assert_eq!(state(&server).await, State::Up);
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = bounded("agent exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        state(&server).await,
        State::Down,
        "the final beat had TTL 0"
    );
}

/// The `--flags` of a help text.
fn flags(help: &str) -> std::collections::BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '(' || c == ')')
        .filter(|w| w.starts_with("--"))
        .map(str::to_owned)
        .collect()
}

// The same flags as `fleet agent`, as the library's command line defines that verb (this package
// builds no `fleet` binary to ask).
#[test]
fn the_small_agent_binary_takes_the_same_flags_as_fleet_agent() {
    let o = std::process::Command::new(AGENT)
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success(), "{AGENT} --help");
    let mut small = flags(&String::from_utf8(o.stdout).unwrap());
    let mut cli = fleet::cli::Cli::command();
    cli.build();
    let verb = cli.find_subcommand_mut("agent").expect("fleet agent");
    let fleet = flags(&verb.render_long_help().to_string());
    // A top-level command has --version, a verb does not.
    assert!(small.remove("--version"), "{small:?}");
    assert!(fleet.contains("--power-off-command") && fleet.contains("--redis"));
    assert_eq!(small, fleet);
}
