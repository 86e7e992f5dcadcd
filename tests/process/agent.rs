//! The heartbeat agent against a real redis-server: beats, carried holds, outages, the final
//! beat, and the binary's signal handling (SPEC §2.9).

use crate::support;

use std::time::Duration;

use fleet::agent::{Agent, Config, Event};
use fleet::domain::state::State;
use fleet::store::keys::Keys;
use fleet_testing::RedisServer;
use support::*;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn config(final_ttl: Duration, final_hold: Option<&str>) -> Config {
    Config {
        name: name("bench-01"),
        interval: Duration::from_millis(20),
        ttl: Duration::from_secs(30),
        final_ttl,
        final_hold: final_hold.map(reason),
        power_off: None,
    }
}

struct Running {
    events: mpsc::UnboundedReceiver<Event>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<fleet::agent::Stopped>,
}

fn start(server: &RedisServer, config: Config) -> Running {
    let (tx, events) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    // The default call timeout: a killed server refuses at once, so no test waits on it, and a
    // short one would fail a slow beat on a loaded machine.
    let agent = Agent::new(config, server.endpoint(), Keys::default()).with_events(tx);
    let task = tokio::spawn(agent.run(shutdown.clone()));
    Running {
        events,
        shutdown,
        task,
    }
}

impl Running {
    /// Waits for the next event that `want` accepts, failing on a long wait.
    async fn until(&mut self, what: &str, want: impl Fn(&Event) -> bool) -> Event {
        bounded(what, async {
            loop {
                let e = self.events.recv().await.expect("agent stopped");
                if want(&e) {
                    return e;
                }
            }
        })
        .await
    }

    async fn stop(mut self) -> Event {
        self.shutdown.cancel();
        let last = self
            .until("the final beat", |e| matches!(e, Event::Final(_)))
            .await;
        bounded("agent exit", self.task).await.unwrap();
        last
    }
}

async fn state(server: &RedisServer) -> (State, Option<String>, Option<f64>, Option<u32>) {
    let p = presence(server).await;
    let snap = p.read(&[name("bench-01")]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    (row.state, row.hold, row.load, row.cores)
}

#[tokio::test]
async fn the_agent_beats_with_the_hosts_load_and_cores_and_carries_a_hold_request() {
    let server = server();
    let mut agent = start(&server, config(Duration::ZERO, None));
    agent.until("a beat", |e| matches!(e, Event::Beat(_))).await;
    let (st, hold, load, cores) = state(&server).await;
    assert_eq!((st, hold), (State::Up, None));
    assert!(
        load.is_some() && cores.unwrap() >= 1,
        "load {load:?} cores {cores:?}"
    );

    presence(&server)
        .await
        .request_hold(&name("bench-01"), &reason("upgrade"), None)
        .await
        .unwrap();
    agent
        .until(
            "the hold carried",
            |e| matches!(e, Event::Beat(r) if r.hold.as_deref() == Some("upgrade")),
        )
        .await;
    assert_eq!(state(&server).await.0, State::Held);

    presence(&server)
        .await
        .release(&name("bench-01"))
        .await
        .unwrap();
    agent
        .until(
            "the hold dropped",
            |e| matches!(e, Event::Beat(r) if r.hold.is_none()),
        )
        .await;
    assert_eq!(state(&server).await.0, State::Up);

    let last = agent.stop().await;
    assert!(matches!(last, Event::Final(Ok(_))), "{last:?}");
    assert_eq!(
        state(&server).await.0,
        State::Down,
        "final TTL 0 reads DOWN at once"
    );
}

#[tokio::test]
async fn the_agent_keeps_beating_through_a_redis_outage() {
    let mut server = server();
    let mut agent = start(&server, config(Duration::ZERO, None));
    agent.until("a beat", |e| matches!(e, Event::Beat(_))).await;
    server.kill();
    let failed = agent
        .until("a failure", |e| matches!(e, Event::Failed { .. }))
        .await;
    let Event::Failed { error, .. } = failed else {
        unreachable!()
    };
    assert!(!error.is_empty());
    agent
        .until("a second failure", |e| {
            matches!(e, Event::Failed { failures: 2, .. })
        })
        .await;
    server.restart().unwrap();
    agent
        .until("a beat after the outage", |e| matches!(e, Event::Beat(_)))
        .await;
    assert_eq!(state(&server).await.0, State::Up);
    agent.stop().await;
}

#[tokio::test]
async fn an_agent_started_while_redis_is_down_beats_once_it_is_up() {
    let mut server = server();
    server.kill();
    let mut agent = start(&server, config(Duration::ZERO, None));
    agent
        .until("a failure", |e| matches!(e, Event::Failed { .. }))
        .await;
    server.restart().unwrap();
    agent.until("a beat", |e| matches!(e, Event::Beat(_))).await;
    assert_eq!(state(&server).await.0, State::Up);
    agent.stop().await;
}

#[tokio::test]
async fn a_final_beat_with_a_hold_promises_a_planned_sleep() {
    let server = server();
    let mut agent = start(&server, config(Duration::from_secs(3600), Some("sleeping")));
    agent.until("a beat", |e| matches!(e, Event::Beat(_))).await;
    agent.stop().await;
    let p = presence(&server).await;
    let snap = p.read(&[]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(
        (row.state, row.hold.as_deref(), row.ttl_ms),
        (State::Held, Some("sleeping"), Some(3_600_000))
    );
}

#[tokio::test]
async fn the_agent_binary_stops_on_sigterm_with_a_final_beat_and_exit_0() {
    fleet_testing::agent::beats_up_then_stops_on_sigterm(env!("CARGO_BIN_EXE_fleet"), &["agent"])
        .await;
}

// `fleet-agent`, the same verb alone, is tested in its own package (cmd/fleet-agent/tests).

// The agent's stop is bounded by --timeout, and its exit code says whether the final
// beat landed: with Redis gone it stops within the timeout and exits 1 (it used to exit 0, as if
// the bench had said goodbye).
#[tokio::test]
async fn an_agent_whose_final_beat_cannot_land_stops_in_time_and_exits_1() {
    let server = fleet_testing::RedisServer::with(fleet_testing::Options {
        tcp: true,
        ..Default::default()
    })
    .unwrap();
    let url = format!("redis://127.0.0.1:{}", server.port().unwrap());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args([
            "--redis",
            &url,
            "--timeout",
            "500ms",
            "agent",
            "bench-01",
            "--interval",
            "100ms",
        ])
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
    // A peer that accepts and never answers, on Redis's port: the final beat waits on nothing.
    drop(server);
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let silent = std::net::TcpListener::bind(("127.0.0.1", port));
    let pid = child.id().unwrap().to_string();
    let stopping = std::time::Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut rest = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push_str(&line);
        rest.push('\n');
    }
    let status = bounded("agent exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "stopped in {:?}",
        stopping.elapsed()
    );
    assert!(rest.contains("the final beat did not land"), "{rest}");
    drop(silent);
}

// ---------------------------------------------------------------------------------------------
// The agent's power-off (SPEC §4.10): a real `fleet agent` process reads its bench's power-off
// request on each beat, answers its nonce, and runs its --power-off-command once per nonce.

/// A `fleet agent` process beating every 100 ms, its log lines read as they come.
struct AgentProcess {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
    /// Every line read so far.
    seen: Vec<String>,
}

impl AgentProcess {
    fn start(server: &RedisServer, bench: &str, power_off: Option<&str>) -> AgentProcess {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"));
        cmd.args([
            "--redis",
            &server.url(),
            "agent",
            bench,
            "--interval",
            "100ms",
        ]);
        if let Some(command) = power_off {
            cmd.args(["--power-off-command", command]);
        }
        let mut child = cmd
            .env("FLEET_LOG", "debug")
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = tx.send(line);
            }
        });
        AgentProcess {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a log line holding every one of `words`, and returns it.
    async fn log(&mut self, words: &[&str]) -> String {
        bounded(&format!("a log line with {words:?}"), async {
            loop {
                let line = self.lines.recv().await.expect("the agent ended");
                self.seen.push(line.clone());
                if words.iter().all(|w| line.contains(w)) {
                    return line;
                }
            }
        })
        .await
    }

    /// Waits for `n` more beats.
    async fn beats(&mut self, n: usize) {
        for _ in 0..n {
            self.log(&["beat written"]).await;
        }
    }

    /// Stops it with SIGTERM, as a supervisor would, and waits for its exit.
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = bounded("agent exit", self.child.wait()).await.unwrap();
        assert_eq!(status.code(), Some(0));
    }
}

fn power_off_store(
    conn: redis::aio::MultiplexedConnection,
) -> fleet::store::power_off::PowerOff<redis::aio::MultiplexedConnection> {
    fleet::store::power_off::PowerOff::new(conn, Keys::default())
}

fn read_file(path: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[tokio::test]
async fn a_real_agent_powers_off_its_own_bench_when_asked_once_per_nonce_and_no_other() {
    use fleet::store::power_off::{Answer, OffAck};
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let marks = [dir.path().join("bench-01"), dir.path().join("bench-02")];
    let command = |mark: &std::path::Path| format!("echo off >> '{}'", mark.display());
    let mut one = AgentProcess::start(&server, "bench-01", Some(&command(&marks[0])));
    let mut two = AgentProcess::start(&server, "bench-02", Some(&command(&marks[1])));
    one.beats(1).await;
    two.beats(1).await;
    let store = power_off_store(conn(&server).await);

    store
        .ask(&name("bench-01"), "nonce1", Duration::from_secs(60))
        .await
        .unwrap();
    let ran = one.log(&["the power-off command ended"]).await;
    assert!(ran.contains("nonce1"), "{ran}");
    assert_eq!(read_file(&marks[0]).as_deref(), Some("off\n"));
    assert_eq!(
        store.answer(&name("bench-01")).await.unwrap(),
        Some(Ok(OffAck {
            nonce: "nonce1".into(),
            answer: Answer::Accepted,
            why: None,
        }))
    );
    // The request still stands (until its lapse): more beats see it answered and run nothing,
    // and the other bench, asked nothing, powers nothing off.
    one.beats(3).await;
    two.beats(3).await;
    assert_eq!(read_file(&marks[0]).as_deref(), Some("off\n"));
    assert_eq!(read_file(&marks[1]), None);
    assert_eq!(store.answer(&name("bench-02")).await.unwrap(), None);
    assert!(
        !two.seen.iter().any(|l| l.contains("powering off")),
        "{:?}",
        two.seen
    );

    // A restarted agent (a machine back on) finds the request answered: once per nonce, not once
    // per process.
    one.stop().await;
    let mut one = AgentProcess::start(&server, "bench-01", Some(&command(&marks[0])));
    one.beats(3).await;
    assert_eq!(read_file(&marks[0]).as_deref(), Some("off\n"));
    assert!(!one.seen.iter().any(|l| l.contains("powering off")));

    // A new request, a new nonce: obeyed once more.
    store
        .ask(&name("bench-01"), "nonce2", Duration::from_secs(60))
        .await
        .unwrap();
    let ran = one.log(&["the power-off command ended"]).await;
    assert!(ran.contains("nonce2"), "{ran}");
    assert_eq!(read_file(&marks[0]).as_deref(), Some("off\noff\n"));
    assert_eq!(read_file(&marks[1]), None);
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn an_agent_without_a_power_off_command_refuses_saying_why_and_says_so_once() {
    use fleet::store::power_off::{Answer, OffAck};
    let server = server();
    let mut agent = AgentProcess::start(&server, "bench-01", None);
    let said = agent
        .log(&["no --power-off-command", "never powers its machine off"])
        .await;
    assert!(said.contains("INFO"), "{said}");
    agent.beats(1).await;
    let store = power_off_store(conn(&server).await);
    store
        .ask(&name("bench-01"), "nonce1", Duration::from_secs(60))
        .await
        .unwrap();
    let refused = agent.log(&["a power-off was asked and refused"]).await;
    assert!(refused.contains("nonce1"), "{refused}");
    assert_eq!(
        store.answer(&name("bench-01")).await.unwrap(),
        Some(Ok(OffAck {
            nonce: "nonce1".into(),
            answer: Answer::Refused,
            why: Some(fleet::agent::REFUSAL.to_owned()),
        }))
    );
    agent.beats(3).await;
    let starts = agent
        .seen
        .iter()
        .filter(|l| l.contains("never powers its machine off"))
        .count();
    let refusals = agent
        .seen
        .iter()
        .filter(|l| l.contains("a power-off was asked and refused"))
        .count();
    assert_eq!((starts, refusals), (1, 1), "{:?}", agent.seen);
    agent.stop().await;
}

#[test]
fn a_blank_power_off_command_is_refused_at_start() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["agent", "bench-01", "--power-off-command", " "])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the power-off command is empty or holds a NUL"),
        "{err}"
    );
}

// SPEC §4.10, §7 S5: an answer counts only for the request it answers. The agent writes its
// answer and reads its request back in one round trip (no transaction: a bench may run none), so
// an answer to a request that was replaced or lapsed since the beat read it names a nonce no
// wrapper waits for, and the agent learns the request is gone and does not obey it.
#[tokio::test]
async fn an_answer_to_a_request_that_no_longer_stands_answers_nothing_and_is_not_obeyed() {
    use fleet::store::power_off::{Answer, OffAck, PowerOff};
    let server = server();
    let keys = Keys::default();
    let bench = name("bench-01");
    let controller = PowerOff::new(conn(&server).await, keys.clone());
    let own = PowerOff::new(conn(&server).await, keys.clone());
    let ack = |nonce: &str| OffAck {
        nonce: nonce.to_owned(),
        answer: Answer::Accepted,
        why: None,
    };
    let first = controller
        .ask(&bench, "na", Duration::from_secs(60))
        .await
        .unwrap();
    // Replaced before the agent answers: the agent is told, and the answer it wrote names the
    // first nonce, which the request that stands (and the wrapper that waits for it) is not.
    let second = controller
        .ask(&bench, "nb", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(!own.acknowledge(&bench, &first, &ack("na")).await.unwrap());
    let read = controller.answer(&bench).await.unwrap();
    assert_eq!(read, Some(Ok(ack("na"))));
    assert_ne!(read.unwrap().unwrap().nonce, second.nonce);
    // Lapsed (its key expired, here deleted) before the agent answers: the same.
    let _: i64 = raw(&server, &["DEL", &keys.off_request(&bench)]).await;
    assert!(!own.acknowledge(&bench, &second, &ack("nb")).await.unwrap());
    // The request that stands is answered, and the answer names it.
    let third = controller
        .ask(&bench, "nc", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(own.acknowledge(&bench, &third, &ack("nc")).await.unwrap());
    assert_eq!(
        controller.answer(&bench).await.unwrap(),
        Some(Ok(ack("nc")))
    );
}
