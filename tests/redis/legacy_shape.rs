//! The legacy shapes. The presence keys before the join set (SPEC §2.3): a store written then
//! reads the same. The wire (SPEC §6.1): cluster-autoscaler 1.25 to 1.34.1 declare Kubernetes types
//! inside the messages (the node template as a Node message in field 1, durations as meta/v1
//! Duration in nanoseconds, times as meta/v1 Time). A test-only proto in that shape, compiled at
//! run time by protox, decodes fleet's answers as an old cluster-autoscaler would, and encodes
//! an old cluster-autoscaler's requests for fleet to read.
//!
//! The answers come from the provider over a real socket; prost's encoding is deterministic, so
//! the bytes decoded here are the bytes fleet sent.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use fleet::config;
use fleet::provider::wire::cloud_provider_client::CloudProviderClient;
use fleet::provider::wire::*;
use fleet::store::keys::Keys;
use fleet_testing::Fixture;
use fleet_testing::fixture::{Group, Op, Power, Template};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, Value};
use support::*;
use tonic::transport::Channel;

/// One group with a node template, a power draw and an autoscaling override, and its one slot.
fn yaml() -> String {
    Fixture::new()
        .group(
            Group::new("pool-b")
                .max(2)
                .provision_time("40m")
                .startup(Op::command(["true"]))
                .shutdown(Op::command(["true"]))
                .template(
                    Template::new()
                        .label("fleet.dev/pool", "b")
                        .taint("fleet.dev/gpu=true:NoSchedule")
                        .capacity("cpu", "64")
                        .capacity("memory", "512Gi")
                        .power(Power::new(1000.0, 0.5)),
                )
                .autoscaling_option("scale_down_unready_time", "7m"),
        )
        .slots("pool-b", ["gpu-01"])
        .yaml()
}

fn legacy_pool() -> DescriptorPool {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proto");
    protox::Compiler::new([dir])
        .unwrap()
        .include_imports(true)
        .open_file("legacy_externalgrpc.proto")
        .unwrap()
        .descriptor_pool()
}

fn decode(pool: &DescriptorPool, message: &str, bytes: &[u8]) -> DynamicMessage {
    let desc = pool
        .get_message_by_name(&format!("legacy.{message}"))
        .unwrap();
    DynamicMessage::decode(desc, bytes).unwrap()
}

fn field(m: &DynamicMessage, name: &str) -> Value {
    m.get_field_by_name(name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .into_owned()
}

fn message(m: &DynamicMessage, name: &str) -> DynamicMessage {
    field(m, name).as_message().unwrap().clone()
}

fn string(m: &DynamicMessage, name: &str) -> String {
    field(m, name).as_str().unwrap().to_owned()
}

async fn provider(server: &fleet_testing::RedisServer) -> CloudProviderClient<Channel> {
    let cfg = Arc::new(config::parse(&yaml(), Path::new("t.yaml")).unwrap());
    provider_client(server, cfg).await
}

#[tokio::test]
async fn an_old_cluster_autoscaler_decodes_the_template_as_a_node_message() {
    let server = server();
    let mut c = provider(&server).await;
    let pool = legacy_pool();
    let answer = c
        .node_group_template_node_info(NodeGroupTemplateNodeInfoRequest {
            id: "pool-b".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let old = decode(
        &pool,
        "NodeGroupTemplateNodeInfoResponse",
        &answer.encode_to_vec(),
    );
    let node = message(&old, "nodeInfo");
    let meta = message(&node, "metadata");
    assert_eq!(string(&meta, "name"), "template-pool-b");
    let labels = field(&meta, "labels");
    let labels = labels.as_map().unwrap();
    let label = |k: &str| {
        labels
            .get(&MapKey::String(k.into()))
            .and_then(|v| v.as_str().map(ToOwned::to_owned))
    };
    assert_eq!(label("fleet.dev/pool").as_deref(), Some("b"));
    assert_eq!(label("kubernetes.io/os").as_deref(), Some("linux"));
    let spec = message(&node, "spec");
    let taints = field(&spec, "taints");
    let taint = taints.as_list().unwrap()[0].as_message().unwrap().clone();
    assert_eq!(
        (
            string(&taint, "key"),
            string(&taint, "value"),
            string(&taint, "effect")
        ),
        ("fleet.dev/gpu".into(), "true".into(), "NoSchedule".into())
    );
    let status = message(&node, "status");
    for map in ["capacity", "allocatable"] {
        let quantities = field(&status, map);
        let quantities = quantities.as_map().unwrap();
        let q = |k: &str| {
            quantities
                .get(&MapKey::String(k.into()))
                .and_then(|v| v.as_message().map(|m| string(m, "string")))
        };
        assert_eq!(q("cpu").as_deref(), Some("64"), "{map}");
        assert_eq!(q("memory").as_deref(), Some("512Gi"), "{map}");
        assert_eq!(q("pods").as_deref(), Some("110"), "{map}");
    }
    let conditions = field(&status, "conditions");
    let ready = conditions.as_list().unwrap()[0]
        .as_message()
        .unwrap()
        .clone();
    assert_eq!(
        (string(&ready, "type"), string(&ready, "status")),
        ("Ready".into(), "True".into())
    );
    assert_eq!(
        string(&message(&status, "nodeInfo"), "operatingSystem"),
        "linux"
    );
}

#[tokio::test]
async fn an_old_cluster_autoscaler_sends_nanosecond_defaults_and_reads_nanosecond_options() {
    let server = server();
    let mut c = provider(&server).await;
    let pool = legacy_pool();
    // An old CA's request: its defaults as meta/v1 Durations, in nanoseconds, fields 3 to 5.
    let desc = pool
        .get_message_by_name("legacy.NodeGroupAutoscalingOptionsRequest")
        .unwrap();
    let options_desc = pool
        .get_message_by_name("legacy.NodeGroupAutoscalingOptions")
        .unwrap();
    let duration_desc = pool.get_message_by_name("legacy.Duration").unwrap();
    let nanos = |secs: i64| {
        let mut d = DynamicMessage::new(duration_desc.clone());
        d.set_field_by_name("duration", Value::I64(secs * 1_000_000_000));
        Value::Message(d)
    };
    let mut defaults = DynamicMessage::new(options_desc);
    defaults.set_field_by_name("scaleDownUtilizationThreshold", Value::F64(0.5));
    defaults.set_field_by_name("scaleDownUnneededTime", nanos(600));
    defaults.set_field_by_name("scaleDownUnreadyTime", nanos(1200));
    defaults.set_field_by_name("MaxNodeProvisionTime", nanos(900));
    let mut request = DynamicMessage::new(desc);
    request.set_field_by_name("id", Value::String("pool-b".into()));
    request.set_field_by_name("defaults", Value::Message(defaults));
    let wire = NodeGroupAutoscalingOptionsRequest::decode(request.encode_to_vec().as_slice())
        .expect("fleet reads the legacy request");
    let answer = c.node_group_get_options(wire).await.unwrap().into_inner();

    // The old CA reads fields 3 to 5 without a nil check: all three are there, in nanoseconds.
    let old = decode(
        &pool,
        "NodeGroupAutoscalingOptionsResponse",
        &answer.encode_to_vec(),
    );
    let options = message(&old, "nodeGroupAutoscalingOptions");
    let read = |name: &str| {
        assert!(options.has_field_by_name(name), "{name} is set");
        message(&options, name)
            .get_field_by_name("duration")
            .unwrap()
            .as_i64()
            .unwrap()
    };
    assert_eq!(read("scaleDownUnneededTime"), 600_000_000_000, "echoed");
    assert_eq!(
        read("scaleDownUnreadyTime"),
        420_000_000_000,
        "the group's 7m"
    );
    assert_eq!(
        read("MaxNodeProvisionTime"),
        2_460_000_000_000,
        "the group's 40m and a minute"
    );
    assert_eq!(
        field(&options, "scaleDownUtilizationThreshold").as_f64(),
        Some(0.5)
    );
}

#[tokio::test]
async fn an_old_cluster_autoscalers_price_request_carries_meta_v1_times() {
    let server = server();
    let mut c = provider(&server).await;
    let pool = legacy_pool();
    let time_desc = pool.get_message_by_name("legacy.Time").unwrap();
    let time = |seconds: i64| {
        let mut t = DynamicMessage::new(time_desc.clone());
        t.set_field_by_name("seconds", Value::I64(seconds));
        Value::Message(t)
    };
    let mut node =
        DynamicMessage::new(pool.get_message_by_name("legacy.ExternalGrpcNode").unwrap());
    node.set_field_by_name("providerID", Value::String("fleet://gpu-01".into()));
    let mut request = DynamicMessage::new(
        pool.get_message_by_name("legacy.PricingNodePriceRequest")
            .unwrap(),
    );
    request.set_field_by_name("node", Value::Message(node));
    request.set_field_by_name("startTime", time(0));
    request.set_field_by_name("endTime", time(3 * 3600));
    let wire = PricingNodePriceRequest::decode(request.encode_to_vec().as_slice()).unwrap();
    let price = c.pricing_node_price(wire).await.unwrap().into_inner().price;
    // 1 kW for 3 h at 0.5 per kWh.
    assert!((price - 1.5).abs() < 1e-9, "{price}");
}

// The presence keys before the join set (SPEC §2.3): every beat added its bench to the registry
// set, bumped its version and wrote its last-seen time in a hash. A store written so reads the
// same with this version; its benches beat on, are held, released and forgotten.
#[tokio::test]
async fn presence_written_before_the_join_set_reads_the_same_and_is_forgotten_whole() {
    use fleet::domain::state::State;
    use fleet::store::presence::Presence;
    let server = server();
    let keys = Keys::default();
    let (secs, _): (i64, i64) = raw(&server, &["TIME"]).await;
    let at = secs * 1000;
    // As the old beat script left them: two benches, one up, one whose key expired long ago.
    let value = format!(r#"{{"v":1,"at":{at},"ttl":60000}}"#);
    let _: () = raw(
        &server,
        &[
            "SET",
            &keys.heartbeat(&name("old-up")),
            &value,
            "PXAT",
            &(at + 60_000).to_string(),
        ],
    )
    .await;
    let _: () = raw(&server, &["SADD", &keys.registry(), "old-up", "old-down"]).await;
    let _: () = raw(
        &server,
        &["SET", &keys.registry_version(), "1700000000000000"],
    )
    .await;
    let seen = (at - 3_600_000).to_string();
    let _: () = raw(
        &server,
        &[
            "HSET",
            &keys.last_seen(),
            "old-up",
            &at.to_string(),
            "old-down",
            &seen,
        ],
    )
    .await;
    let _: () = raw(
        &server,
        &[
            "HSET",
            &keys.hold_requests(),
            "old-down",
            r#"{"reason":"parts"}"#,
        ],
    )
    .await;

    let p = Presence::new(conn(&server).await, keys.clone());
    let snap = p.read(&[]).await.unwrap();
    let rows: Vec<(String, State)> = snap
        .benches
        .iter()
        .map(|b| (b.name.to_string(), b.verdict(snap.now).state))
        .collect();
    assert_eq!(
        rows,
        [
            ("old-down".into(), State::Down),
            ("old-up".into(), State::Up)
        ]
    );
    assert_eq!(
        snap.benches[0]
            .requested_hold
            .as_ref()
            .map(|r| r.reason.as_str()),
        Some("parts")
    );
    let last = p
        .last_seen(&[name("old-down"), name("old-up")])
        .await
        .unwrap()
        .at;
    assert_eq!(
        last.iter()
            .map(|t| t.map(|t| t.timestamp_millis()))
            .collect::<Vec<_>>(),
        [Some(at - 3_600_000), Some(at)]
    );
    // An old bench beats in the new shape: still one bench, and its newer last-seen time counts.
    let beat = p
        .beat(&fleet::store::presence::Beat {
            name: name("old-up"),
            ttl: std::time::Duration::from_secs(60),
            hold: None,
            load: None,
            cores: None,
        })
        .await
        .unwrap();
    let snap = p.read(&[]).await.unwrap();
    assert_eq!(snap.benches.len(), 2);
    assert_eq!(
        p.last_seen(&[name("old-up")]).await.unwrap().at,
        [Some(beat.at)]
    );
    // Known, so held without --register; forgotten whole, from both shapes.
    assert!(
        p.request_hold_known(&name("old-up"), &reason("x"), None)
            .await
            .unwrap()
    );
    assert_eq!(
        p.forget(&[name("old-up"), name("old-down")]).await.unwrap(),
        [true, true]
    );
    assert!(p.read(&[]).await.unwrap().benches.is_empty());
    let mut left: Vec<String> = raw(&server, &["KEYS", "*"]).await;
    left.retain(|k| k != &keys.heartbeat(&name("old-up")));
    left.sort();
    assert_eq!(left, [keys.registry_version()], "only the version stays");
}
