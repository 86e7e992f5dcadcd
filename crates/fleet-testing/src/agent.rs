//! An agent binary run as a machine runs it: `fleet agent` and `fleet-agent` are held to the same
//! behaviour by the same steps, from the two packages that build them.

use std::time::Duration;

use fleet::domain::name::BenchName;
use fleet::domain::state::State;
use fleet::store::keys::Keys;
use fleet::store::presence::Presence;
use tokio::io::AsyncBufReadExt;

use crate::RedisServer;

/// How long each step may take: far above what it needs, so only a hang fails it.
const STEP: Duration = Duration::from_secs(20);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// bench-01's state, read through the library.
async fn state(server: &RedisServer) -> State {
    let conn = server.endpoint().connect().await.expect("connecting");
    let snap = Presence::new(conn, Keys::default())
        .read(&[BenchName::parse("bench-01").expect("a valid name")])
        .await
        .expect("reading presence");
    snap.benches[0].row(snap.now).state
}

/// Starts `exe verb bench-01` beating every 100 ms against a fresh server, waits for a beat that
/// reads UP through the library, then stops it with SIGTERM: exit 0, and the final beat (TTL 0)
/// reads DOWN.
pub async fn beats_up_then_stops_on_sigterm(exe: &str, verb: &[&str]) {
    let server = RedisServer::start().expect("starting redis-server");
    let mut child = tokio::process::Command::new(exe)
        .args(["--redis", &server.url()])
        .args(verb)
        .args(["bench-01", "--interval", "100ms"])
        .env("FLEET_LOG", "debug")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the agent");
    let stderr = child.stderr.take().expect("the agent's stderr");
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    bounded("a beat logged", async {
        while let Some(line) = lines.next_line().await.expect("reading the agent's log") {
            if line.contains("beat written") {
                return;
            }
        }
        panic!("the agent ended before beating");
    })
    .await;
    assert_eq!(state(&server).await, State::Up);
    let pid = child.id().expect("the agent's pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("running kill");
    assert!(killed.success());
    let status = bounded("agent exit", child.wait()).await.expect("waiting");
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        state(&server).await,
        State::Down,
        "the final beat had TTL 0"
    );
}
