//! The presence store against a real redis-server (SPEC §2.3 to §2.5).

use crate::support;

use std::time::Duration;

use chrono::TimeDelta;
use fleet::domain::state::{ErrorKind, Reading, State};
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet_redis::counting::Counting;
use support::*;

fn state_of(snapshot: &fleet::store::presence::Snapshot, n: &str) -> State {
    snapshot
        .benches
        .iter()
        .find(|b| b.name.as_str() == n)
        .unwrap_or_else(|| panic!("{n} not in snapshot"))
        .verdict(snapshot.now)
        .state
}

#[tokio::test]
async fn a_beat_reads_up_with_its_promise_and_the_servers_expiry() {
    let server = server();
    let p = presence(&server).await;
    let mut b = beat("bench-01", Duration::from_secs(30));
    b.load = Some(21.0);
    b.cores = Some(16);
    let receipt = p.beat(&b).await.unwrap();
    let snap = p.read(&[]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(row.name, "bench-01");
    assert_eq!(row.state, State::Up);
    assert_eq!(row.ttl_ms, Some(30_000));
    // What is left is the promise less the time since the server stamped the beat.
    let since = (snap.now - receipt.at).num_milliseconds();
    let left = i64::try_from(row.expires_in_ms.unwrap()).unwrap();
    assert!(
        (left - (30_000 - since)).abs() <= 1,
        "{left} left {since} ms after the beat"
    );
    assert_eq!((row.load, row.cores), (Some(21.0), Some(16)));
    // The write time is the server's: the read's TIME is not before it.
    assert!(snap.now >= receipt.at && snap.now - receipt.at < TimeDelta::seconds(5));
}

#[tokio::test]
async fn a_zero_ttl_beat_reads_down_at_once_and_still_registers() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("bench-01", Duration::from_secs(30)))
        .await
        .unwrap();
    p.beat(&beat("bench-01", Duration::ZERO)).await.unwrap();
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(snap.benches.len(), 1);
    assert_eq!(snap.benches[0].reading, Reading::Missing);
    assert_eq!(state_of(&snap, "bench-01"), State::Down);
}

#[tokio::test]
async fn a_hold_rides_the_key_and_reads_held() {
    let server = server();
    let p = presence(&server).await;
    let mut b = beat("bench-01", Duration::from_secs(3600));
    b.hold = Some(reason("sleeping"));
    let receipt = p.beat(&b).await.unwrap();
    assert_eq!(receipt.hold.as_deref(), Some("sleeping"));
    let snap = p.read(&[]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(
        (row.state, row.hold.as_deref()),
        (State::Held, Some("sleeping"))
    );
    assert_eq!(row.ttl_ms, Some(3_600_000));
}

// SPEC §2.2: the bench reads DOWN at its key's expiry, judged by the server's clock. Every read
// carries the server's time; each must agree with the deadline the server stamped on the beat.
#[tokio::test]
async fn a_bench_reads_down_exactly_at_its_keys_expiry_on_the_servers_clock() {
    let server = server();
    let p = presence(&server).await;
    // Long enough that a loaded machine still lands reads before the deadline.
    let ttl = Duration::from_secs(1);
    let receipt = p.beat(&beat("bench-01", ttl)).await.unwrap();
    let deadline = receipt.at + TimeDelta::from_std(ttl).unwrap();
    // No slack: the read takes TIME after the keys, so no read may disagree with the deadline.
    let slack = TimeDelta::zero();
    let (mut ups, mut downs) = (0, 0);
    bounded("the key to expire", async {
        loop {
            let snap = p.read(&[]).await.unwrap();
            let state = state_of(&snap, "bench-01");
            if snap.now < deadline - slack {
                assert_eq!(
                    state,
                    State::Up,
                    "read at {} before the deadline {deadline}",
                    snap.now
                );
                ups += 1;
            } else if snap.now >= deadline + slack {
                assert_eq!(
                    state,
                    State::Down,
                    "read at {} after the deadline {deadline}",
                    snap.now
                );
                downs += 1;
                if downs == 3 {
                    break;
                }
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(ups > 0, "no read landed before the deadline");
}

// SPEC §2.2 row 4: a key that is still there a second past the TTL it promised was written
// without PX; it reads DOWN with an error, never UP.
#[tokio::test]
async fn a_key_without_ttl_reads_down_with_an_error_never_up() {
    let server = server();
    let p = presence(&server).await;
    let keys = Keys::default();
    // A foreign writer sets a heartbeat-shaped value whose promise ended, with no TTL at all.
    let (secs, _): (i64, i64) = raw(&server, &["TIME"]).await;
    let stale = format!(r#"{{"v":1,"at":{},"ttl":5000}}"#, (secs - 60) * 1000);
    let _: () = raw(
        &server,
        &["SET", &keys.heartbeat(&name("bench-01")), &stale],
    )
    .await;
    let _: () = raw(&server, &["SADD", &keys.registry(), "bench-01"]).await;
    let snap = p.read(&[]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(row.state, State::Down);
    assert!(row.error.unwrap().contains("outlived its TTL"));
}

// A tool that rewrites a live beat without PX (the reference's immortal-key bug) gets exactly
// the life the beat promised, then DOWN with the error: the copy never extends the promise.
#[tokio::test]
async fn a_beat_rewritten_without_px_reads_down_at_its_promise_with_an_error() {
    let server = server();
    let p = presence(&server).await;
    // Long enough that the copy below lands before the key expires on a loaded machine.
    let receipt = p
        .beat(&beat("bench-01", Duration::from_secs(1)))
        .await
        .unwrap();
    let key = Keys::default().heartbeat(&name("bench-01"));
    let value: String = raw(&server, &["GET", &key]).await;
    let _: () = raw(&server, &["SET", &key, &value]).await;
    assert_eq!(
        raw::<i64>(&server, &["PTTL", &key]).await,
        -1,
        "the key is now immortal"
    );
    let deadline = receipt.at + TimeDelta::seconds(1);
    bounded("the promise and the grace to pass", async {
        loop {
            let snap = p.read(&[]).await.unwrap();
            let row = snap.benches[0].row(snap.now);
            if snap.now < deadline {
                assert_eq!(row.state, State::Up);
            } else if snap.now >= deadline {
                assert_eq!(row.state, State::Down, "at {}", snap.now);
            }
            if snap.now >= deadline + TimeDelta::milliseconds(1000) {
                assert!(row.error.unwrap().contains("outlived its TTL"));
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn garbage_values_read_down_with_an_error_and_lose_nothing() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("bench-01", Duration::from_secs(30)))
        .await
        .unwrap();
    let keys = Keys::default();
    for (n, value) in [
        ("bench-02", "garbage"),
        ("bench-03", "{\"v\":1}"),
        ("bench-04", "\u{1}\u{2}"),
    ] {
        let _: () = raw(
            &server,
            &["SET", &keys.heartbeat(&name(n)), value, "PX", "60000"],
        )
        .await;
        let _: () = raw(&server, &["SADD", &keys.registry(), n]).await;
    }
    let _: () = raw(&server, &["SADD", &keys.registry(), "Not A Name"]).await;
    let snap = p.read(&[]).await.unwrap();
    let names: Vec<&str> = snap.benches.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["bench-01", "bench-02", "bench-03", "bench-04"]);
    assert_eq!(snap.foreign, ["Not A Name"]);
    assert_eq!(
        state_of(&snap, "bench-01"),
        State::Up,
        "one bad key spoils no other row"
    );
    for b in &snap.benches[1..] {
        let row = b.row(snap.now);
        assert_eq!(row.state, State::Down, "{}", row.name);
        assert!(row.error.unwrap().contains("unreadable"), "{}", row.name);
    }
}

#[tokio::test]
async fn named_benches_that_never_beat_are_down_rows() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("bench-01", Duration::from_secs(30)))
        .await
        .unwrap();
    let snap = p
        .read(&[name("zz"), name("bench-01"), name("aa")])
        .await
        .unwrap();
    let rows: Vec<(String, State)> = snap
        .benches
        .iter()
        .map(|b| (b.name.to_string(), b.verdict(snap.now).state))
        .collect();
    assert_eq!(
        rows,
        [
            ("aa".into(), State::Down),
            ("bench-01".into(), State::Up),
            ("zz".into(), State::Down)
        ]
    );
}

// SPEC §2.4: the operator asks, the bench carries it on its own next beat, and HELD always
// means the bench itself said it.
#[tokio::test]
async fn a_hold_request_is_carried_by_the_next_beat_and_released_by_the_one_after() {
    let server = server();
    let p = presence(&server).await;
    let b = beat("bench-01", Duration::from_secs(30));
    p.beat(&b).await.unwrap();
    p.request_hold(&name("bench-01"), &reason("kernel upgrade"), None)
        .await
        .unwrap();

    let snap = p.read(&[]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(
        row.state,
        State::Up,
        "the request alone does not hold the bench"
    );
    assert_eq!(row.requested_hold.as_deref(), Some("kernel upgrade"));

    assert_eq!(
        p.beat(&b).await.unwrap().hold.as_deref(),
        Some("kernel upgrade")
    );
    let snap = p.read(&[]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    assert_eq!(
        (row.state, row.hold.as_deref()),
        (State::Held, Some("kernel upgrade"))
    );
    assert_eq!(row.requested_hold, None, "a carried request is the hold");

    assert!(p.release(&name("bench-01")).await.unwrap());
    assert!(
        !p.release(&name("bench-01")).await.unwrap(),
        "releasing twice finds nothing"
    );
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(
        state_of(&snap, "bench-01"),
        State::Held,
        "held until the bench beats again"
    );
    assert_eq!(p.beat(&b).await.unwrap().hold, None);
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(state_of(&snap, "bench-01"), State::Up);
}

#[tokio::test]
async fn an_explicit_hold_outranks_the_request_and_a_timed_request_lapses_on_the_server() {
    let server = server();
    let p = presence(&server).await;
    p.request_hold(
        &name("bench-01"),
        &reason("asked"),
        Some(Duration::from_secs(90)),
    )
    .await
    .unwrap();
    let mut b = beat("bench-01", Duration::from_secs(30));
    b.hold = Some(reason("mine"));
    assert_eq!(p.beat(&b).await.unwrap().hold.as_deref(), Some("mine"));
    let stored: String = raw(
        &server,
        &["HGET", &Keys::default().hold_requests(), "bench-01"],
    )
    .await;
    let stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    let until = stored["until"].as_i64().unwrap();
    let lapse = until - receipt_ms(&server).await;
    assert!(
        (85_000..=90_000).contains(&lapse),
        "the request lapses on the server's clock: {lapse}"
    );
    // A request also registers the bench, so it shows in `fleet state` before its first beat.
    p.request_hold(&name("bench-02"), &reason("asked"), None)
        .await
        .unwrap();
    let snap = p.read(&[]).await.unwrap();
    let row = snap
        .benches
        .iter()
        .find(|b| b.name.as_str() == "bench-02")
        .unwrap()
        .row(snap.now);
    assert_eq!(
        (row.state, row.requested_hold.as_deref()),
        (State::Down, Some("asked"))
    );
}

#[tokio::test]
async fn forget_removes_benches_from_the_registry_and_a_beat_registers_again() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("bench-01", Duration::from_secs(30)))
        .await
        .unwrap();
    p.beat(&beat("bench-02", Duration::from_secs(30)))
        .await
        .unwrap();
    p.request_hold(&name("bench-02"), &reason("x"), None)
        .await
        .unwrap();
    let removed = p.forget(&[name("bench-02"), name("nobody")]).await.unwrap();
    assert_eq!(removed, [true, false]);
    let snap = p.read(&[]).await.unwrap();
    let names: Vec<&str> = snap.benches.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["bench-01"]);
    let request: Option<String> = raw(
        &server,
        &["HGET", &Keys::default().hold_requests(), "bench-02"],
    )
    .await;
    assert_eq!(request, None, "a forgotten bench's request goes with it");
    p.beat(&beat("bench-02", Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(p.read(&[]).await.unwrap().benches.len(), 2);
}

// Every store call is one round trip, and the fleet read one or two whatever the fleet's size:
// one pipeline when the reader holds the registry, the listing and then that pipeline when it
// does not (SPEC §2.5).
#[tokio::test]
async fn every_store_call_is_one_round_trip_and_the_fleet_read_at_most_two_at_any_size() {
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let p = Presence::new(counting.clone(), Keys::default());
    let mut trips = counting.trips();
    let mut expect = |n: u64, what: &str| {
        let now = counting.trips();
        assert_eq!(now - trips, n, "{what}");
        trips = now;
    };
    p.read(&[]).await.unwrap();
    expect(2, "read of an empty fleet: the listing, then the pipeline");
    p.read(&[]).await.unwrap();
    expect(1, "read of an empty fleet, the registry held");
    p.beat(&beat("bench-00000", Duration::from_secs(30)))
        .await
        .unwrap();
    expect(
        2,
        "the first beat of a bench in this process: TIME, the key and the request, then the beat",
    );
    p.beat(&beat("bench-00000", Duration::from_secs(30)))
        .await
        .unwrap();
    expect(1, "every later beat");
    // A beat is no script (SPEC §7): a server that lost its scripts costs it nothing.
    let _: () = raw(&server, &["SCRIPT", "FLUSH"]).await;
    p.beat(&beat("bench-00000", Duration::from_secs(30)))
        .await
        .unwrap();
    expect(1, "a beat after the server lost its scripts");
    assert_eq!(command_calls(&server, "eval").await, 0);
    assert_eq!(command_calls(&server, "evalsha").await, 0);
    p.request_hold(
        &name("bench-00000"),
        &reason("x"),
        Some(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    expect(1, "hold request");
    p.release(&name("bench-00000")).await.unwrap();
    expect(1, "release");
    p.forget(&[name("bench-00000"), name("bench-00001")])
        .await
        .unwrap();
    expect(1, "forget of two");
    // 9 000 benches: beyond the read's EXISTS batches (250), and what the read script (gone) once
    // could not hold on its Lua stack (8 000).
    let n = 9_000;
    let seeding = Presence::new(conn(&server).await, Keys::default());
    let mut pending = Vec::new();
    for i in 0..n {
        let s = seeding.clone();
        pending.push(tokio::spawn(async move {
            s.beat(&beat(&format!("bench-{i:05}"), Duration::from_secs(600)))
                .await
        }));
    }
    for task in pending {
        task.await.unwrap().unwrap();
    }
    // The reader's registry is out of date: the pipeline sees the version move, the registry is
    // listed and read over.
    let snap = p.read(&[]).await.unwrap();
    expect(3, "read after the registry changed");
    assert_eq!(snap.benches.len(), n);
    assert!(
        snap.benches
            .iter()
            .all(|b| b.verdict(snap.now).state == State::Up)
    );
    let warm = p.read(&[]).await.unwrap();
    expect(1, "read of 9 000 benches with the registry held");
    assert_eq!(warm.benches, snap.benches, "both plans read the same fleet");
    let cold = Presence::new(counting.clone(), Keys::default())
        .read(&[])
        .await
        .unwrap();
    expect(2, "a fresh reader's read of 9 000 benches");
    assert_eq!(cold.benches, snap.benches);
    let named: Vec<_> = (0..n)
        .step_by(3)
        .map(|i| name(&format!("bench-{i:05}")))
        .collect();
    assert_eq!(p.read(&named).await.unwrap().benches.len(), named.len());
    expect(1, "read of 3 000 named benches");
    // A beat from a known bench does not move the version; a forget does.
    seeding
        .beat(&beat("bench-00001", Duration::from_secs(600)))
        .await
        .unwrap();
    p.read(&[]).await.unwrap();
    expect(1, "read after a known bench beat");
    seeding.forget(&[name("bench-00002")]).await.unwrap();
    assert_eq!(p.read(&[]).await.unwrap().benches.len(), n - 1);
    expect(3, "read after a forget");
}

/// A read of more benches than one piece of its pipeline holds (`PIECE`) goes in pieces, one
/// round trip each, and reads each bench where it is: the benches on either side of each edge
/// that beat read UP, every other DOWN (it never beat); the kept pieces read the same again.
#[tokio::test]
async fn a_read_larger_than_a_piece_goes_in_pieces_and_reads_every_bench_in_its_place() {
    use fleet::store::presence::PIECE;
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let p = Presence::new(counting.clone(), Keys::default());
    let n = 2 * PIECE + 1;
    let names: Vec<_> = (0..n).map(|i| name(&format!("bench-{i:05}"))).collect();
    let up = [0, PIECE - 1, PIECE, 2 * PIECE - 1, 2 * PIECE];
    for &i in &up {
        p.beat(&beat(names[i].as_str(), Duration::from_secs(600)))
            .await
            .unwrap();
    }
    let named = p.named(&names);
    let trips = counting.trips();
    let snap = p.read_named(&named).await.unwrap();
    assert_eq!(
        counting.trips() - trips,
        3,
        "three pieces, one round trip each"
    );
    let got: Vec<_> = snap.benches.iter().map(|b| b.name.clone()).collect();
    assert_eq!(got, names, "every bench, in name order");
    let states: Vec<(usize, State)> = (snap.benches.iter().enumerate())
        .map(|(i, b)| (i, b.verdict(snap.now).state))
        .filter(|(_, s)| *s != State::Down)
        .collect();
    assert_eq!(states, up.map(|i| (i, State::Up)).to_vec());
    let again = p.read_named(&named).await.unwrap();
    assert_eq!(
        again.benches, snap.benches,
        "the cached pieces read the same"
    );
    assert!(again.now >= snap.now);
}

/// A read through the counting connection: the snapshot, its round trips, and the `TYPE`
/// commands Redis ran for it.
async fn read_counted(
    p: &Presence<Counting<redis::aio::MultiplexedConnection>>,
    counting: &Counting<redis::aio::MultiplexedConnection>,
    server: &fleet_testing::RedisServer,
) -> (fleet::store::presence::Snapshot, u64, u64) {
    let (trips, types) = (counting.trips(), command_calls(server, "type").await);
    let snapshot = p.read(&[]).await.unwrap();
    let types = command_calls(server, "type").await - types;
    (snapshot, counting.trips() - trips, types)
}

// SPEC §2.5: every heartbeat is read bounded (`GETRANGE`), which answers a key of another type
// with an error of its own: a fleet that is up, or whose keys are missing, costs one round trip
// and asks no type; a key of another type reads DOWN in the read that meets it, with one round
// trip more to name its type; a value past the bound reads DOWN "value too large" and costs the
// reader no more than the bound.
#[tokio::test]
async fn a_key_of_another_type_or_too_large_reads_down_in_the_read_that_meets_it() {
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let p = Presence::new(counting.clone(), Keys::default());
    let n = 600;
    for i in 0..n {
        p.beat(&beat(&format!("bench-{i:03}"), Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    p.read(&[]).await.unwrap();
    let keys = Keys::default();
    let (gone, hashed, large) = (
        keys.heartbeat(&name("bench-100")),
        keys.heartbeat(&name("bench-500")),
        keys.heartbeat(&name("bench-300")),
    );
    let row = |snap: &fleet::store::presence::Snapshot, n: &str| {
        let bench = snap.benches.iter().find(|b| b.name.as_str() == n).unwrap();
        bench.row(snap.now)
    };
    let (snap, trips, types) = read_counted(&p, &counting, &server).await;
    assert_eq!((trips, types), (1, 0), "a fleet that is up");
    assert_eq!(snap.benches.len(), n);
    assert!(
        snap.benches
            .iter()
            .all(|b| b.verdict(snap.now).state == State::Up)
    );

    let _: () = raw(&server, &["DEL", &gone]).await;
    let (snap, trips, types) = read_counted(&p, &counting, &server).await;
    assert_eq!((trips, types), (1, 0), "a key missing");
    assert_eq!(row(&snap, "bench-100").state, State::Down);
    assert_eq!(
        row(&snap, "bench-100").error,
        None,
        "no key: down, no error"
    );

    let _: () = raw(&server, &["HSET", &gone, "f", "v"]).await;
    let _: () = raw(&server, &["DEL", &hashed]).await;
    let _: () = raw(&server, &["SADD", &hashed, "m"]).await;
    let (snap, trips, types) = read_counted(&p, &counting, &server).await;
    assert_eq!(
        (trips, types),
        (2, 2),
        "two keys of other types: their types asked"
    );
    for (bench, kind) in [("bench-100", "holds a hash"), ("bench-500", "holds a set")] {
        let r = row(&snap, bench);
        assert_eq!(r.state, State::Down, "{bench}");
        assert!(
            r.error.as_deref().is_some_and(|e| e.contains(kind)),
            "{bench}: {r:?}"
        );
    }

    // A value as large as a bench's user may write: read to the bound, not whole.
    let _: () = raw(&server, &["SET", &large, &"x".repeat(5_000_000)]).await;
    let before = command_calls(&server, "getrange").await;
    let (snap, trips, _) = read_counted(&p, &counting, &server).await;
    assert_eq!(trips, 2);
    assert_eq!(command_calls(&server, "getrange").await - before, n as u64);
    let r = row(&snap, "bench-300");
    assert_eq!(r.state, State::Down);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("value too large")),
        "{r:?}"
    );

    // All back: one round trip, no type asked.
    for (key, bench) in [
        (&gone, "bench-100"),
        (&hashed, "bench-500"),
        (&large, "bench-300"),
    ] {
        let _: () = raw(&server, &["DEL", key]).await;
        p.beat(&beat(bench, Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    let (snap, trips, types) = read_counted(&p, &counting, &server).await;
    assert_eq!((trips, types), (1, 0));
    assert!(
        snap.benches
            .iter()
            .all(|b| b.verdict(snap.now).state == State::Up)
    );
}

// A writer other than fleet that adds to the registry changes its size; the reader notices.
#[tokio::test]
async fn a_foreign_registry_member_is_noticed_by_a_reader_holding_the_registry() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("bench-01", Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(p.read(&[]).await.unwrap().benches.len(), 1);
    let _: () = raw(
        &server,
        &["SADD", &Keys::default().registry(), "bench-02", "Bad Name"],
    )
    .await;
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(snap.benches.len(), 2);
    assert_eq!(snap.foreign, ["Bad Name"]);
}

/// The server's time in ms.
async fn receipt_ms(server: &fleet_testing::RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = raw(server, &["TIME"]).await;
    secs * 1000 + micros / 1000
}

#[tokio::test]
async fn keys_live_under_the_prefix_and_one_hash_tag() {
    let server = server();
    let c = conn(&server).await;
    let p = Presence::new(c, Keys::new("team-a").unwrap());
    let mut b: Beat = beat("bench-01", Duration::from_secs(30));
    b.hold = None;
    p.beat(&b).await.unwrap();
    p.request_hold(&name("bench-01"), &reason("x"), None)
        .await
        .unwrap();
    let mut keys: Vec<String> = raw(&server, &["KEYS", "*"]).await;
    keys.sort();
    assert_eq!(
        keys,
        [
            "{team-a}:bench:bench-01",
            "{team-a}:benches",
            "{team-a}:holds",
            "{team-a}:joined:bench-01"
        ]
    );
    // Another prefix sees another fleet.
    let other = Presence::new(conn(&server).await, Keys::default());
    assert!(other.read(&[]).await.unwrap().benches.is_empty());
}

// SPEC §2.4: a request made `--for` a while lapses on the server's clock; the next beat carries
// no hold. A beat writes nothing shared, so the lapsed request stays, shown by no reader, until
// the next `fleet hold`, `release` or `forget` of the bench.
#[tokio::test]
async fn a_timed_hold_request_lapses_and_the_next_beat_carries_no_hold() {
    let server = server();
    let p = presence(&server).await;
    let b = beat("bench-01", Duration::from_secs(30));
    p.beat(&b).await.unwrap();
    p.request_hold(
        &name("bench-01"),
        &reason("short"),
        Some(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    assert_eq!(p.beat(&b).await.unwrap().hold.as_deref(), Some("short"));
    bounded("the request to lapse", async {
        loop {
            let snap = p.read(&[]).await.unwrap();
            let request = snap.benches[0].requested_hold.clone().unwrap();
            if !request.stands(snap.now) {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(p.beat(&b).await.unwrap().hold, None);
    let left: Option<String> = raw(
        &server,
        &["HGET", &Keys::default().hold_requests(), "bench-01"],
    )
    .await;
    assert!(
        left.is_some_and(|r| r.contains("short")),
        "the beat leaves the lapsed request"
    );
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(snap.benches[0].row(snap.now).requested_hold, None);
}

/// Writes `raw` as bench-01's hold request (a foreign writer), beats, and checks the beat carried
/// it exactly when the reader accepts it, and that the bench never reads DOWN for it.
async fn carried_by_the_readers_rule(
    server: &fleet_testing::RedisServer,
    p: &Presence<redis::aio::MultiplexedConnection>,
    raw_request: &[u8],
) {
    let mut c = conn(server).await;
    let _: () = redis::cmd("HSET")
        .arg(Keys::default().hold_requests())
        .arg("bench-01")
        .arg(raw_request)
        .query_async(&mut c)
        .await
        .unwrap();
    let receipt = p
        .beat(&beat("bench-01", Duration::from_secs(3600)))
        .await
        .unwrap();
    let accepted = fleet::store::presence::decode_request(raw_request);
    let snap = p.read(&[name("bench-01")]).await.unwrap();
    let row = snap.benches[0].row(snap.now);
    let shown = String::from_utf8_lossy(raw_request);
    match &accepted {
        Some(request) => {
            assert_eq!(row.state, State::Held, "{shown:?}: {row:?}");
            assert_eq!(
                row.hold.as_deref(),
                Some(request.reason.as_str()),
                "{shown:?}"
            );
            assert_eq!(receipt.refused_request, None, "{shown:?}");
        }
        None => {
            assert_eq!(
                row.state,
                State::Up,
                "{shown:?} made the bench read {row:?}"
            );
            assert_eq!(row.error, None, "{shown:?}");
            assert!(receipt.refused_request.is_some(), "{shown:?}: not reported");
        }
    }
}

// A hold request fleet's own reader refuses (here a 300-character reason written
// straight into the hash) was carried by the beat, which the reader then rejected whole: a
// running machine read DOWN. The beat and the reader now share one rule, tested on its edges.
#[tokio::test]
async fn a_hold_request_the_reader_refuses_is_not_carried_and_the_bench_stays_up() {
    let server = server();
    let p = presence(&server).await;
    let request = |reason: &str| serde_json::json!({ "reason": reason }).to_string();
    let mut cases: Vec<Vec<u8>> = [
        "upgrade".to_owned(),
        "x".repeat(256),
        "x".repeat(257),
        "x".repeat(300),
        "é".repeat(256),
        "é".repeat(257),
        "🚀 rack move".to_owned(),
        "a\tb".to_owned(),
        "a\u{85}b".to_owned(),
        "a\u{7f}b".to_owned(),
        "\u{a0}\u{3000} ".to_owned(),
        " ".to_owned(),
        String::new(),
        "line\u{2028}separator".to_owned(),
        " padded ".to_owned(),
    ]
    .iter()
    .map(|r| request(r).into_bytes())
    .collect();
    cases.extend(
        [
            &br#"{"reason":5}"#[..],
            b"nonsense",
            br#"{"reason":"x","until":"soon"}"#,
            br#"{"reason":"x","until":1.5}"#,
            br#"{"reason":"x","until":null}"#,
            br#"{"reason":"x","until":9000000000000000}"#,
            br#"{"reason":"x","until":99999999999999}"#,
            b"{\"reason\":\"\xff\xfe\"}",
            br#"{"reason":"\ud800"}"#,
            br#"{"reason":"a\u0000b"}"#,
            br#"{"reason":"x","until":9000000000000.0}"#,
            br#"{"reason":"x","until":9.5e12}"#,
            br#"{"reason":"x","reason":"held twice"}"#,
            br#"{"reason":"x","until":-9223372036854775808}"#,
            br#"{"reason":"x","until":8000000000000000}"#,
            br#"{"reason":"x","until":8000000000000001}"#,
        ]
        .map(<[u8]>::to_vec),
    );
    for raw_request in &cases {
        carried_by_the_readers_rule(&server, &p, raw_request).await;
    }
}

// The same rule over random reasons: characters drawn from ASCII, controls, white space and
// multi-byte ranges, lengths around the bound. Seeded (FLEET_HOLD_SEED).
#[tokio::test]
async fn random_hold_requests_are_carried_exactly_when_the_reader_accepts_them() {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("FLEET_HOLD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let server = server();
    let p = presence(&server).await;
    let pools: [&[char]; 4] = [
        &['a', 'Z', '0', '-', ' ', '.'],
        &['\t', '\n', '\u{0}', '\u{1b}', '\u{7f}', '\u{85}', '\u{9f}'],
        &[
            '\u{a0}', '\u{2000}', '\u{200a}', '\u{3000}', '\u{2028}', '\u{feff}',
        ],
        &['é', 'ß', '中', '🚀', '\u{10ffff}', '\u{e000}'],
    ];
    for _ in 0..300 {
        let len = *[0usize, 1, 2, 255, 256, 257, 40]
            .get(rng.random_range(0..7))
            .unwrap();
        let weights = [
            rng.random_range(0..10),
            rng.random_range(0..2),
            rng.random_range(0..4),
            rng.random_range(0..5),
        ];
        let reason: String = (0..len)
            .map(|_| {
                let total: u32 = weights.iter().sum::<u32>().max(1);
                let mut pick = rng.random_range(0..total);
                let pool = weights
                    .iter()
                    .position(|w| {
                        if pick < *w {
                            true
                        } else {
                            pick -= w;
                            false
                        }
                    })
                    .unwrap_or(0);
                pools[pool][rng.random_range(0..pools[pool].len())]
            })
            .collect();
        let raw_request = serde_json::json!({ "reason": reason }).to_string();
        carried_by_the_readers_rule(&server, &p, raw_request.as_bytes()).await;
    }
}

// Heartbeat values that cannot be true read DOWN with an error that says why: a key
// of another type (a hash: it read DOWN with no error at all), a beat written in the server's
// future (it read UP for 73 years), a TTL past the cap. A hold-request key of another type broke
// `fleet state` for every bench; now the rows are read and the problem names the key. Both read
// plans: cold (a fresh reader) and warm (the same reader again).
#[tokio::test]
async fn impossible_values_read_down_saying_why_and_a_corrupted_holds_key_spoils_nothing() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("good", Duration::from_secs(3600)))
        .await
        .unwrap();
    let keys = Keys::default();
    for name in ["hashy", "future", "forever"] {
        let _: () = raw(&server, &["SADD", &keys.registry(), name]).await;
    }
    let _: () = raw(&server, &["INCR", &keys.registry_version()]).await;
    let _: () = raw(
        &server,
        &["HSET", &keys.heartbeat(&name("hashy")), "f", "v"],
    )
    .await;
    let _: () = raw(
        &server,
        &[
            "SET",
            &keys.heartbeat(&name("future")),
            r#"{"v":1,"at":4102444800000,"ttl":30000}"#,
            "PX",
            "30000",
        ],
    )
    .await;
    let _: () = raw(
        &server,
        &[
            "SET",
            &keys.heartbeat(&name("forever")),
            r#"{"v":1,"at":1,"ttl":99999999999999}"#,
        ],
    )
    .await;
    let _: () = raw(&server, &["SET", &keys.hold_requests(), "garbage"]).await;
    let reader = presence(&server).await;
    for plan in ["cold", "warm"] {
        let snap = reader.read(&[]).await.unwrap();
        let row = |n: &str| {
            snap.benches
                .iter()
                .find(|b| b.name.as_str() == n)
                .unwrap()
                .row(snap.now)
        };
        assert_eq!(row("good").state, State::Up, "{plan}");
        for (n, why, kind) in [
            ("hashy", "holds a hash", ErrorKind::WrongType),
            ("future", "future", ErrorKind::Future),
            (
                "forever",
                "ttl 99999999999999 is out of its range",
                ErrorKind::Unreadable,
            ),
        ] {
            let r = row(n);
            assert_eq!(r.state, State::Down, "{plan} {n}");
            assert_eq!(r.error_kind, Some(kind), "{plan} {n}");
            assert!(
                r.error.as_deref().is_some_and(|e| e.contains(why)),
                "{plan} {n}: {r:?}"
            );
        }
        assert_eq!(snap.problems.len(), 1, "{plan}: {:?}", snap.problems);
        assert!(snap.problems[0].contains("{fleet}:holds"), "{plan}");
    }
    // The same rows by name.
    let snap = reader.read(&[name("hashy"), name("good")]).await.unwrap();
    assert!(
        snap.benches[1]
            .row(snap.now)
            .error
            .is_some_and(|e| e.contains("holds a hash"))
    );
    assert_eq!(snap.problems.len(), 1);
}

fn names_of(snapshot: &fleet::store::presence::Snapshot) -> Vec<&str> {
    snapshot.benches.iter().map(|b| b.name.as_str()).collect()
}

// SPEC §2.3, §2.5: the join set is what agents of the previous release add their names to, and
// any bench's user could under that release's ACL file, so a name there counts only with its own
// join key, which only that bench writes. A reader holding the registry notices when such a name
// gets its key, though the set's size does not move then: its pipeline asks, and the cold read
// follows once. A cold read lists the join set in a round trip of its own, and when it finds a
// name without its key asks which (one more) and leaves it out.
#[tokio::test]
async fn a_name_in_the_join_set_counts_only_once_its_own_bench_beats_and_a_warm_reader_sees_it() {
    let server = server();
    let keys = Keys::default();
    let counting = Counting::new(conn(&server).await);
    let p = Presence::new(counting.clone(), keys.clone());
    let mut old = conn(&server).await;
    previous_beat(&mut old, &keys, "bench-01", 30_000)
        .await
        .unwrap();
    // Another bench's user of the previous release adds bench-02.
    let _: () = raw(&server, &["SADD", &keys.joined(), "bench-02"]).await;
    let trips = counting.trips();
    assert_eq!(names_of(&p.read(&[]).await.unwrap()), ["bench-01"]);
    assert_eq!(
        counting.trips() - trips,
        4,
        "a cold read: the listing, the join set, the pipeline, and which candidate has no join key"
    );
    let trips = counting.trips();
    assert_eq!(names_of(&p.read(&[]).await.unwrap()), ["bench-01"]);
    assert_eq!(counting.trips() - trips, 1, "a warm read");
    assert!(
        !p.request_hold_known(&name("bench-02"), &reason("x"), None)
            .await
            .unwrap(),
        "a name without its join key is not registered"
    );
    // bench-02 beats, as an agent of the previous release: the set's size stays, its join key
    // appears.
    previous_beat(&mut old, &keys, "bench-02", 30_000)
        .await
        .unwrap();
    let trips = counting.trips();
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(names_of(&snap), ["bench-01", "bench-02"]);
    assert_eq!(state_of(&snap, "bench-02"), State::Up);
    assert_eq!(
        counting.trips() - trips,
        4,
        "the pipeline saw it, the registry and the join set were listed and read over"
    );
    // Forgotten: out of the join set with its join key, and out of every reader.
    let writer = presence(&server).await;
    assert_eq!(
        writer
            .forget(&[name("bench-02"), name("bench-03")])
            .await
            .unwrap(),
        [true, false]
    );
    assert_eq!(names_of(&p.read(&[]).await.unwrap()), ["bench-01"]);
    let joined: Vec<String> = raw(&server, &["SMEMBERS", &keys.joined()]).await;
    assert_eq!(joined, ["bench-01"]);
    let key: Option<String> = raw(&server, &["GET", &keys.joined_key(&name("bench-02"))]).await;
    assert_eq!(key, None);
}

// The version-skew policy (README, "Running the agent as a service"): this release reads the
// beats of the previous release's agents as it reads its own, hold, TTL, load and cores alike.
#[tokio::test]
async fn a_beat_of_the_previous_release_reads_as_a_beat_of_this_one() {
    let server = server();
    let keys = Keys::default();
    let mut old = conn(&server).await;
    previous_beat_with(
        &mut old,
        &keys,
        "bench-01",
        45_000,
        ["patching", "3.5", "12"],
    )
    .await
    .unwrap();
    previous_beat(&mut old, &keys, "bench-02", 45_000)
        .await
        .unwrap();
    let p = presence(&server).await;
    p.beat(&beat("bench-03", Duration::from_secs(45)))
        .await
        .unwrap();
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(names_of(&snap), ["bench-01", "bench-02", "bench-03"]);
    let rows: Vec<_> = snap.benches.iter().map(|b| b.row(snap.now)).collect();
    assert_eq!(rows[0].state, State::Held);
    assert_eq!(rows[0].hold.as_deref(), Some("patching"));
    assert_eq!((rows[0].load, rows[0].cores), (Some(3.5), Some(12)));
    for row in &rows {
        assert_eq!(row.ttl_ms, Some(45_000), "{}", row.name);
        assert_eq!(row.error, None, "{}", row.name);
    }
    assert_eq!((rows[1].state, rows[2].state), (State::Up, State::Up));
}

// SPEC §2.5, §7: a join set past its bound is not read at all. A million names (what one bench
// of the previous ACL file could add in seconds) cost a read one `SCARD`: the registry proper is
// read, as fast as without them, and the snapshot names the key and its repair.
#[tokio::test]
async fn a_flooded_join_set_is_not_read_and_is_named() {
    let server = server();
    let keys = Keys::default();
    let p = presence(&server).await;
    for i in 0..10 {
        p.beat(&beat(&format!("bench-{i:02}"), Duration::from_secs(60)))
            .await
            .unwrap();
    }
    let _: () = raw(&server, &["SADD", &keys.joined(), "bench-00"]).await;
    // 1 025 ghost names: one past the bound of a registry of 10.
    let mut flood = vec!["SADD".to_owned(), keys.joined()];
    flood.extend((0..1_025).map(|i| format!("ghost-{i:07}")));
    let args: Vec<&str> = flood.iter().map(String::as_str).collect();
    let _: i64 = raw(&server, &args).await;
    let counting = Counting::new(conn(&server).await);
    let reader = Presence::new(counting.clone(), keys.clone());
    let before = command_calls(&server, "smembers").await;
    let snap = reader.read(&[]).await.unwrap();
    assert_eq!(snap.benches.len(), 10);
    assert_eq!(
        counting.trips(),
        2,
        "the listing and the pipeline: the join set is not listed"
    );
    assert_eq!(
        command_calls(&server, "smembers").await - before,
        1,
        "the registry proper alone"
    );
    assert_eq!(snap.problems.len(), 1, "{:?}", snap.problems);
    assert!(
        snap.problems[0].contains("{fleet}:joined holds 1026 names")
            && snap.problems[0].contains("fleet acl"),
        "{}",
        snap.problems[0]
    );
    // Growing further does not make every read cold: the copy is judged by "over".
    let _: i64 = raw(&server, &["SADD", &keys.joined(), "ghost-x"]).await;
    let trips = counting.trips();
    let warm = reader.read(&[]).await.unwrap();
    assert_eq!(counting.trips() - trips, 1);
    assert_eq!(warm.problems, snap.problems);
}

// SPEC §2.3: a TTL of 0 registers a bench that never beat, with no last-seen time; a later beat
// with a TTL sets it, and a TTL of 0 after it keeps it.
#[tokio::test]
async fn a_join_key_holds_the_last_counting_beat_and_a_ttl_of_zero_keeps_it() {
    let server = server();
    let p = presence(&server).await;
    p.beat(&beat("bench-01", Duration::ZERO)).await.unwrap();
    assert_eq!(names_of(&p.read(&[]).await.unwrap()), ["bench-01"]);
    assert_eq!(p.last_seen(&[name("bench-01")]).await.unwrap().at, [None]);
    let counted = p
        .beat(&beat("bench-01", Duration::from_secs(30)))
        .await
        .unwrap();
    p.beat(&beat("bench-01", Duration::ZERO)).await.unwrap();
    assert_eq!(
        p.last_seen(&[name("bench-01"), name("bench-02")])
            .await
            .unwrap()
            .at,
        [Some(counted.at), None]
    );
}

// SPEC §2.3 item 3, §2.5: a join key or the last-seen record of another type (a foreign write)
// costs only the LAST SEEN it held, named with its repair; every other time is read, in the one
// round trip, and the fleet read is not touched.
#[tokio::test]
async fn a_join_key_or_last_seen_record_of_another_type_costs_only_its_own_time() {
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let p = Presence::new(counting.clone(), Keys::default());
    let keys = Keys::default();
    let mut at = Vec::new();
    for bench in ["bench-01", "bench-02", "bench-03"] {
        at.push(
            p.beat(&beat(bench, Duration::from_secs(30)))
                .await
                .unwrap()
                .at,
        );
    }
    let all = [name("bench-01"), name("bench-02"), name("bench-03")];
    let read = p.last_seen(&all).await.unwrap();
    assert_eq!(read.at, at.iter().copied().map(Some).collect::<Vec<_>>());
    assert!(read.problems.is_empty(), "{:?}", read.problems);

    // A last-seen time that is no number is no time; the join key's counts.
    let _: () = raw(&server, &["HSET", &keys.last_seen(), "bench-01", "garbage"]).await;
    let read = p.last_seen(&all).await.unwrap();
    assert_eq!(read.at, at.iter().copied().map(Some).collect::<Vec<_>>());
    assert!(read.problems.is_empty(), "{:?}", read.problems);

    let _: () = raw(&server, &["DEL", &keys.last_seen()]).await;
    let hashed = keys.joined_key(&name("bench-02"));
    let _: () = raw(&server, &["DEL", &hashed]).await;
    let _: () = raw(&server, &["HSET", &hashed, "f", "v"]).await;
    let _: () = raw(&server, &["RPUSH", &keys.last_seen(), "x"]).await;
    let trips = counting.trips();
    let read = p.last_seen(&all).await.unwrap();
    assert_eq!(counting.trips() - trips, 1, "still one round trip");
    assert_eq!(read.at, [Some(at[0]), None, Some(at[2])]);
    assert_eq!(read.problems.len(), 2, "{:?}", read.problems);
    assert!(
        read.problems[0].contains("{fleet}:seen is not a hash")
            && read.problems[0].contains("redis-cli DEL '{fleet}:seen'"),
        "{}",
        read.problems[0]
    );
    assert!(
        read.problems[1].contains("{fleet}:joined:bench-02 is not the join key of bench-02")
            && read.problems[1].contains("redis-cli DEL '{fleet}:joined:bench-02'"),
        "{}",
        read.problems[1]
    );
    // The fleet read does not meet the join key: every bench reads as its heartbeat says.
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(names_of(&snap), ["bench-01", "bench-02", "bench-03"]);
    assert_eq!(state_of(&snap, "bench-02"), State::Up);
}

/// A connection under which the registry changes before every call it sends: a bench is
/// registered (its name in the registry and its join key) through `side`. Counts the benches
/// registered in `joined`.
fn churning(
    inner: redis::aio::MultiplexedConnection,
    side: redis::aio::MultiplexedConnection,
    joined: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Meddled {
    Meddled::new(inner, move |_| {
        let (mut side, joined) = (side.clone(), joined.clone());
        Some(Box::pin(async move {
            let keys = Keys::default();
            let i = joined.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let bench = name(&format!("churn-{i:03}"));
            let _: () = redis::pipe()
                .sadd(keys.registry(), bench.as_str())
                .set(keys.joined_key(&bench), 0)
                .query_async(&mut side)
                .await
                .unwrap();
        }))
    })
}

// SPEC §2.5: the cold read lists the registry and reads over the listing; a registry that changes
// between the two every time is listed at most three times, and then the last read stands: every
// bench the third listing named is read, and no script runs (SPEC §7).
#[tokio::test]
async fn a_cold_read_under_a_registry_that_keeps_changing_keeps_its_third_listing() {
    let server = server();
    let seeding = presence(&server).await;
    for i in 0..3 {
        seeding
            .beat(&beat(&format!("bench-{i:02}"), Duration::from_secs(30)))
            .await
            .unwrap();
    }
    let joined = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let churning = churning(conn(&server).await, conn(&server).await, joined.clone());
    let snap = Presence::new(churning, Keys::default())
        .read(&[])
        .await
        .unwrap();
    assert_eq!(command_calls(&server, "eval_ro").await, 0);
    assert_eq!(command_calls(&server, "eval").await, 0);
    // Three listings and three reads over them: six calls, a bench registered before each; the
    // third listing, the fifth call, named the first five of them.
    assert_eq!(joined.load(std::sync::atomic::Ordering::Relaxed), 6);
    let mut expected: Vec<String> = (0..3).map(|i| format!("bench-{i:02}")).collect();
    expected.extend((0..5).map(|i| format!("churn-{i:03}")));
    expected.sort();
    assert_eq!(names_of(&snap), expected);
    assert_eq!(state_of(&snap, "bench-01"), State::Up);
    assert_eq!(state_of(&snap, "churn-000"), State::Down);
}

// SPEC §2.3, §2.5: a name of the join set counts while its join key or its heartbeat exists. A
// cold read proves an up bench by the heartbeat it reads anyway, and asks for the join keys of the
// down ones only (one round trip more, only when there is one). A forgotten bench's heartbeat
// goes with it, so a name put back in the join set by another bench's user counts again only once
// its own bench beats.
#[tokio::test]
async fn a_cold_read_proves_up_benches_by_their_heartbeat_and_down_ones_by_their_join_key() {
    let server = server();
    let keys = Keys::default();
    let counting = Counting::new(conn(&server).await);
    let writer = presence(&server).await;
    let mut old = conn(&server).await;
    let cold_read = || async {
        let trips = counting.trips();
        let snap = Presence::new(counting.clone(), keys.clone())
            .read(&[])
            .await
            .unwrap();
        (snap, counting.trips() - trips)
    };
    previous_beat(&mut old, &keys, "bench-01", 30_000)
        .await
        .unwrap();
    previous_beat(&mut old, &keys, "bench-02", 0).await.unwrap();
    let (snap, trips) = cold_read().await;
    assert_eq!(names_of(&snap), ["bench-01", "bench-02"]);
    assert_eq!(state_of(&snap, "bench-02"), State::Down);
    assert_eq!(trips, 4, "bench-02 is down: its join key was asked for");
    previous_beat(&mut old, &keys, "bench-02", 30_000)
        .await
        .unwrap();
    let (snap, trips) = cold_read().await;
    assert_eq!(names_of(&snap), ["bench-01", "bench-02"]);
    assert_eq!(trips, 3, "every bench up: proved by its heartbeat");

    writer.forget(&[name("bench-01")]).await.unwrap();
    let heartbeat: Option<String> =
        raw(&server, &["GET", &keys.heartbeat(&name("bench-01"))]).await;
    assert_eq!(heartbeat, None, "the heartbeat goes with the join key");
    let _: () = raw(&server, &["SADD", &keys.joined(), "bench-01"]).await;
    let (snap, _) = cold_read().await;
    assert_eq!(names_of(&snap), ["bench-02"]);
    let named = writer.read(&[name("bench-01")]).await.unwrap();
    assert_eq!(named.benches[0].reading, Reading::Missing);
    previous_beat(&mut old, &keys, "bench-01", 30_000)
        .await
        .unwrap();
    let (snap, _) = cold_read().await;
    assert_eq!(names_of(&snap), ["bench-01", "bench-02"]);
}

// docs/protocol.md §4.1: a join-set name counts while `EXISTS` finds either of its keys, an empty
// heartbeat (which reads as no key) too; a reader holding the registry that left a name out sees
// either key appear.
#[tokio::test]
async fn a_join_set_name_counts_by_either_key_an_empty_heartbeat_too() {
    let server = server();
    let keys = Keys::default();
    let p = presence(&server).await;
    let mut old = conn(&server).await;
    previous_beat(&mut old, &keys, "bench-01", 30_000)
        .await
        .unwrap();
    let _: () = raw(&server, &["SADD", &keys.joined(), "bench-02", "bench-03"]).await;
    let _: () = raw(&server, &["SET", &keys.heartbeat(&name("bench-02")), ""]).await;
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(names_of(&snap), ["bench-01", "bench-02"]);
    assert_eq!(snap.benches[1].reading, Reading::Missing);
    assert_eq!(state_of(&snap, "bench-02"), State::Down);
    // bench-03 was left out; its heartbeat appearing, without a join key, brings it in.
    let _: () = raw(&server, &["SET", &keys.heartbeat(&name("bench-03")), ""]).await;
    assert_eq!(
        names_of(&p.read(&[]).await.unwrap()),
        ["bench-01", "bench-02", "bench-03"]
    );
}
