//! The claim store against a real redis-server (SPEC §4.3): one live claim per slot under
//! concurrent writers, compare-and-set moves, digests, timelines, slot statuses.

use crate::support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use fleet::domain::claim::{Claim, Move, Phase, Reason, Timings};
use fleet::domain::law::{Power, Report};
use fleet::domain::name::{BenchName, ClaimName, GroupName};
use fleet::store::claims::{ClaimStore, Created, Entry, Event, SlotStatus};
use fleet::store::keys::Keys;
use fleet_redis::counting::Counting;
use support::*;

fn group() -> GroupName {
    GroupName::parse("pool-a").unwrap()
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn new_claim(name: &str, slot: &str, seed: &fleet::store::claims::Seed) -> Claim {
    Claim::new(
        ClaimName::parse(name).unwrap(),
        BenchName::parse(slot).unwrap(),
        group(),
        seed.last.as_ref(),
        now(),
        &Timings::default(),
        None,
    )
}

async fn store(
    server: &fleet_testing::RedisServer,
) -> ClaimStore<redis::aio::MultiplexedConnection> {
    ClaimStore::new(conn(server).await, Keys::default())
}

#[tokio::test]
async fn a_claim_is_created_read_back_and_a_second_live_claim_on_its_slot_is_refused() {
    let server = server();
    let s = store(&server).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    assert_eq!(seed.last, None);
    let a = new_claim("bench-01-a", "bench-01", &seed);
    assert_eq!(s.create(&a, &seed).await.unwrap(), Created::Created);
    let b = new_claim("bench-01-b", "bench-01", &seed);
    assert_eq!(
        s.create(&b, &seed).await.unwrap(),
        Created::SlotTaken(ClaimName::parse("bench-01-a").unwrap())
    );
    assert_eq!(
        s.create(&a, &seed).await.unwrap(),
        Created::SlotTaken(a.name.clone())
    );
    let other = new_claim("bench-01-a", "bench-02", &seed);
    assert_eq!(s.create(&other, &seed).await.unwrap(), Created::NameTaken);
    let read = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(*read[0].claims, vec![a.clone()]);
    let timeline = s.timeline(&group(), &a.name).await.unwrap();
    assert_eq!(timeline.len(), 1);
    assert_eq!(
        (timeline[0].event, timeline[0].phase),
        (Event::Created, Phase::Pending)
    );
}

// SPEC §4.3: one live claim per slot, airtight under concurrent writers with no lock.
#[tokio::test]
async fn fifty_racing_creators_leave_exactly_one_live_claim() {
    let server = server();
    let s = store(&server).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (s, seed) = (s.clone(), seed.clone());
        tasks.push(tokio::spawn(async move {
            let c = new_claim(&format!("bench-01-{i}"), "bench-01", &seed);
            s.create(&c, &seed).await.unwrap()
        }));
    }
    let mut created = 0;
    for t in tasks {
        if bounded("create", t).await.unwrap() == Created::Created {
            created += 1;
        }
    }
    assert_eq!(created, 1);
    let read = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(
        read[0].claims.iter().filter(|c| c.phase.is_live()).count(),
        1
    );
}

#[tokio::test]
async fn a_move_is_a_compare_and_set_and_a_stale_writer_writes_nothing() {
    let server = server();
    let s = store(&server).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    s.create(&a, &seed).await.unwrap();
    let booting = a.apply(Move::to(Phase::Booting), now()).unwrap();
    let entry = Entry::of(&booting, Event::Booting, now());
    assert!(s.write(&a, &booting, Some(&entry)).await.unwrap());
    // A second writer that read the claim before the move loses, and writes nothing.
    let failed = a
        .apply(
            Move::because(Phase::Failed, Reason::DeadlineExceeded),
            now(),
        )
        .unwrap();
    assert!(
        !s.write(&a, &failed, Some(&Entry::of(&failed, Event::Failed, now())))
            .await
            .unwrap()
    );
    let read = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(*read[0].claims, vec![booting.clone()]);
    assert_eq!(
        s.timeline(&group(), &a.name).await.unwrap().len(),
        2,
        "no entry for a refused write"
    );
}

#[tokio::test]
async fn a_terminal_move_frees_the_slot_and_keeps_the_digest_that_seeds_the_next_attempt() {
    let server = server();
    let s = store(&server).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    s.create(&a, &seed).await.unwrap();
    let failed = a
        .apply(
            Move::because(Phase::Failed, Reason::StartupJobFailed),
            now(),
        )
        .unwrap();
    assert!(s.write(&a, &failed, None).await.unwrap());
    let seed2 = s.seed(&group(), &name("bench-01")).await.unwrap();
    let digest = seed2.last.clone().unwrap();
    assert_eq!(
        (digest.phase, digest.attempt, digest.reason),
        (Phase::Failed, 1, Some(Reason::StartupJobFailed))
    );
    // A creator holding the old seed is told the digest moved.
    let stale = new_claim("bench-01-b", "bench-01", &seed);
    assert_eq!(s.create(&stale, &seed).await.unwrap(), Created::SeedMoved);
    let b = new_claim("bench-01-b", "bench-01", &seed2);
    assert_eq!(b.attempt, 2);
    assert_eq!(s.create(&b, &seed2).await.unwrap(), Created::Created);
    // The terminal claim is kept until collected; then its digest stays.
    assert!(
        s.delete(&failed, None, Duration::from_secs(60))
            .await
            .unwrap()
    );
    let read = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(*read[0].claims, vec![b]);
    assert_eq!(
        s.seed(&group(), &name("bench-01")).await.unwrap().last,
        Some(digest)
    );
}

#[tokio::test]
async fn cancelling_a_pending_claim_deletes_it_and_its_timeline_expires() {
    let server = server();
    let s = store(&server).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    s.create(&a, &seed).await.unwrap();
    let entry = Entry::of(&a, Event::Cancelled, now());
    assert!(
        s.delete(&a, Some(&entry), Duration::from_secs(3600))
            .await
            .unwrap()
    );
    assert!(
        s.read_groups(&[group()]).await.unwrap()[0]
            .claims
            .is_empty()
    );
    let key = Keys::default().group(&group()).timeline(&a.name);
    let ttl: i64 = raw(&server, &["PTTL", &key]).await;
    assert!((3_590_000..=3_600_000).contains(&ttl), "{ttl}");
    let events: Vec<Event> = s
        .timeline(&group(), &a.name)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(events, [Event::Created, Event::Cancelled]);
    // The slot is free again, and a cancelled pending claim spent no attempt.
    let b = new_claim("bench-01-b", "bench-01", &seed);
    assert_eq!(s.create(&b, &seed).await.unwrap(), Created::Created);
    assert_eq!(b.attempt, 1);
    // A second delete of the same claim finds nothing.
    assert!(!s.delete(&a, None, Duration::from_secs(1)).await.unwrap());
}

#[tokio::test]
async fn garbage_in_a_claim_key_is_reported_and_a_foreign_pointer_does_not_block_the_slot() {
    let server = server();
    let s = store(&server).await;
    let g = Keys::default().group(&group());
    let _: () = raw(
        &server,
        &[
            "SET",
            &g.claim(&ClaimName::parse("junk").unwrap()),
            "not json",
        ],
    )
    .await;
    let _: () = raw(&server, &["ZADD", &g.claims(), "1", "junk"]).await;
    let _: () = raw(&server, &["SET", &g.live(&name("bench-01")), "ghost"]).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    assert_eq!(
        s.create(&a, &seed).await.unwrap(),
        Created::Created,
        "a pointer to no claim is stale"
    );
    let read = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(*read[0].claims, vec![a]);
    assert_eq!(read[0].unreadable.len(), 1);
    assert_eq!(read[0].unreadable[0].0, "junk");
}

// SPEC §4.3: a group's claims are one round trip, one group after another, so that Redis serves
// the beats between the groups' scripts.
#[tokio::test]
async fn each_group_is_read_in_one_round_trip_and_slot_statuses_round_trip() {
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    let groups = [
        group(),
        GroupName::parse("pool-b").unwrap(),
        GroupName::parse("pool-c").unwrap(),
    ];
    let before = counting.trips();
    let read = s.read_groups(&groups).await.unwrap();
    assert_eq!(counting.trips() - before, 3);
    assert_eq!(read.len(), 3);
    let mut status = SlotStatus {
        power: Some(Power::On),
        usable: true,
        ..SlotStatus::default()
    };
    status.history.record(Report::Ready, now());
    s.write_slots(&group(), &[(name("bench-01"), status.clone())])
        .await
        .unwrap();
    let before = counting.trips();
    let slots = s
        .read_slots(&group(), &[name("bench-01"), name("bench-02")])
        .await
        .unwrap();
    assert_eq!(counting.trips() - before, 1);
    assert_eq!(slots, vec![(Some(status), None), (None, None)]);
}

// SPEC §5.7: a group's slot records are read and written in commands of `KEYS_PER_COMMAND`
// keys at most, all in one round trip, and come back whole and in order across the chunks.
#[tokio::test]
async fn a_large_groups_slot_records_go_in_short_commands_in_one_round_trip() {
    use fleet::store::KEYS_PER_COMMAND;
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    // Two whole chunks and part of a third.
    let n = 2 * KEYS_PER_COMMAND + 17;
    let slots: Vec<BenchName> = (0..n).map(|i| name(&format!("bench-{i:04}"))).collect();
    let statuses = statuses_of(&slots);
    let (evals, evalshas) = (
        command_calls(&server, "eval").await,
        command_calls(&server, "evalsha").await,
    );
    let before = counting.trips();
    s.write_slots(&group(), &statuses).await.unwrap();
    assert_eq!(counting.trips() - before, 1, "one round trip");
    assert_eq!(
        command_calls(&server, "eval").await + command_calls(&server, "evalsha").await
            - evals
            - evalshas,
        3,
        "three scripts of at most {KEYS_PER_COMMAND} statuses"
    );
    let mgets = command_calls(&server, "mget").await;
    let before = counting.trips();
    let read = s.read_slots(&group(), &slots).await.unwrap();
    assert_eq!(counting.trips() - before, 1, "one round trip");
    assert_eq!(
        command_calls(&server, "mget").await - mgets,
        6,
        "3 of statuses, 3 of digests"
    );
    let expected: Vec<_> = statuses
        .iter()
        .map(|(_, st)| (Some(st.clone()), None))
        .collect();
    assert_eq!(read, expected);
    let views = s
        .read_views(&[
            (group(), slots.clone()),
            (GroupName::parse("pool-b").unwrap(), vec![]),
        ])
        .await
        .unwrap();
    assert_eq!(views[0].slots, expected);
    assert!(views[1].slots.is_empty());
    let seeds = s.seeds(&group(), &slots).await.unwrap();
    assert_eq!(seeds.len(), n);
    assert!(seeds.iter().all(|seed| seed.last.is_none()));
    // A fence raised past the writer refuses every chunk's write, and the call says so.
    assert!(s.raise_fence(&group(), "100").await.unwrap());
    let stale = s.fenced("99");
    assert!(matches!(
        stale.write_slots(&group(), &statuses).await,
        Err(fleet::store::claims::ClaimStoreError::Fenced { .. })
    ));
}

/// A status for each slot, on and off in turn, every third usable.
fn statuses_of(slots: &[BenchName]) -> Vec<(BenchName, SlotStatus)> {
    slots
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            let status = SlotStatus {
                power: Some(if i % 2 == 0 { Power::On } else { Power::Off }),
                usable: i % 3 == 0,
                ..SlotStatus::default()
            };
            (slot.clone(), status)
        })
        .collect()
}

// A write larger than a piece goes as pieces of at most `PIECE_BYTES`, in flight
// together (a connection's buffer keeps the size of the largest message it sent), and every
// status lands, in order, the script sent whole once.
#[tokio::test]
async fn a_write_larger_than_a_piece_goes_in_pieces_and_every_status_lands() {
    use fleet::store::{KEYS_PER_COMMAND, PIECE_BYTES};
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    let n: usize = 12_000;
    let slots: Vec<BenchName> = (0..n).map(|i| name(&format!("bench-{i:05}"))).collect();
    let statuses = statuses_of(&slots);
    let bytes: usize = statuses
        .iter()
        .map(|(slot, st)| {
            serde_json::to_string(st).unwrap().len()
                + Keys::default().group(&group()).slot(slot).len()
        })
        .sum();
    assert!(
        bytes > PIECE_BYTES,
        "{bytes} bytes make more than one piece"
    );
    let evals = command_calls(&server, "eval").await;
    let before = counting.trips();
    s.write_slots(&group(), &statuses).await.unwrap();
    let trips = counting.trips() - before;
    let scripts = n.div_ceil(KEYS_PER_COMMAND) as u64;
    assert!(
        (2..scripts).contains(&trips),
        "{trips} pieces for {bytes} bytes in {scripts} scripts"
    );
    assert_eq!(
        command_calls(&server, "eval").await - evals,
        1,
        "the first script whole, every other by hash"
    );
    let read = s.read_slots(&group(), &slots).await.unwrap();
    let expected: Vec<_> = statuses
        .iter()
        .map(|(_, st)| (Some(st.clone()), None))
        .collect();
    assert_eq!(read, expected);
}

// A new leader reads its statuses `STATUS_PIECE` slots a round trip, each given in
// its place on both sides of a piece's edge; a slot without a status, or whose value does not
// decode, gives none.
#[tokio::test]
async fn statuses_are_read_a_piece_a_round_trip_each_in_its_place() {
    use fleet::store::slots::STATUS_PIECE;
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    let n = STATUS_PIECE + 2;
    let slots: Vec<BenchName> = (0..n).map(|i| name(&format!("bench-{i:05}"))).collect();
    // Every slot's status but the last's, then slot 5's overwritten with garbage.
    let mut statuses = statuses_of(&slots[..n - 1]);
    s.write_slots(&group(), &statuses).await.unwrap();
    let garbage = Keys::default().group(&group()).slot(&slots[5]);
    let () = redis::cmd("SET")
        .arg(&garbage)
        .arg("{not a status")
        .query_async(&mut conn(&server).await)
        .await
        .unwrap();
    statuses.remove(5);
    let slots: Vec<&BenchName> = slots.iter().collect();
    let mut read = Vec::new();
    let before = counting.trips();
    s.read_statuses(&group(), &slots, |slot, status| {
        read.push((slot.clone(), status))
    })
    .await
    .unwrap();
    assert_eq!(counting.trips() - before, 2, "two pieces");
    assert_eq!(read.len(), n - 2);
    assert_eq!(read, statuses);
}

// SPEC §4.3: with `appendonly yes`, claims, slot statuses, digests and timelines survive a
// restart of Redis.
#[tokio::test]
async fn claims_survive_a_redis_restart_with_aof() {
    let mut server = fleet_testing::RedisServer::with(fleet_testing::Options {
        aof: true,
        ..Default::default()
    })
    .unwrap();
    let s = store(&server).await;
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    s.create(&a, &seed).await.unwrap();
    let failed = a
        .apply(
            Move::because(Phase::Failed, Reason::StartupJobFailed),
            now(),
        )
        .unwrap();
    s.write(&a, &failed, None).await.unwrap();
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let b = new_claim("bench-01-b", "bench-01", &seed);
    s.create(&b, &seed).await.unwrap();
    let mut status = SlotStatus::default();
    status.history.record(Report::Pending, now());
    s.write_slots(&group(), &[(name("bench-01"), status.clone())])
        .await
        .unwrap();
    let before = s.read_groups(&[group()]).await.unwrap();

    server.restart_clean().unwrap();
    let s = store(&server).await;
    assert_eq!(
        s.read_groups(&[group()]).await.unwrap()[0].claims,
        before[0].claims
    );
    assert_eq!(
        s.read_slots(&group(), &[name("bench-01")]).await.unwrap()[0].0,
        Some(status)
    );
    assert_eq!(
        s.seed(&group(), &name("bench-01"))
            .await
            .unwrap()
            .last
            .unwrap()
            .name
            .as_str(),
        "bench-01-a"
    );
    assert_eq!(s.timeline(&group(), &b.name).await.unwrap().len(), 1);
    let c = new_claim("bench-01-c", "bench-01", &seed);
    assert_eq!(
        s.create(&c, &seed).await.unwrap(),
        Created::SlotTaken(b.name.clone()),
        "the slot lock survived too"
    );
}

// SPEC §5.1: a controller's writes carry its leadership token; once a newer leader raised the
// group's fence, every write of the older one is refused and writes nothing.
#[tokio::test]
async fn a_deposed_leaders_writes_are_refused_by_the_fence() {
    let server = server();
    let s = store(&server).await;
    assert!(s.raise_fence(&group(), "100").await.unwrap());
    let old = s.fenced("100");
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    assert_eq!(old.create(&a, &seed).await.unwrap(), Created::Created);
    // A newer leader raises the fence; the old one cannot lower it again.
    assert!(s.raise_fence(&group(), "200").await.unwrap());
    assert!(!s.raise_fence(&group(), "100").await.unwrap());
    let booting = a.apply(Move::to(Phase::Booting), now()).unwrap();
    assert!(matches!(
        old.write(&a, &booting, None).await,
        Err(fleet::store::claims::ClaimStoreError::Fenced { .. })
    ));
    assert!(matches!(
        old.delete(&a, None, Duration::from_secs(1)).await,
        Err(fleet::store::claims::ClaimStoreError::Fenced { .. })
    ));
    assert!(
        old.write_slots(&group(), &[(name("bench-01"), SlotStatus::default())])
            .await
            .is_err()
    );
    let b = new_claim(
        "bench-02-a",
        "bench-02",
        &s.seed(&group(), &name("bench-02")).await.unwrap(),
    );
    assert!(old.create(&b, &Default::default()).await.is_err());
    assert_eq!(
        *s.read_groups(&[group()]).await.unwrap()[0].claims,
        vec![a.clone()],
        "nothing was written"
    );
    // The new leader writes; requests (unfenced) still work.
    assert!(s.fenced("200").write(&a, &booting, None).await.unwrap());
    assert!(
        s.write_slots(&group(), &[(name("bench-01"), SlotStatus::default())])
            .await
            .is_ok()
    );
}

// The target size is the size of a set the scripts keep in the same step as each claim: it
// follows every create, move, mark and delete, and a refused write moves it not at all.
#[tokio::test]
async fn the_target_follows_every_claim_write_in_one_round_trip() {
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    let want = |claims: &[&Claim]| claims.iter().filter(|c| c.wants_machine()).count();
    assert_eq!(s.target(&group()).await.unwrap(), 0);
    let seed1 = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed1);
    s.create(&a, &seed1).await.unwrap();
    let seed2 = s.seed(&group(), &name("bench-02")).await.unwrap();
    let b = new_claim("bench-02-a", "bench-02", &seed2);
    s.create(&b, &seed2).await.unwrap();
    assert_eq!(s.target(&group()).await.unwrap(), want(&[&a, &b]));
    assert_eq!(s.target(&group()).await.unwrap(), 2);

    let booting = a.apply(Move::to(Phase::Booting), now()).unwrap();
    assert!(s.write(&a, &booting, None).await.unwrap());
    assert_eq!(
        s.target(&group()).await.unwrap(),
        2,
        "booting still wants it"
    );
    let marked = booting.mark_for_deletion(Reason::NodeDeleted).unwrap();
    assert!(s.write(&booting, &marked, None).await.unwrap());
    assert_eq!(
        s.target(&group()).await.unwrap(),
        1,
        "marked: no longer wanted"
    );
    // A stale writer (old version) writes nothing and moves nothing.
    assert!(!s.write(&booting, &booting.clone(), None).await.unwrap());
    assert_eq!(s.target(&group()).await.unwrap(), 1);
    let completed = marked
        .apply(Move::because(Phase::Completed, Reason::NodeDeleted), now())
        .unwrap();
    assert!(s.write(&marked, &completed, None).await.unwrap());
    let failed = b
        .apply(
            Move::because(Phase::Failed, Reason::DeadlineExceeded),
            now(),
        )
        .unwrap();
    assert!(s.write(&b, &failed, None).await.unwrap());
    assert_eq!(s.target(&group()).await.unwrap(), 0);
    assert!(
        s.delete(&failed, None, Duration::from_secs(60))
            .await
            .unwrap()
    );
    assert_eq!(s.target(&group()).await.unwrap(), 0);
    let before = counting.trips();
    s.target(&group()).await.unwrap();
    assert_eq!(counting.trips() - before, 1, "one round trip");
}

// A provider's IncreaseSize of several machines is one step: all the claims or none.
#[tokio::test]
async fn several_claims_are_created_all_or_none_in_one_round_trip() {
    let server = server();
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    let slots = [name("bench-01"), name("bench-02"), name("bench-03")];
    let seeds = s.seeds(&group(), &slots).await.unwrap();
    assert_eq!(seeds.len(), 3);
    // bench-02 is taken by a claim made first.
    let taken = new_claim("bench-02-x", "bench-02", &seeds[1]);
    assert_eq!(s.create(&taken, &seeds[1]).await.unwrap(), Created::Created);
    let three: Vec<Claim> = slots
        .iter()
        .zip(&seeds)
        .map(|(slot, seed)| new_claim(&format!("{slot}-a"), slot.as_str(), seed))
        .collect();
    assert_eq!(
        s.create_all(&three, &seeds).await.unwrap(),
        Some((1, Created::SlotTaken(taken.name.clone())))
    );
    let names: Vec<String> = s.read_groups(&[group()]).await.unwrap()[0]
        .claims
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    assert_eq!(
        names,
        ["bench-02-x"],
        "nothing of the refused call was written"
    );
    assert_eq!(s.target(&group()).await.unwrap(), 1);
    // The same slot twice in one call is refused too.
    let twice = [
        new_claim("bench-01-a", "bench-01", &seeds[0]),
        new_claim("bench-01-b", "bench-01", &seeds[0]),
    ];
    assert_eq!(
        s.create_all(&twice, &[seeds[0].clone(), seeds[0].clone()])
            .await
            .unwrap(),
        Some((
            1,
            Created::SlotTaken(ClaimName::parse("bench-01-a").unwrap())
        ))
    );
    // Two free slots: both, in one round trip.
    let two = [three[0].clone(), three[2].clone()];
    let before = counting.trips();
    assert_eq!(
        s.create_all(&two, &[seeds[0].clone(), seeds[2].clone()])
            .await
            .unwrap(),
        None
    );
    assert_eq!(counting.trips() - before, 1);
    assert_eq!(s.target(&group()).await.unwrap(), 3);
}

fn unclaimed_shutdown(at: DateTime<Utc>) -> fleet::domain::operation::SlotOp {
    fleet::domain::operation::SlotOp {
        kind: fleet::domain::claim::OperationKind::Shutdown,
        claim: None,
        attempt: 0,
        started_at: at,
        timeout: Duration::from_secs(60),
        controller: "ctl".into(),
        streak: 1,
        end: None,
        off_at: None,
    }
}

// The race from the controller's side: a pass read no claim on the slot and decides
// to power its machine off; a request creates a claim before the shutdown is recorded. The
// record is refused atomically, so nothing is told to power off a machine a live claim wants.
#[tokio::test]
async fn a_shutdown_of_an_unclaimed_machine_is_refused_once_a_claim_took_the_slot() {
    use fleet::store::operations::Unclaimed;
    let server = server();
    let s = store(&server).await;
    assert_eq!(
        s.record_unclaimed(&group(), &name("bench-02"), &unclaimed_shutdown(now()))
            .await
            .unwrap(),
        Unclaimed::Recorded
    );
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let c = new_claim("bench-01-a", "bench-01", &seed);
    assert_eq!(s.create(&c, &seed).await.unwrap(), Created::Created);
    assert_eq!(
        s.record_unclaimed(&group(), &name("bench-01"), &unclaimed_shutdown(now()))
            .await
            .unwrap(),
        Unclaimed::Claimed("bench-01-a".into())
    );
    let ops = s
        .read_groups(&[group()])
        .await
        .unwrap()
        .remove(0)
        .operations;
    assert!(ops.by_slot[&name("bench-02")].going_down(now(), Duration::ZERO));
    assert!(
        !ops.by_slot.contains_key(&name("bench-01")),
        "nothing recorded"
    );
    // A fenced writer that lost the fence records nothing either.
    let _: () = raw(
        &server,
        &["SET", &Keys::default().group(&group()).fence(), "9"],
    )
    .await;
    assert!(matches!(
        s.fenced("8")
            .record_unclaimed(&group(), &name("bench-03"), &unclaimed_shutdown(now()))
            .await,
        Err(fleet::store::claims::ClaimStoreError::Fenced { .. })
    ));
}

// The slot's operation record (SPEC §5.4): an outcome is recorded once and only on its own
// operation; the machine observed off ends the way down; a record put back never replaces a
// newer one.
#[tokio::test]
async fn an_operation_record_takes_one_outcome_and_is_put_back_only_over_older_ones() {
    use fleet::domain::claim::OperationOutcome;
    use fleet::domain::operation::OpEnd;
    let server = server();
    let s = store(&server).await;
    let slot = name("bench-01");
    let op = unclaimed_shutdown(now());
    s.record_unclaimed(&group(), &slot, &op).await.unwrap();
    let end = |outcome| OpEnd {
        outcome,
        finished_at: now(),
        duration_ms: 5,
        tail: "done".into(),
    };
    let earlier = now() - chrono::TimeDelta::seconds(1);
    assert!(
        !s.end_operation(&group(), &slot, earlier, &end(OperationOutcome::Failed))
            .await
            .unwrap(),
        "another operation's outcome"
    );
    assert!(
        s.end_operation(&group(), &slot, now(), &end(OperationOutcome::Completed))
            .await
            .unwrap()
    );
    assert!(
        !s.end_operation(&group(), &slot, now(), &end(OperationOutcome::Failed))
            .await
            .unwrap(),
        "recorded once"
    );
    let read = |s: ClaimStore<redis::aio::MultiplexedConnection>| async move {
        s.read_groups(&[group()])
            .await
            .unwrap()
            .remove(0)
            .operations
            .by_slot[&name("bench-01")]
            .clone()
    };
    let got = read(s.clone()).await;
    assert_eq!(
        got.end.as_ref().map(|e| (e.outcome, e.tail.as_str())),
        Some((OperationOutcome::Completed, "done"))
    );
    assert!(got.going_down(now(), Duration::ZERO));
    assert!(s.observe_off(&group(), &slot, now(), now()).await.unwrap());
    assert!(!read(s.clone()).await.going_down(now(), Duration::ZERO));
    // Put back over an older record only.
    assert!(
        !s.restore_operation(&group(), &slot, &unclaimed_shutdown(earlier))
            .await
            .unwrap()
    );
    let later = now() + chrono::TimeDelta::seconds(1);
    assert!(
        s.restore_operation(&group(), &slot, &unclaimed_shutdown(later))
            .await
            .unwrap()
    );
    let got = read(s.clone()).await;
    assert_eq!((got.started_at, got.end, got.off_at), (later, None, None));
}

/// Creates `n` claims in the group, one slot each, a hundred a round trip.
async fn many_claims(s: &ClaimStore<redis::aio::MultiplexedConnection>, n: usize) {
    let names: Vec<String> = (0..n).map(|i| format!("bench-{i:05}")).collect();
    for chunk in names.chunks(100) {
        let mut claims = Vec::new();
        let mut seeds = Vec::new();
        for slot in chunk {
            let seed = s.seed(&group(), &name(slot)).await.unwrap();
            claims.push(new_claim(&format!("{slot}-1"), slot, &seed));
            seeds.push(seed);
        }
        assert!(s.create_all(&claims, &seeds).await.unwrap().is_none());
    }
}

// SPEC §4.3: a group read large at its last read is read in batches, the listing then the
// claims, and sees exactly what the script sees; a write made after it is seen at the next read.
#[tokio::test]
async fn a_large_group_is_read_in_batches_that_see_what_the_script_sees() {
    let server = server();
    let plain = store(&server).await;
    many_claims(&plain, 2_500).await;
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    let scripts = command_calls(&server, "eval_ro").await;
    let by_script = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(command_calls(&server, "eval_ro").await, scripts + 1);
    assert_eq!(by_script[0].claims.len(), 2_500);
    let trips = counting.trips();
    let mgets = command_calls(&server, "mget").await;
    let batched = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(counting.trips() - trips, 2, "the listing, then the claims");
    assert_eq!(
        command_calls(&server, "eval_ro").await,
        scripts + 1,
        "no script"
    );
    assert_eq!(
        command_calls(&server, "mget").await - mgets,
        10,
        "250 keys each"
    );
    assert_eq!(batched[0].claims, by_script[0].claims);
    assert_eq!(batched[0].operations, by_script[0].operations);
    let old = &by_script[0].claims[7];
    let booting = old.apply(Move::to(Phase::Booting), now()).unwrap();
    assert!(plain.write(old, &booting, None).await.unwrap());
    let after = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(after[0].claims[7], booting);
    assert_eq!(command_calls(&server, "eval_ro").await, scripts + 1);
}

// SPEC §4.3: a large group's claims as its last batched read found them are held; a read whose
// listing finds the count unmoved is served from them in one round trip, reading a tenth of the
// claims to compare them with those held, and holds what a read of the claims holds; a write
// moves the count and is read. A claim key edited by hand (no script of fleet's, so the count
// stays) is seen at the read whose tenth holds it, within ten reads.
#[tokio::test]
async fn a_large_group_at_rest_is_served_from_the_claims_its_last_read_found() {
    let server = server();
    let plain = store(&server).await;
    many_claims(&plain, 600).await;
    let counting = Counting::new(conn(&server).await);
    let s = ClaimStore::new(counting.clone(), Keys::default());
    s.read_groups(&[group()]).await.unwrap();
    let batched = s.read_groups(&[group()]).await.unwrap();
    let (trips, mgets) = (counting.trips(), command_calls(&server, "mget").await);
    let held = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(counting.trips() - trips, 1, "the listing alone");
    assert_eq!(
        command_calls(&server, "mget").await,
        mgets + 1,
        "a tenth of the claims, 60, in one MGET"
    );
    assert_eq!(held[0].claims, batched[0].claims);
    assert_eq!(held[0].operations, batched[0].operations);
    assert!(held[0].now >= batched[0].now, "the listing's own time");

    let old = &batched[0].claims[3];
    let booting = old.apply(Move::to(Phase::Booting), now()).unwrap();
    assert!(plain.write(old, &booting, None).await.unwrap());
    let trips = counting.trips();
    let after = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(counting.trips() - trips, 2, "the listing, then the claims");
    assert_eq!(after[0].claims[3], booting);

    // A copy checks claims 0–59 at its first read, 60–119 at its second, and so on: an edit of
    // claim 65 after a copy's first read is seen at its second, one of claim 5 at its eleventh,
    // ten reads after the edit. A claim put back is seen by the new copy's read that checks it.
    for (edited, at) in [(65, 2), (5, 11)] {
        let trips = counting.trips();
        let held = s.read_groups(&[group()]).await.unwrap();
        assert_eq!(counting.trips() - trips, 1, "served from the new copy");
        let key = Keys::default()
            .group(&group())
            .claim(&held[0].claims[edited].name);
        let () = raw(&server, &["SET", &key, "not a claim"]).await;
        let mut reads = 1;
        loop {
            reads += 1;
            let read = s.read_groups(&[group()]).await.unwrap();
            if !read[0].unreadable.is_empty() || reads == 20 {
                assert_eq!(read[0].unreadable.len(), 1);
                assert_eq!(read[0].claims.len(), 599);
                break;
            }
            assert_eq!(read[0].claims, held[0].claims, "read {reads}: as held");
        }
        assert_eq!(reads, at, "claim {edited} seen at the read that checks it");
        let value = serde_json::to_string(&held[0].claims[edited]).unwrap();
        let () = raw(&server, &["SET", &key, &value]).await;
        let mut reads = 0;
        let back = loop {
            reads += 1;
            let read = s.read_groups(&[group()]).await.unwrap();
            if read[0].unreadable.is_empty() || reads == 20 {
                break read;
            }
        };
        assert_eq!(reads, edited / 60 + 1, "claim {edited} put back");
        assert_eq!(back[0].claims, held[0].claims);
    }
}

/// A connection that creates a claim in the group (on a slot of its own, through `side`) before
/// each of its pipelines that reads claims: a writer between every listing and every read of the
/// claims. Counts the claims created in `created`.
fn meddling(
    inner: redis::aio::MultiplexedConnection,
    side: ClaimStore<redis::aio::MultiplexedConnection>,
    created: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Meddled {
    Meddled::new(inner, move |packed| {
        // The command's name as RESP sends it: a script that names MGET in its text is no read
        // of claims.
        if !packed.windows(10).any(|w| w == b"$4\r\nMGET\r\n") {
            return None;
        }
        let (side, created) = (side.clone(), created.clone());
        Some(Box::pin(async move {
            let n = created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let slot = format!("extra-{n:03}");
            let seed = side.seed(&group(), &name(&slot)).await.unwrap();
            let claim = new_claim(&format!("{slot}-1"), &slot, &seed);
            assert_eq!(side.create(&claim, &seed).await.unwrap(), Created::Created);
        }))
    })
}

// SPEC §4.3: a claim created between the listing and the read moves the group's count, and the
// read is made again; a group written between every listing and read is read three times, then
// by the script, and the read holds every claim there is.
#[tokio::test]
async fn a_large_group_written_during_every_read_is_read_by_the_script() {
    let server = server();
    let plain = store(&server).await;
    many_claims(&plain, 2_000).await;
    let created = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let meddling = meddling(conn(&server).await, store(&server).await, created.clone());
    let s = ClaimStore::new(meddling, Keys::default());
    s.read_groups(&[group()]).await.unwrap();
    let scripts = command_calls(&server, "eval_ro").await;
    let read = s.read_groups(&[group()]).await.unwrap();
    assert_eq!(command_calls(&server, "eval_ro").await, scripts + 1);
    let made = created.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        made, 3,
        "a claim created during each of the three batched reads"
    );
    assert_eq!(read[0].claims.len(), 2_000 + made, "every claim there is");
    let extra = (0..made)
        .map(|n| format!("extra-{n:03}-1"))
        .collect::<Vec<_>>();
    for name in &extra {
        assert!(read[0].claims.iter().any(|c| c.name.as_str() == name));
    }
}

// SPEC §4.3: every write of a claim, the index or an operation record moves the group's count of
// changes in its own step (the batched read's proof that nothing changed under it), to at least
// the server's time in µs, so a count rolled back by a failover never comes back to a value a
// reader saw; a refused write moves nothing.
#[tokio::test]
async fn every_write_of_a_claim_or_an_operation_record_moves_the_groups_count() {
    use fleet::domain::claim::OperationOutcome;
    use fleet::domain::operation::OpEnd;
    let server = server();
    let s = store(&server).await;
    let key = Keys::default().group(&group()).changes();
    let count = || async {
        raw::<Option<u64>>(&server, &["GET", &key])
            .await
            .unwrap_or(0)
    };
    let server_us = || async {
        let (secs, micros): (u64, u64) = raw(&server, &["TIME"]).await;
        secs * 1_000_000 + micros
    };
    let last = std::cell::Cell::new(0);
    let moved = async |what: &str| {
        let (now, n) = (server_us().await, count().await);
        assert!(
            n > last.get(),
            "{what}: the count moved from {} to {n}",
            last.get()
        );
        assert!(
            n + 5_000_000 > now && n <= now,
            "{what}: {n} is the server's time in µs ({now})"
        );
        last.set(n);
    };
    let seed = s.seed(&group(), &name("bench-01")).await.unwrap();
    let a = new_claim("bench-01-a", "bench-01", &seed);
    s.create(&a, &seed).await.unwrap();
    moved("create").await;
    let booting = a.apply(Move::to(Phase::Booting), now()).unwrap();
    assert!(s.write(&a, &booting, None).await.unwrap());
    moved("write").await;
    assert!(
        !s.write(&a, &booting, None).await.unwrap(),
        "a stale version"
    );
    assert_eq!(count().await, last.get(), "a refused write moves nothing");
    let seed = s.seed(&group(), &name("bench-02")).await.unwrap();
    let b = new_claim("bench-02-a", "bench-02", &seed);
    s.create(&b, &seed).await.unwrap();
    assert!(s.delete(&b, None, Duration::from_secs(60)).await.unwrap());
    moved("create and delete").await;
    // A failover that lost writes rolls the count back; the next write takes it past every value
    // given before all the same.
    let () = raw(&server, &["SET", &key, "7"]).await;
    let slot = name("bench-03");
    s.record_unclaimed(&group(), &slot, &unclaimed_shutdown(now()))
        .await
        .unwrap();
    moved("an operation recorded").await;
    let end = OpEnd {
        outcome: OperationOutcome::Completed,
        finished_at: now(),
        duration_ms: 5,
        tail: String::new(),
    };
    assert!(s.end_operation(&group(), &slot, now(), &end).await.unwrap());
    moved("its outcome").await;
    assert!(s.observe_off(&group(), &slot, now(), now()).await.unwrap());
    moved("observed off").await;
    let later = now() + chrono::TimeDelta::seconds(1);
    assert!(
        s.restore_operation(&group(), &slot, &unclaimed_shutdown(later))
            .await
            .unwrap()
    );
    moved("put back").await;
}

// SPEC §4.3: a group keeps at most `ENDED_KEPT` ended claims. Ending one more collects the
// oldest with its timeline, in the terminal write's own round trip; the newest stay, and every
// slot's digest (the history that outlives its claims, §3.10) is untouched.
#[tokio::test]
async fn a_group_keeps_only_its_newest_ended_claims_up_to_the_bound_and_every_digest() {
    use fleet::store::claims::ENDED_KEPT;
    let server = server();
    let s = store(&server).await;
    let counting = Counting::new(conn(&server).await);
    let writer = ClaimStore::new(counting.clone(), Keys::default());
    let over = 5;
    let n = ENDED_KEPT + over;
    many_claims(&s, n).await;
    let mut claims: Vec<Claim> = s.read_groups(&[group()]).await.unwrap()[0]
        .claims
        .iter()
        .cloned()
        .collect();
    claims.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(claims.len(), n);
    for c in &claims {
        let failed = c
            .apply(
                Move::because(Phase::Failed, Reason::StartupJobFailed),
                now(),
            )
            .unwrap();
        let trips = counting.trips();
        assert!(writer.write(c, &failed, None).await.unwrap());
        assert_eq!(counting.trips() - trips, 1, "{}: one round trip", c.name);
    }
    let keys = Keys::default().group(&group());
    let kept: Vec<String> = s.read_groups(&[group()]).await.unwrap()[0]
        .claims
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    let newest: Vec<String> = claims[over..].iter().map(|c| c.name.to_string()).collect();
    let mut sorted = kept.clone();
    sorted.sort();
    assert_eq!(sorted, newest, "exactly the newest {ENDED_KEPT}");
    let ended: usize = raw(&server, &["ZCARD", &keys.ended()]).await;
    assert_eq!(ended, ENDED_KEPT);
    for (i, c) in claims.iter().enumerate() {
        let timeline: usize = raw(&server, &["EXISTS", &keys.timeline(&c.name)]).await;
        let claim: usize = raw(&server, &["EXISTS", &keys.claim(&c.name)]).await;
        let want = usize::from(i >= over);
        assert_eq!((claim, timeline), (want, want), "{}", c.name);
        let digest = s.seed(&group(), &c.slot).await.unwrap().last.unwrap();
        assert_eq!(
            (digest.name.as_str(), digest.phase),
            (c.name.as_str(), Phase::Failed),
            "{}: the digest outlives the claim",
            c.slot
        );
    }
    // A kept claim collected at its time leaves the ended claims with it.
    let last = s.read_groups(&[group()]).await.unwrap()[0]
        .claims
        .iter()
        .find(|c| c.name == claims[n - 1].name)
        .cloned()
        .unwrap();
    assert!(
        s.delete(&last, None, Duration::from_secs(60))
            .await
            .unwrap()
    );
    let ended: usize = raw(&server, &["ZCARD", &keys.ended()]).await;
    assert_eq!(ended, ENDED_KEPT - 1);
}
