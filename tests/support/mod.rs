//! Shared test helpers: a private redis-server per test, connections and names.
#![allow(dead_code)]

use std::time::Duration;

use fleet::domain::name::{BenchName, Reason};
use fleet::store::keys::Keys;
use fleet::store::presence::{Beat, Presence};
use fleet::testing::RedisServer;
use redis::aio::MultiplexedConnection;

pub fn server() -> RedisServer {
    RedisServer::start().expect("starting redis-server")
}

pub async fn conn(server: &RedisServer) -> MultiplexedConnection {
    server.endpoint().connect().await.expect("connecting")
}

pub async fn presence(server: &RedisServer) -> Presence<MultiplexedConnection> {
    Presence::new(conn(server).await, Keys::default())
}

pub fn name(s: &str) -> BenchName {
    BenchName::parse(s).expect("valid test name")
}

pub fn reason(s: &str) -> Reason {
    Reason::parse(s).expect("valid test reason")
}

pub fn beat(n: &str, ttl: Duration) -> Beat {
    Beat {
        name: name(n),
        ttl,
        hold: None,
        load: None,
        cores: None,
    }
}

/// Runs a raw command on the server (to play a foreign writer, or to look at a key).
pub async fn raw<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let mut c = conn(server).await;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut c).await.expect("raw command")
}

/// Bounds every await in a test: a hang fails instead of blocking CI.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}
