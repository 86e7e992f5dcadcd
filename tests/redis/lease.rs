//! The leader lease and its fencing tokens (SPEC §5.1) against a real redis-server: a renewal
//! keeps the token, another holder is refused, and a new leadership's token is above every token
//! issued before, even when the epoch was rolled back (a failover that lost its INCR) or wiped.

use crate::support;

use std::time::Duration;

use fleet::store::keys::Keys;
use fleet::store::lease::{Leadership, Lease};
use support::*;

fn token(l: Leadership) -> u64 {
    match l {
        Leadership::Leader(t) => t.parse().unwrap(),
        Leadership::Follower(h) => panic!("not the leader: {h} holds the lease"),
    }
}

async fn server_us(server: &fleet_testing::RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = raw(server, &["TIME"]).await;
    secs * 1_000_000 + micros
}

#[tokio::test]
async fn a_token_is_above_every_token_before_it_even_after_the_epoch_rolls_back() {
    let server = server();
    let keys = Keys::default();
    let ttl = Duration::from_secs(5);
    let a = Lease::new(conn(&server).await, keys.clone(), "a".into(), ttl);
    let b = Lease::new(conn(&server).await, keys.clone(), "b".into(), ttl);

    let before = server_us(&server).await;
    let first = token(a.acquire(None).await.unwrap());
    assert!(
        first >= before,
        "the token is at least the server's time in µs"
    );
    // A renewal keeps the token; another holder is refused, naming the holder.
    assert_eq!(
        token(a.acquire(Some(&first.to_string())).await.unwrap()),
        first
    );
    match b.acquire(None).await.unwrap() {
        Leadership::Follower(holder) => assert_eq!(holder, format!("a {first}")),
        other => panic!("b took a held lease: {other:?}"),
    }
    assert!(a.release(&first.to_string()).await.unwrap());
    let second = token(b.acquire(None).await.unwrap());
    assert!(second > first);
    assert!(b.release(&second.to_string()).await.unwrap());

    // A failover lost the epoch's last INCRs: the epoch reads an old value again.
    let _: () = raw(
        &server,
        &["SET", &keys.leader_epoch(), &(first - 10).to_string()],
    )
    .await;
    let third = token(a.acquire(None).await.unwrap());
    assert!(
        third > second,
        "{third} after {second}: a rolled-back epoch reissued a token"
    );
    let stored: u64 = raw::<String>(&server, &["GET", &keys.leader_epoch()])
        .await
        .parse()
        .unwrap();
    assert_eq!(stored, third, "the epoch moves to the token issued");
    assert!(a.release(&third.to_string()).await.unwrap());

    // A wiped store (no epoch at all) still issues a token above the last one.
    let _: () = raw(&server, &["DEL", &keys.leader_epoch()]).await;
    let fourth = token(b.acquire(None).await.unwrap());
    assert!(fourth > third);

    // An epoch far ahead of the clock (tokens issued by a primary whose clock ran ahead) is
    // followed by one, never by the clock.
    assert!(b.release(&fourth.to_string()).await.unwrap());
    let ahead = server_us(&server).await + 3_600_000_000;
    let _: () = raw(&server, &["SET", &keys.leader_epoch(), &ahead.to_string()]).await;
    assert_eq!(token(a.acquire(None).await.unwrap()), ahead + 1);
}
