//! The provider benchmark (README "Benchmarks"): p50 and p99 of NodeGroupTargetSize and
//! NodeGroupNodes for a group of 1 000 slots, every one claimed (half of them ready), over
//! loopback with the generated client, against a real redis-server on loopback TCP. The anchors
//! are the targets (TargetSize p99 under 2 ms, NodeGroupNodes p99 under 20 ms) and the floor of
//! one gRPC round trip (Refresh, which touches nothing).
//!
//! Run: `cargo bench --bench provider` (add `-- --quick` for fewer calls).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fleet::config;
use fleet::domain::claim::{Move, Phase};
use fleet::domain::name::GroupName;
use fleet::provider::service::Provider;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet::store::claims::ClaimStore;
use fleet::store::keys::Keys;
use fleet_redis::connect::Endpoint;
use fleet_testing::fixture::{Group, Op};
use fleet_testing::{Fixture, Options, RedisServer};

// The allocator the `fleet` binary runs with (cmd/fleet/main.rs), so what is measured here
// allocates as fleet does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SLOTS: usize = 1_000;

/// One group of `SLOTS` slots.
fn yaml() -> String {
    Fixture::new()
        .group(
            Group::new("pool-a")
                .min(0)
                .max(SLOTS as u32)
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"])),
        )
        .slots("pool-a", (0..SLOTS).map(|i| format!("bench-{i:05}")))
        .yaml()
}

/// p50 and p99 of `calls` timed calls of `f`, after `calls / 10` untimed ones.
async fn percentiles<F, Fut>(calls: usize, f: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let times = support::timed(calls / 10, calls, f).await;
    (
        support::quantile(&times, 0.5),
        support::quantile(&times, 0.99),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = support::Args::new().quick();
    let calls = if quick { 300 } else { 3_000 };
    let server = RedisServer::with(Options {
        tcp: true,
        ..Options::default()
    })?;
    let port = server.port().expect("tcp");
    let conn = Endpoint::new(format!("redis://127.0.0.1:{port}"), Duration::from_secs(60))
        .connect()
        .await?;
    let store = ClaimStore::new(conn.clone(), Keys::default());
    let cfg = Arc::new(config::parse(&yaml(), Path::new("bench.yaml"))?);
    let (_tx, rx) = tokio::sync::watch::channel(cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(fleet::provider::server::serve(
        listener,
        None,
        std::sync::Arc::new(Provider::new(rx, store.clone())),
        (
            None,
            fleet::provider::server::Bounds::of(1_024, &Default::default()),
        ),
        tokio_util::sync::CancellationToken::new(),
    ));
    let mut client = CloudProviderClient::connect(format!("http://{addr}")).await?;

    // Every slot claimed through the provider itself, then half of them moved to ready.
    for _ in 0..SLOTS / 100 {
        client
            .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                delta: 100,
                id: "pool-a".into(),
            })
            .await?;
    }
    let group = GroupName::parse("pool-a")?;
    let claims = store
        .read_groups(std::slice::from_ref(&group))
        .await?
        .remove(0)
        .claims;
    let now = store.now().await?;
    for c in claims.iter().step_by(2) {
        let booting = c.apply(Move::to(Phase::Booting), now)?;
        let ready = booting.apply(Move::to(Phase::Ready), now)?;
        store.write(c, &booting, None).await?;
        store.write(&booting, &ready, None).await?;
    }
    let target = client
        .node_group_target_size(NodeGroupTargetSizeRequest {
            id: "pool-a".into(),
        })
        .await?
        .into_inner()
        .target_size;
    assert_eq!(target as usize, SLOTS);

    let mut c = client.clone();
    let (floor50, floor99) = percentiles(calls, || {
        let mut c = c.clone();
        async move {
            c.refresh(RefreshRequest {}).await.expect("Refresh");
        }
    })
    .await;
    let (t50, t99) = percentiles(calls, || {
        let mut c = c.clone();
        async move {
            c.node_group_target_size(NodeGroupTargetSizeRequest {
                id: "pool-a".into(),
            })
            .await
            .expect("TargetSize");
        }
    })
    .await;
    let (n50, n99) = percentiles(calls / 3, || {
        let mut c = c.clone();
        async move {
            let n = c
                .node_group_nodes(NodeGroupNodesRequest {
                    id: "pool-a".into(),
                })
                .await
                .expect("Nodes")
                .into_inner()
                .instances
                .len();
            assert_eq!(n, SLOTS);
        }
    })
    .await;
    c.cleanup(CleanupRequest {}).await?;

    println!("provider over loopback, one group of {SLOTS} claimed slots (half ready):");
    println!(
        "  gRPC floor (Refresh)     p50 {:>7.3} ms  p99 {:>7.3} ms",
        ms(floor50),
        ms(floor99)
    );
    println!(
        "  NodeGroupTargetSize      p50 {:>7.3} ms  p99 {:>7.3} ms  ({:.2}x the floor's p99; {:.2}x the 2 ms target)",
        ms(t50),
        ms(t99),
        ms(t99) / ms(floor99),
        ms(t99) / 2.0
    );
    println!(
        "  NodeGroupNodes           p50 {:>7.3} ms  p99 {:>7.3} ms  ({:.2}x the floor's p99; {:.2}x the 20 ms target)",
        ms(n50),
        ms(n99),
        ms(n99) / ms(floor99),
        ms(n99) / 20.0
    );
    Ok(())
}
