//! The wake path (SPEC §4.5): a beat that changes its bench's state announces it on the wake
//! channel, a steady beat does not, and a controller that wakes on beats passes at once after a
//! first beat and at a key's deadline, with a tick of an hour so that nothing else explains the
//! pass; its subscription comes back after the server drops it.
//!
//! Every wait polls with a bound; no test sleeps to let something happen.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use fleet::domain::claim::{Claim, ConditionKind, Move, Phase};
use fleet::domain::name::{ClaimName, GroupName};
use fleet::reconcile::{Controller, Faults, Wake};
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet::telemetry::{Health, Metrics};
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind};
use support::*;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a test hears on the wake channel, in order, on a RESP3 connection of its own.
struct Listener {
    _conn: MultiplexedConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    marks: u32,
}

impl Listener {
    async fn new(server: &RedisServer) -> Self {
        let client = server.endpoint().client().unwrap();
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings)).unwrap();
        let (tx, pushes) = mpsc::unbounded_channel();
        let config = AsyncConnectionConfig::new().set_push_sender(tx);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        redis::cmd("SSUBSCRIBE")
            .arg(Keys::default().wake_channel())
            .query_async::<redis::Value>(&mut conn)
            .await
            .unwrap();
        Listener {
            _conn: conn,
            pushes,
            marks: 0,
        }
    }

    /// The names announced since the last call: the test publishes a mark of its own and takes
    /// every message before it (one channel delivers in order), so "nothing" is a finding, not a
    /// wait that ran out.
    async fn heard(&mut self, server: &RedisServer) -> Vec<String> {
        self.marks += 1;
        let mark = format!("mark-{}", self.marks);
        let _: i64 = raw(
            server,
            &["SPUBLISH", &Keys::default().wake_channel(), &mark],
        )
        .await;
        let mut names = Vec::new();
        loop {
            let push = bounded("a push", self.pushes.recv()).await.unwrap();
            if push.kind != PushKind::SMessage {
                continue;
            }
            let text: String = redis::from_redis_value(push.data[1].clone()).unwrap();
            if text == mark {
                return names;
            }
            names.push(text);
        }
    }
}

fn held(n: &str, ttl: Duration, why: &str) -> Beat {
    Beat {
        hold: Some(reason(why)),
        ..beat(n, ttl)
    }
}

// SPEC §4.5: only a change of state is announced, named by the bench; a fleet at rest costs the
// controller nothing.
#[tokio::test]
async fn steady_beats_publish_nothing_and_every_change_publishes_the_bench_name() {
    let server = server();
    let p = presence(&server).await;
    let mut heard = Listener::new(&server).await;
    let hour = Duration::from_secs(3600);
    let steps: Vec<(&str, Beat, Vec<&str>)> = vec![
        ("a first beat", beat("bench-a", hour), vec!["bench-a"]),
        ("a steady beat", beat("bench-a", hour), vec![]),
        ("another steady beat", beat("bench-a", hour), vec![]),
        (
            "a hold put on",
            held("bench-a", hour, "repair"),
            vec!["bench-a"],
        ),
        ("the same hold", held("bench-a", hour, "repair"), vec![]),
        (
            "another hold",
            held("bench-a", hour, "bios"),
            vec!["bench-a"],
        ),
        ("the hold taken off", beat("bench-a", hour), vec!["bench-a"]),
        (
            "a deadline brought forward",
            beat("bench-a", Duration::from_secs(60)),
            vec!["bench-a"],
        ),
        ("a later deadline", beat("bench-a", hour), vec![]),
        (
            "a TTL of 0",
            beat("bench-a", Duration::ZERO),
            vec!["bench-a"],
        ),
        ("a TTL of 0 again", beat("bench-a", Duration::ZERO), vec![]),
        ("back", beat("bench-a", hour), vec!["bench-a"]),
        (
            "another bench's first beat",
            beat("bench-b", hour),
            vec!["bench-b"],
        ),
    ];
    for (what, b, names) in steps {
        p.beat(&b).await.unwrap();
        assert_eq!(heard.heard(&server).await, names, "{what}");
    }

    // An operator's hold request is announced by the beat that carries it, not by the request.
    p.request_hold(&name("bench-b"), &reason("drain"), None)
        .await
        .unwrap();
    assert_eq!(
        heard.heard(&server).await,
        Vec::<String>::new(),
        "the request"
    );
    p.beat(&beat("bench-b", hour)).await.unwrap();
    assert_eq!(
        heard.heard(&server).await,
        ["bench-b"],
        "the carried request"
    );
    p.beat(&beat("bench-b", hour)).await.unwrap();
    assert_eq!(
        heard.heard(&server).await,
        Vec::<String>::new(),
        "carried again"
    );

    // A key that expired: the next beat is a first beat again.
    p.beat(&beat("bench-c", Duration::from_millis(30)))
        .await
        .unwrap();
    assert_eq!(heard.heard(&server).await, ["bench-c"]);
    let key = Keys::default().heartbeat(&name("bench-c"));
    bounded("the key to expire", async {
        while raw::<i64>(&server, &["EXISTS", &key]).await == 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    p.beat(&beat("bench-c", hour)).await.unwrap();
    assert_eq!(heard.heard(&server).await, ["bench-c"], "after the expiry");

    // A foreign value in the key did not count: the beat over it is a change.
    let _: () = raw(&server, &["SET", &key, "garbage"]).await;
    p.beat(&beat("bench-c", hour)).await.unwrap();
    assert_eq!(heard.heard(&server).await, ["bench-c"], "over garbage");
}

const GROUP: &str = "pool-a";
const SLOTS: [&str; 3] = ["bench-01", "bench-02", "bench-03"];
const HOUR: Duration = Duration::from_secs(3600);

fn group() -> GroupName {
    GroupName::parse(GROUP).unwrap()
}

struct World {
    server: RedisServer,
    store: ClaimStore<MultiplexedConnection>,
    presence: Presence<MultiplexedConnection>,
    shutdown: CancellationToken,
    running: Option<tokio::task::JoinHandle<()>>,
}

impl World {
    /// A server, and the store as the test writes it.
    async fn new() -> World {
        let server = server();
        World {
            store: ClaimStore::new(conn(&server).await, Keys::default()),
            presence: presence(&server).await,
            server,
            shutdown: CancellationToken::new(),
            running: None,
        }
    }

    /// Starts a controller that wakes on beats and ticks once an hour: its first tick passes at
    /// once, and after that only an operation's end or a wake explains a pass. Returns once it
    /// listens.
    async fn start(&mut self) {
        let server = &self.server;
        let cfg = Fixture::new()
            .group(
                Group::new(GROUP)
                    .min(0)
                    .max(3)
                    .ungated()
                    .startup(Op::command(["true"]))
                    .shutdown(Op::command(["true"]))
                    .timing("machine_gone_grace", "1h"),
            )
            .slots(GROUP, SLOTS)
            .config();
        let (_, rx) = tokio::sync::watch::channel(Arc::new(cfg));
        let ctl = Controller::new(
            rx,
            presence(server).await,
            ClaimStore::new(conn(server).await, Keys::default()),
            Arc::new(exec(server)),
            Arc::new(Metrics::default()),
            Arc::new(Health::default()),
        )
        .with_faults(Faults {
            blind_grace: Duration::ZERO,
            ..Faults::default()
        })
        .waking_on(Wake::new(
            &server.endpoint().client().unwrap(),
            &Keys::default(),
            Duration::from_secs(5),
        ));
        self.running = Some(tokio::spawn(ctl.run_leading(
            HOUR,
            Duration::from_secs(5),
            self.shutdown.clone(),
        )));
        self.subscribers(1).await;
    }

    /// Waits until the wake channel has `n` subscribers.
    async fn subscribers(&self, n: i64) {
        let channel = Keys::default().wake_channel();
        bounded("the controller to subscribe", async {
            loop {
                let (_, count): (String, i64) =
                    raw(&self.server, &["PUBSUB", "SHARDNUMSUB", &channel]).await;
                if count == n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    /// The id of the client subscribed to a shard channel, if one is. A RESP3 subscriber is not
    /// of `CLIENT LIST`'s type pubsub (it may send any command), so it is found by `ssub=`.
    async fn subscriber(&self) -> Option<String> {
        let list: String = raw(&self.server, &["CLIENT", "LIST"]).await;
        list.lines()
            .find(|l| l.split_whitespace().any(|f| f == "ssub=1"))
            .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")))
            .map(str::to_owned)
    }

    async fn claim(&self, slot: &str) -> Claim {
        bounded("the claim", async {
            loop {
                let claims = self.store.read_groups(&[group()]).await.unwrap();
                if let Some(c) = claims[0].claims.iter().find(|c| c.slot.as_str() == slot) {
                    return c.clone();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
    }

    /// Polls the slot's claim until `done` says it is there, bounded.
    async fn until(&self, slot: &str, what: &str, done: impl Fn(&Claim) -> bool) -> Claim {
        bounded(what, async {
            loop {
                let c = self.claim(slot).await;
                if done(&c) {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
    }

    /// A claim on `slot`, then the controller, whose first pass starts the machine (a no-op):
    /// the claim waits for the bench's first beat.
    async fn booted(&mut self, slot: &str) {
        let seed = self.store.seed(&group(), &name(slot)).await.unwrap();
        let now = self.store.now().await.unwrap();
        let c = Claim::new(
            ClaimName::parse(&format!("{slot}-1")).unwrap(),
            name(slot),
            group(),
            None,
            now,
            &Default::default(),
            None,
        );
        self.store.create(&c, &seed).await.unwrap();
        self.start().await;
        // No tick comes for an hour: the startup's own end makes the pass that records it.
        self.until(slot, "the startup to run", |c| {
            c.operation.as_ref().is_some_and(|op| op.outcome.is_some())
        })
        .await;
    }

    /// A ready claim on `slot` whose bench beats for an hour, then the controller.
    async fn ready(&mut self, slot: &str) {
        self.presence.beat(&beat(slot, HOUR)).await.unwrap();
        let seed = self.store.seed(&group(), &name(slot)).await.unwrap();
        let now = self.store.now().await.unwrap();
        let c = Claim::new(
            ClaimName::parse(&format!("{slot}-1")).unwrap(),
            name(slot),
            group(),
            None,
            now,
            &Default::default(),
            None,
        );
        self.store.create(&c, &seed).await.unwrap();
        let ready = c
            .apply(Move::to(Phase::Booting), now)
            .unwrap()
            .apply(Move::to(Phase::Ready), now)
            .unwrap();
        self.store.write(&c, &ready, None).await.unwrap();
        self.start().await;
    }

    /// The bench's first beat, then the time from it to the pass that made the claim ready, on
    /// the server's clock.
    async fn first_beat_to_ready(&self, slot: &str) -> TimeDelta {
        let at = self.presence.beat(&beat(slot, HOUR)).await.unwrap().at;
        let c = self
            .until(slot, "the claim to be ready", |c| c.phase == Phase::Ready)
            .await;
        c.condition(ConditionKind::Ready)
            .unwrap()
            .last_transition_time
            - at
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(running) = self.running.take() {
            bounded("the controller to stop", running).await.unwrap();
        }
    }
}

fn ms(d: TimeDelta) -> i64 {
    d.num_milliseconds()
}

// SPEC §4.5: a first beat wakes the controller; with a tick of an hour, nothing else could.
#[tokio::test]
async fn a_first_beat_makes_a_pass_at_once_without_waiting_for_the_tick() {
    let mut w = World::new().await;
    w.booted("bench-01").await;
    let delay = w.first_beat_to_ready("bench-01").await;
    assert!(
        (0..1_000).contains(&ms(delay)),
        "the ready move came {} ms after the first beat",
        ms(delay)
    );
    w.stop().await;
}

// SPEC §4.5: the controller waits for the earliest deadline it read, not for its tick. The
// shorter TTL brings the deadline forward, which the beat announces, so the controller reads it.
#[tokio::test]
async fn a_key_expiry_makes_a_pass_at_its_deadline() {
    let mut w = World::new().await;
    w.ready("bench-02").await;
    let at = w
        .presence
        .beat(&beat("bench-02", Duration::from_millis(400)))
        .await
        .unwrap()
        .at;
    let deadline: DateTime<Utc> = at + TimeDelta::milliseconds(400);
    let c = w
        .until("bench-02", "the machine observed off", |c| {
            c.condition(ConditionKind::MachineObservedOff)
                .is_some_and(|off| off.status)
        })
        .await;
    let seen = c
        .condition(ConditionKind::MachineObservedOff)
        .unwrap()
        .last_transition_time;
    assert!(
        (0..1_000).contains(&ms(seen - deadline)),
        "the pass that saw the expiry came {} ms after the deadline",
        ms(seen - deadline)
    );
    w.stop().await;
}

// SPEC §4.5: the server ends the subscription (a killed connection here, a slot migration in a
// Cluster); the controller subscribes again and still wakes on the next first beat.
#[tokio::test]
async fn a_lost_subscription_is_established_again() {
    let mut w = World::new().await;
    w.booted("bench-03").await;
    let before = w.subscriber().await;
    assert!(before.is_some(), "the controller subscribed");
    let _: () = raw(
        &w.server,
        &["CLIENT", "KILL", "ID", &before.clone().unwrap()],
    )
    .await;
    // Another connection subscribes (the old one may still be listed for a moment: polled).
    bounded("a new subscription", async {
        loop {
            let now = w.subscriber().await;
            if now.is_some() && now != before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    w.subscribers(1).await;
    let delay = w.first_beat_to_ready("bench-03").await;
    assert!(
        (0..1_000).contains(&ms(delay)),
        "after the subscription came back, the ready move came {} ms after the first beat",
        ms(delay)
    );
    w.stop().await;
}
