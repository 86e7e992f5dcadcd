//! The provider as cluster-autoscaler meets it (SPEC §6.4, §6.5): `fleet serve` as a process, a
//! CA loop replayed over a real socket with the generated client under CA's 5 s deadline, the
//! `fleet autoscaler` and `fleet reset-attempts` verbs, and mutual TLS with certificates made by
//! `deploy/cluster-autoscaler/make-certs.sh`.

use crate::support;

use std::path::Path;
use std::time::Duration;

use fleet::provider::service::{FAKE_NODE_REASON, OTHER_ERROR};
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::instance_status::InstanceState;
use fleet::provider::wire::*;
use fleet_testing::fixture::{BOOTS, Group, Op, POWERS_OFF, Template};
use fleet_testing::{Fixture, RedisServer};
use support::*;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// cluster-autoscaler's default per-call deadline: every call must answer well within it.
const CA_TIMEOUT: Duration = Duration::from_secs(5);

/// The group `loop`, `min` to `max` machines of 8 cores and 32 GiB: each startup runs the script
/// `startup`, each shutdown makes the bench read DOWN.
fn pool(server: &RedisServer, min: u32, max: u32, startup: &str) -> Group {
    Group::new("loop")
        .min(min)
        .max(max)
        .ungated()
        .env("BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("REDIS", server.url())
        .startup(Op::sh(startup))
        .shutdown(Op::sh(POWERS_OFF))
        .timing("job_monitor_poll_interval", "100ms")
        .template(
            Template::new()
                .capacity("cpu", "8")
                .capacity("memory", "32Gi"),
        )
}

/// Three slots; the startup of l-01 fails (its BMC is broken), the others beat their bench.
fn yaml(server: &RedisServer) -> String {
    let broken = format!(r#"[ "$FLEET_SLOT" != l-01 ] || exit 3; {BOOTS}"#);
    Fixture::new()
        .group(pool(server, 1, 3, &broken))
        .slots("loop", ["l-01", "l-02", "l-03"])
        .yaml()
}

/// Starts `fleet serve` on a free provider port; returns it and the port's address.
async fn start(server: &RedisServer, config: &Path, extra: &[&str]) -> (Serve, String, String) {
    let mut args = vec![
        "--metrics-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--lease",
        "1s",
    ];
    if !extra.contains(&"--blind-grace") {
        args.extend(["--blind-grace", "0s"]);
    }
    args.extend_from_slice(extra);
    let mut serve = Serve::start("serve", server, config, &args);
    let line = serve.log(&["fleet serve started"]).await;
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .expect("the start line names the provider's address")
        .to_owned();
    // The leader answers changes: wait for the leadership before calling.
    serve.log(&["became the leader"]).await;
    (serve, addr, line)
}

async fn client(addr: &str) -> CloudProviderClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(CA_TIMEOUT)
        .connect()
        .await
        .unwrap();
    CloudProviderClient::new(channel)
}

fn fleet(server: &RedisServer, args: &[&str]) -> std::process::Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .output()
        .unwrap();
    support::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

async fn target(c: &mut CloudProviderClient<Channel>) -> i32 {
    c.node_group_target_size(NodeGroupTargetSizeRequest { id: "loop".into() })
        .await
        .unwrap()
        .into_inner()
        .target_size
}

/// The instances as CA reads them: (id, state, error code when the code is not empty).
async fn instances(c: &mut CloudProviderClient<Channel>) -> Vec<(String, i32, Option<String>)> {
    c.node_group_nodes(NodeGroupNodesRequest { id: "loop".into() })
        .await
        .unwrap()
        .into_inner()
        .instances
        .into_iter()
        .map(|i| {
            let s = i.status.unwrap();
            let code = s.error_info.map(|e| e.error_code).filter(|c| !c.is_empty());
            (i.id, s.instance_state, code)
        })
        .collect()
}

fn node(provider_id: &str, fake: Option<&str>) -> ExternalGrpcNode {
    let mut n = ExternalGrpcNode {
        provider_id: provider_id.into(),
        name: provider_id.into(),
        ..Default::default()
    };
    if let Some(reason) = fake {
        n.annotations.insert(FAKE_NODE_REASON.into(), reason.into());
    }
    n
}

const CREATING: i32 = InstanceState::InstanceCreating as i32;
const RUNNING: i32 = InstanceState::InstanceRunning as i32;
const DELETING: i32 = InstanceState::InstanceDeleting as i32;

#[tokio::test]
async fn a_cluster_autoscaler_loop_scales_up_and_down_through_fleet_serve() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, yaml(&server)).unwrap();
    let (mut serve, addr, line) = start(&server, &path, &[]).await;
    let metrics = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("metrics="))
        .expect("the start line names the metrics address")
        .to_owned();
    let mut c = client(&addr).await;

    // The loop's reads, in CA's order.
    c.refresh(RefreshRequest {}).await.unwrap();
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        groups
            .node_groups
            .iter()
            .map(|g| (g.id.as_str(), g.min_size, g.max_size))
            .collect::<Vec<_>>(),
        [("loop", 1, 3)]
    );
    assert_eq!(target(&mut c).await, 0);
    assert!(instances(&mut c).await.is_empty());

    // Scale-up: the target moves at once; the power-on runs in the background.
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 2,
        id: "loop".into(),
    })
    .await
    .unwrap();
    assert_eq!(target(&mut c).await, 2);
    // l-01's startup fails; l-02 boots, its bench beats, and it is ready.
    serve
        .logs(&[
            &["claim moved", "slot=l-01", "to=failed"],
            &["claim moved", "slot=l-02", "to=ready"],
        ])
        .await;
    assert_eq!(
        instances(&mut c).await,
        [
            (
                "fleet://l-01".into(),
                CREATING,
                Some("StartupJobFailed".into())
            ),
            ("fleet://l-02".into(), RUNNING, None),
        ]
    );
    let failed = c
        .node_group_nodes(NodeGroupNodesRequest { id: "loop".into() })
        .await
        .unwrap()
        .into_inner()
        .instances[0]
        .status
        .clone()
        .unwrap()
        .error_info
        .unwrap();
    assert_eq!(
        failed.instance_error_class, OTHER_ERROR,
        "l-03 is still free"
    );
    assert_eq!(target(&mut c).await, 1, "a failed claim leaves the target");

    // NodeGroupForNode for every node, with the group's bounds.
    for (id, _, _) in instances(&mut c).await {
        let g = c
            .node_group_for_node(NodeGroupForNodeRequest {
                node: Some(node(&id, None)),
            })
            .await
            .unwrap()
            .into_inner()
            .node_group
            .unwrap();
        assert_eq!((g.id.as_str(), g.min_size, g.max_size), ("loop", 1, 3));
    }

    // CA deletes the create-error instance as a fake node, even at the minimum.
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![node("fleet://l-01", Some("create-error"))],
        id: "loop".into(),
    })
    .await
    .unwrap();
    assert_eq!(
        instances(&mut c).await,
        [("fleet://l-02".into(), RUNNING, None)]
    );
    // Scale-up by one more prefers a slot that has not just failed: l-03.
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 1,
        id: "loop".into(),
    })
    .await
    .unwrap();
    serve.log(&["claim moved", "slot=l-03", "to=ready"]).await;
    assert_eq!(target(&mut c).await, 2);
    // The operator fixed l-01's BMC: its streak is reset (it would be offered first again).
    let reset = fleet(&server, &["reset-attempts", "l-01"]);
    assert_eq!(reset.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&reset.stdout).contains("failure streak reset (was 1 of 3)"),
        "{}",
        String::from_utf8_lossy(&reset.stdout)
    );

    // Beyond max is refused; a decrease that would remove a machine is refused.
    let over = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            delta: 2,
            id: "loop".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(over.code(), Code::OutOfRange);
    let decrease = c
        .node_group_decrease_target_size(NodeGroupDecreaseTargetSizeRequest {
            delta: -1,
            id: "loop".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(decrease.code(), Code::FailedPrecondition);
    assert!(
        decrease
            .message()
            .contains("would remove machines that exist")
    );
    assert_eq!(target(&mut c).await, 2);

    // Scale-down of l-03: the target drops at once, the instance is deleting until its machine
    // is off, and then it is gone.
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![node("fleet://l-03", None)],
        id: "loop".into(),
    })
    .await
    .unwrap();
    assert_eq!(target(&mut c).await, 1);
    let during = instances(&mut c).await;
    assert!(
        during
            == [
                ("fleet://l-02".into(), RUNNING, None),
                ("fleet://l-03".into(), DELETING, None)
            ]
            || during == [("fleet://l-02".into(), RUNNING, None)],
        "{during:?}"
    );
    serve
        .log(&["claim moved", "slot=l-03", "to=completed"])
        .await;
    assert_eq!(
        instances(&mut c).await,
        [("fleet://l-02".into(), RUNNING, None)]
    );
    // At the minimum a real node is not removed.
    let at_min = c
        .node_group_delete_nodes(NodeGroupDeleteNodesRequest {
            nodes: vec![node("fleet://l-02", None)],
            id: "loop".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(at_min.code(), Code::FailedPrecondition);
    assert_eq!(target(&mut c).await, 1);

    // The operator's view through `fleet autoscaler`, the same calls over the same socket.
    let groups = fleet(
        &server,
        &["autoscaler", "--grpc-addr", &addr, "groups", "-o", "json"],
    );
    assert_eq!(groups.status.code(), Some(0));
    let rows: serde_json::Value = serde_json::from_slice(&groups.stdout).unwrap();
    assert_eq!(rows[0]["id"], "loop");
    assert_eq!(rows[0]["target_size"], 1);
    let nodes = fleet(
        &server,
        &["autoscaler", "--grpc-addr", &addr, "nodes", "loop"],
    );
    let text = String::from_utf8_lossy(&nodes.stdout);
    assert!(text.contains("fleet://l-02  running"), "{text}");
    let refused = fleet(
        &server,
        &["autoscaler", "--grpc-addr", &addr, "increase", "loop", "9"],
    );
    assert_eq!(refused.status.code(), Some(2), "a refusal is exit 2");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("over max size 3"));
    let template = fleet(
        &server,
        &["autoscaler", "--grpc-addr", &addr, "template", "loop"],
    );
    let text = String::from_utf8_lossy(&template.stdout);
    assert!(text.contains("capacity: memory=32Gi"), "{text}");
    assert!(
        text.contains("legacy field 1 carries the same bytes: true"),
        "{text}"
    );

    // An instance CA found unregistered past its provision time goes even at the minimum: a
    // fake `unregistered` node cancels l-02's live claim (the real node could not, above).
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        nodes: vec![node("fleet://l-02", Some("unregistered"))],
        id: "loop".into(),
    })
    .await
    .unwrap();
    assert_eq!(target(&mut c).await, 0);
    let during = instances(&mut c).await;
    assert!(
        during == [("fleet://l-02".into(), DELETING, None)] || during.is_empty(),
        "{during:?}"
    );

    // Every call is counted by method and code on /metrics.
    let body = tokio::task::spawn_blocking(move || http_get(&metrics, "/metrics").1)
        .await
        .unwrap();
    for want in [
        r#"fleet_provider_calls_total{method="NodeGroupIncreaseSize",code="Ok"} 2"#,
        r#"fleet_provider_calls_total{method="NodeGroupIncreaseSize",code="OutOfRange"} 2"#,
        r#"fleet_provider_calls_total{method="NodeGroupDecreaseTargetSize",code="FailedPrecondition"} 1"#,
        r#"fleet_provider_call_seconds_count{method="NodeGroupNodes",code="Ok"}"#,
    ] {
        assert!(body.contains(want), "{want}: {body}");
    }

    c.cleanup(CleanupRequest {}).await.unwrap();
    serve.signal("-TERM");
    serve.log(&["fleet serve stopped"]).await;
}

#[test]
fn fleet_autoscaler_says_what_to_do_when_the_provider_is_out_of_reach_or_flags_are_half_given() {
    let server = server();
    // A port held bound but not listening: connections to it are refused for as long as the
    // test holds it, and no other process can take it meanwhile.
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    let o = fleet(&server, &["autoscaler", "--grpc-addr", &addr, "groups"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is `fleet serve` running with --grpc-addr"),
        "{err}"
    );
    let o = fleet(
        &server,
        &[
            "autoscaler",
            "--grpc-addr",
            &addr,
            "--tls-cert",
            "x.pem",
            "groups",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("go together"));
    let o = fleet(&server, &["autoscaler", "decrease", "loop", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

/// Runs make-certs.sh into `dir`: a CA, a server certificate for localhost and 127.0.0.1, and a
/// client certificate.
fn certs(dir: &Path) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/cluster-autoscaler/make-certs.sh");
    let o = std::process::Command::new("bash")
        .arg(script)
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

async fn tls_client(
    addr: &str,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Vec<NodeGroup>, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name("127.0.0.1");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(cert).unwrap(),
            std::fs::read(key).unwrap(),
        ));
    }
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .timeout(CA_TIMEOUT)
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    CloudProviderClient::new(channel)
        .node_groups(NodeGroupsRequest {})
        .await
        .map(|r| r.into_inner().node_groups)
        .map_err(|s| format!("{s:?}"))
}

#[tokio::test]
async fn with_a_client_ca_only_clients_it_signed_are_served() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("ours");
    let theirs = dir.path().join("theirs");
    certs(&ours);
    certs(&theirs);
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, yaml(&server)).unwrap();
    let file = |d: &Path, f: &str| d.join(f).to_str().unwrap().to_owned();
    let (cert, key, ca) = (
        file(&ours, "server.pem"),
        file(&ours, "server-key.pem"),
        file(&ours, "ca.pem"),
    );
    let (mut serve, addr, line) = start(
        &server,
        &path,
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
        ],
    )
    .await;
    assert!(line.contains("transport=\"mutual TLS\""), "{line}");

    // A client whose certificate our CA signed is served.
    let groups = tls_client(
        &addr,
        &ours.join("ca.pem"),
        Some((&ours.join("client.pem"), &ours.join("client-key.pem"))),
    )
    .await
    .unwrap();
    assert_eq!(groups[0].id, "loop");
    // Without a certificate, or with one another CA signed, it is refused.
    let none = tls_client(&addr, &ours.join("ca.pem"), None).await;
    assert!(none.is_err(), "{none:?}");
    let foreign = tls_client(
        &addr,
        &ours.join("ca.pem"),
        Some((&theirs.join("client.pem"), &theirs.join("client-key.pem"))),
    )
    .await;
    assert!(foreign.is_err(), "{foreign:?}");
    // A plaintext client gets nothing from a TLS port.
    let plain = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(CA_TIMEOUT)
        .connect()
        .await;
    if let Ok(channel) = plain {
        assert!(
            CloudProviderClient::new(channel)
                .node_groups(NodeGroupsRequest {})
                .await
                .is_err()
        );
    }

    // `fleet autoscaler` with the cloud-config's three files, as CA would.
    let with = |client: &Path| {
        fleet(
            &server,
            &[
                "autoscaler",
                "--grpc-addr",
                &addr,
                "--tls-cert",
                &file(client, "client.pem"),
                "--tls-key",
                &file(client, "client-key.pem"),
                "--tls-ca",
                &file(&ours, "ca.pem"),
                "groups",
            ],
        )
    };
    let ok = with(&ours);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("loop"));
    let refused = with(&theirs);
    assert_eq!(refused.status.code(), Some(1));

    serve.signal("-TERM");
    serve.log(&["fleet serve stopped"]).await;
}

#[test]
fn bad_tls_flags_are_usage_errors_naming_the_flag() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, yaml(&server)).unwrap();
    let not_pem = dir.path().join("cert.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let p = path.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 3] = [
        (
            &["--tls-cert", "/x.pem"],
            2,
            "--tls-cert and --tls-key go together",
        ),
        (
            &["--tls-client-ca", "/x.pem"],
            2,
            "--tls-client-ca needs --tls-cert",
        ),
        (
            &[
                "--tls-cert",
                not_pem.to_str().unwrap(),
                "--tls-key",
                not_pem.to_str().unwrap(),
            ],
            2,
            "holds no PEM block",
        ),
    ];
    for (flags, code, words) in cases {
        let mut args = vec!["serve", "--config", p, "--grpc-addr", "127.0.0.1:0"];
        args.extend_from_slice(flags);
        let o = fleet(&server, &args);
        assert_eq!(o.status.code(), Some(code), "{flags:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(words), "{flags:?}: {err}");
    }
}

// A scale-down blinded the controller. Deleting every machine of a group in one call
// made them all go dark in one pass, the mass-vanishing rule fired (`vanished=4 on=4`), and for
// the blind grace nothing booted. Machines fleet itself powers off do not count: no blindness, and
// a claim made right after boots at once.
#[tokio::test]
async fn scaling_a_group_to_zero_in_one_call_does_not_blind_the_controller() {
    let server = server();
    // An existing store: the first start is not blind (an empty one is, for the grace, by design).
    let _: () = raw(
        &server,
        &[
            "SET",
            &fleet::store::keys::Keys::default().generation(),
            "kept",
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.yaml");
    let four = Fixture::new()
        .group(pool(&server, 0, 4, BOOTS))
        .slots("loop", ["l-01", "l-02", "l-03", "l-04"])
        .yaml();
    assert!(four.contains("l-04") && !four.contains("exit 3"), "{four}");
    std::fs::write(&path, four).unwrap();
    // A grace longer than any wait below: a blind controller would fail the test.
    let (mut serve, addr, _) = start(&server, &path, &["--blind-grace", "60s"]).await;
    let mut c = client(&addr).await;
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 4,
        id: "loop".into(),
    })
    .await
    .unwrap();
    let ready = [
        &["to=ready", "l-01"][..],
        &["to=ready", "l-02"],
        &["to=ready", "l-03"],
        &["to=ready", "l-04"],
    ];
    serve.logs(&ready).await;
    let nodes = (1..=4)
        .map(|i| ExternalGrpcNode {
            provider_id: format!("fleet://l-0{i}"),
            ..Default::default()
        })
        .collect();
    c.node_group_delete_nodes(NodeGroupDeleteNodesRequest {
        id: "loop".into(),
        nodes,
    })
    .await
    .unwrap();
    // One scaling call, recorded once with all it gave back.
    let groups = fleet(&server, &["groups", "-o", "json"]);
    let groups: serde_json::Value = serde_json::from_slice(&groups.stdout).unwrap();
    assert_eq!(
        groups[0]["last_scale_action"],
        serde_json::json!(["delete", 4]),
        "{groups}"
    );
    let done = [
        &["to=completed", "l-01"][..],
        &["to=completed", "l-02"],
        &["to=completed", "l-03"],
        &["to=completed", "l-04"],
    ];
    serve.logs(&done).await;
    // Right after: a new claim boots without waiting for any grace.
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        delta: 1,
        id: "loop".into(),
    })
    .await
    .unwrap();
    let line = serve.log(&["to=ready"]).await;
    assert!(line.contains("l-0"), "{line}");
    let logged = serve.stop().await;
    assert!(
        !logged
            .iter()
            .any(|l| l.contains("vanished") || l.contains("blind")),
        "{logged:#?}"
    );
}
