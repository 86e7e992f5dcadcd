//! Any peer that reaches the provider's port (SPEC §6.4, §7.1): each test plays one attack against
//! a real `fleet serve` with a container's 1 024 descriptors, and shows what the listener bounds:
//! the connections it holds, how long a silent one lasts, the memory of requests in flight, and
//! what it logs of a refused call; and that the controller's claims, operations and
//! cluster-autoscaler's own calls go on beside it.

use crate::support;

use std::time::{Duration, Instant};

use fleet::provider::bounds;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF};
use fleet_testing::{Fixture, RedisServer};
use support::peer::{closed_within, connect_from};
use support::*;

/// `fleet serve`'s descriptor limit: a container's default.
const NOFILE: u64 = 1_024;

/// A group of two slots whose startups beat their bench and whose shutdowns make it read DOWN.
fn yaml(server: &RedisServer) -> String {
    Fixture::new()
        .group(
            Group::new("pool")
                .min(0)
                .max(2)
                .ungated()
                .env("BIN", env!("CARGO_BIN_EXE_fleet"))
                .env("REDIS", server.url())
                .startup(Op::sh(BOOTS))
                .shutdown(Op::sh(POWERS_OFF))
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slots("pool", ["p-01", "p-02"])
        .yaml()
}

/// A `fleet serve` of `yaml`'s group with 1 024 descriptors, leading: it, its provider's address
/// and its metrics' address.
async fn start(server: &RedisServer, dir: &std::path::Path) -> (Serve, String, String) {
    let config = dir.join("fleet.yaml");
    std::fs::write(&config, yaml(server)).unwrap();
    let mut serve = Serve::start_limited(
        "serve",
        &server.url(),
        &config,
        &QUICK_SERVE,
        &[],
        Some(NOFILE),
    );
    let line = serve.log(&["fleet serve started"]).await;
    let grpc = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .expect("the start line names the provider's address")
        .to_owned();
    let metrics = support::remote::metrics_addr(&line);
    serve.log(&["became the leader"]).await;
    (serve, grpc, metrics)
}

/// `connect_from`, not waiting for the handshake: past the listener's backlog a connection stays
/// half open, as a flood's do.
fn flood_from(addr: &str, host: u8) -> Option<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let to: std::net::SocketAddr = addr.parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, host], 0)).into())
        .ok()?;
    s.set_nonblocking(true).ok()?;
    match s.connect(&to.into()) {
        Ok(()) => Some(s),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Some(s),
        Err(_) => None,
    }
}

/// The test process's own descriptor limit, raised to its hard limit: it holds a thousand
/// sockets.
fn raise_own_nofile() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// The descriptors `fleet serve` has open.
fn open_descriptors(serve: &Serve) -> usize {
    let pid = serve.child.id().expect("running");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A gauge's value on `/metrics`.
async fn gauge(metrics: &str, name: &str) -> f64 {
    let addr = metrics.to_owned();
    let body = tokio::task::spawn_blocking(move || http_get(&addr, "/metrics").1)
        .await
        .unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} on /metrics"))
}

/// cluster-autoscaler's call, from 127.0.0.1, until it is answered (its connection may wait in
/// the backlog for a place): how long that took.
async fn answered(addr: &str) -> Duration {
    let started = Instant::now();
    loop {
        let call = async {
            let mut client = CloudProviderClient::connect(format!("http://{addr}")).await?;
            client
                .node_groups(NodeGroupsRequest {})
                .await
                .map_err(Into::<Box<dyn std::error::Error + Send + Sync>>::into)
        };
        if let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_secs(5), call).await {
            assert_eq!(answer.into_inner().node_groups.len(), 1);
            return started.elapsed();
        }
        assert!(
            started.elapsed() < bounds::FIRST_BYTE * 2,
            "cluster-autoscaler's call was not answered in {:?}",
            started.elapsed()
        );
    }
}

/// Waits until the provider holds `n` connections (`fleet_provider_connections`).
async fn holding(metrics: &str, n: usize) {
    bounded("the provider to hold its connections", async {
        while gauge(metrics, "fleet_provider_connections").await < n as f64 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A claim of `slot` boots and is cancelled, its shutdown run: what the controller's operations
/// need descriptors for.
async fn claim_and_cancel(server: &RedisServer, serve: &mut Serve, slot: &str) {
    let claimed = tokio::task::block_in_place(|| fleet_ok(server, &["claim", slot, "--wait"]));
    let claim = claimed
        .split_whitespace()
        .skip_while(|w| *w != "claim")
        .nth(1)
        .expect("the claim's name")
        .to_owned();
    tokio::task::block_in_place(|| fleet_ok(server, &["cancel", &claim]));
    let slot = format!("slot={slot}");
    serve.log(&["operation ended", "shutdown", &slot]).await;
}

// SPEC §6.4: 1 100 connections that never send a byte used up a 1 024-descriptor fleet serve, a
// claim failed `Too many open files` and shutdowns failed. From one peer address they now hold
// its share of the places (8), the rest closed as they are accepted: cluster-autoscaler, another
// peer, is answered at once, and a claim boots and shuts down beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peers_silent_connections_hold_its_share_and_cluster_autoscaler_is_answered() {
    raise_own_nofile();
    let server = tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, grpc, metrics) = start(&server, dir.path()).await;
    let limits = fleet::telemetry::listener::Limits::provider(NOFILE);
    let before = open_descriptors(&serve);
    let silent: Vec<socket2::Socket> = (0..1_100).filter_map(|_| flood_from(&grpc, 2)).collect();
    assert_eq!(silent.len(), 1_100);
    holding(&metrics, limits.per_peer).await;
    assert_eq!(
        gauge(&metrics, "fleet_provider_connections").await,
        limits.per_peer as f64
    );
    let open = open_descriptors(&serve);
    assert!(
        open <= before + limits.per_peer + 2,
        "fleet serve holds {open} descriptors, {before} before the flood"
    );
    let waited = answered(&grpc).await;
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    claim_and_cancel(&server, &mut serve, "p-01").await;
    drop(silent);
    serve.stop().await;
}

// SPEC §6.4: from 40 peer addresses, 1 100 silent connections hold at most the provider's places
// (64 at 1 024 descriptors), each for its first byte's wait; the rest wait in the kernel's
// backlog and cost fleet serve no descriptor. The controller's operations run beside them, and
// once the flood ends cluster-autoscaler is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_peers_silent_connections_hold_at_most_the_providers_places() {
    raise_own_nofile();
    let server = tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, grpc, metrics) = start(&server, dir.path()).await;
    let limits = fleet::telemetry::listener::Limits::provider(NOFILE);
    let before = open_descriptors(&serve);
    let silent: Vec<socket2::Socket> = (0..1_100)
        .filter_map(|i| flood_from(&grpc, 2 + (i % 40) as u8))
        .collect();
    assert_eq!(silent.len(), 1_100);
    holding(&metrics, limits.connections).await;
    claim_and_cancel(&server, &mut serve, "p-01").await;
    assert_eq!(
        gauge(&metrics, "fleet_provider_connections").await,
        limits.connections as f64
    );
    let open = open_descriptors(&serve);
    assert!(
        open <= before + limits.connections + 2,
        "fleet serve holds {open} descriptors, {before} before the flood"
    );
    drop(silent);
    let waited = answered(&grpc).await;
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    serve.stop().await;
}

// SPEC §6.4: a connection that sends nothing is closed after FIRST_BYTE, plaintext or TLS alike
// (the TLS handshake has the same wait); a connection that began is closed after IDLE silent,
// which the server's pings keep a live client from ever being.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed_after_its_first_byte_wait() {
    let server = tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, grpc, _) = start(&server, dir.path()).await;
    let silent = connect_from(&grpc, 9);
    let closed = tokio::task::spawn_blocking(move || closed_within(silent, bounds::FIRST_BYTE * 2))
        .await
        .unwrap()
        .expect("the silent connection was closed");
    assert!(
        closed >= bounds::FIRST_BYTE - Duration::from_millis(500)
            && closed < bounds::FIRST_BYTE + Duration::from_secs(3),
        "closed after {closed:?}"
    );
    serve.stop().await;
}

/// The path of a provider method, as gRPC names it.
fn method(name: &str) -> String {
    format!("/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/{name}")
}

/// What became of a request that announced 4 MiB and sent all of it but its last byte.
#[derive(Debug, PartialEq)]
enum Unfinished {
    /// The provider answered it, with this gRPC status.
    Answered(String),
    /// Every byte but the last was sent and the provider waits for the last.
    Waiting,
}

/// One connection from 127.0.0.`host` with `streams` requests that each announce MAX_REQUEST and
/// never send their last byte; what became of each once it was sent or answered.
async fn unfinished(addr: &str, host: u8, streams: usize) -> Vec<Unfinished> {
    let tcp = connect_from(addr, host);
    tcp.set_nonblocking(true).unwrap();
    let tcp = tokio::net::TcpStream::from_std(tcp).unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut each = Vec::new();
    for _ in 0..streams {
        let mut send = send.clone().ready().await.unwrap();
        let request = http::Request::post(format!("http://{addr}{}", method("NodeGroupForNode")))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut body) = send.send_request(request, false).unwrap();
        each.push(tokio::spawn(async move {
            let announced = u32::try_from(fleet::provider::server::MAX_REQUEST).unwrap();
            let mut left = 5 + announced as usize - 1;
            let mut first = vec![0u8];
            first.extend_from_slice(&announced.to_be_bytes());
            let mut pending = bytes::Bytes::from(first);
            // Ok once every byte but the last is sent; Err when the stream was refused first.
            let sending = async {
                while left > 0 {
                    if pending.is_empty() {
                        pending = bytes::Bytes::from(vec![0u8; left.min(64 * 1024)]);
                    }
                    body.reserve_capacity(pending.len());
                    let Some(Ok(room)) =
                        futures::future::poll_fn(|cx| body.poll_capacity(cx)).await
                    else {
                        return Err(());
                    };
                    let chunk = pending.split_to(room.min(pending.len()));
                    left -= chunk.len();
                    body.send_data(chunk, false).map_err(|_| ())?;
                }
                Ok(())
            };
            let status = |answer: Result<http::Response<h2::RecvStream>, h2::Error>| match answer {
                Ok(r) => Unfinished::Answered(
                    r.headers()
                        .get("grpc-status")
                        .map_or("trailers", |v| v.to_str().unwrap())
                        .to_owned(),
                ),
                Err(e) => Unfinished::Answered(format!("reset: {e}")),
            };
            tokio::pin!(response);
            tokio::select! {
                answer = &mut response => status(answer),
                sent = sending => match sent {
                    Ok(()) => Unfinished::Waiting,
                    Err(()) => status(response.await),
                },
            }
        }));
    }
    let mut out = Vec::new();
    for e in each {
        out.push(e.await.unwrap());
    }
    out
}

// SPEC §6.4: 120 requests that each announce 4 MiB and never send their last byte took fleet
// serve to 549 MB. The bytes of requests in flight are now counted as they come, 16 MiB in all
// and 8 MiB a peer address: past them a request is refused RESOURCE_EXHAUSTED as it comes, and
// fleet serve's memory grows by little more than the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_requests_cost_the_provider_at_most_its_budget() {
    let server = tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, grpc, metrics) = start(&server, dir.path()).await;
    let before = serve.peak();
    let peers: Vec<_> = (2..17u8)
        .map(|host| {
            let grpc = grpc.clone();
            tokio::spawn(async move { unfinished(&grpc, host, 8).await })
        })
        .collect();
    let mut all = Vec::new();
    for p in peers {
        all.extend(bounded("the unfinished requests", p).await.unwrap());
    }
    assert_eq!(all.len(), 120);
    let waiting = all.iter().filter(|u| **u == Unfinished::Waiting).count();
    let refused = all
        .iter()
        .filter(|u| **u == Unfinished::Answered("8".to_owned()))
        .count();
    assert_eq!(waiting + refused, 120, "{all:?}");
    // What the provider reads is charged (4 requests' worth); the rest of a request the client
    // counts as sent may sit unread within the HTTP/2 window of its connection.
    let budgeted = bounds::BYTES / fleet::provider::server::MAX_REQUEST;
    assert!(waiting <= 2 * budgeted, "{waiting} requests of 4 MiB held");
    let held = gauge(&metrics, "fleet_provider_request_bytes").await;
    assert!(held <= bounds::BYTES as f64, "{held} bytes held");
    let grew = serve.peak().saturating_sub(before);
    assert!(
        grew < 2 * bounds::BYTES as u64,
        "fleet serve's peak grew by {} MB",
        grew >> 20
    );
    // cluster-autoscaler, another peer, is answered beside them.
    let waited = answered(&grpc).await;
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    serve.stop().await;
}

// SPEC §6.4, §6.3: a refused call whose request quoted 3 MB (a group id) logged all of it, each
// time (540 MB of log in 5 s); the refusal now quotes at most 1 KiB of it, in the answer and the
// log. And 16 PricingPodPrice calls at once with a 3.8 MB Pod are answered or refused within the
// budget, fleet serve's memory growing by less than twice the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_are_logged_in_part_and_priced_within_the_budget() {
    let server = tcp_server();
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, grpc, _) = start(&server, dir.path()).await;
    let mut client = CloudProviderClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
        .max_encoding_message_size(8 << 20);
    let huge = "g".repeat(3 << 20);
    for _ in 0..5 {
        let refused = client
            .node_group_target_size(NodeGroupTargetSizeRequest { id: huge.clone() })
            .await
            .unwrap_err();
        assert!(
            refused.message().len() <= fleet::provider::MESSAGE,
            "{} bytes",
            refused.message().len()
        );
    }
    serve.log(&["provider call refused"]).await;
    let lines = serve.drain().to_vec();
    let longest = lines.iter().map(String::len).max().unwrap_or(0);
    assert!(
        longest < 2 * fleet::provider::MESSAGE,
        "a log line of {longest} bytes"
    );

    use prost::Message;
    let pod = fleet::provider::k8s::Pod {
        metadata: Some(fleet::provider::k8s::ObjectMeta {
            name: Some("big".to_owned()),
            annotations: [("blob".to_owned(), "a".repeat(3_800_000))].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let before = serve.peak();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let mut client = client.clone();
            let pod = pod.clone();
            tokio::spawn(async move {
                client
                    .pricing_pod_price(PricingPodPriceRequest {
                        pod_bytes: pod,
                        ..Default::default()
                    })
                    .await
                    .map(|_| ())
                    .map_err(|s| s.code())
            })
        })
        .collect();
    let mut codes = Vec::new();
    for c in calls {
        codes.push(bounded("a price", c).await.unwrap());
    }
    let served = codes
        .iter()
        .filter(|c| **c != Err(tonic::Code::ResourceExhausted))
        .count();
    assert!(served >= 1, "{codes:?}");
    let grew = serve.peak().saturating_sub(before);
    assert!(
        grew < 2 * bounds::BYTES as u64,
        "fleet serve's peak grew by {} MB",
        grew >> 20
    );
    serve.stop().await;
}
