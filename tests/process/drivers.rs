//! fleet's own power drivers end to end (SPEC §4.10): `fleet serve` powers a slot on by
//! Wake-on-LAN and off through the bench's own `fleet agent`, with no script and no BMC, the
//! homelab setup SPEC §4.10 promises. The test plays the machine: a UDP socket on loopback is its
//! NIC, and the magic packet "boots" it by starting its agent; the agent's power-off command
//! stops the agent, as `systemctl poweroff` would.

use crate::support;

use std::time::Duration;

use fleet_testing::fixture::{Driver, Group, Slot};
use fleet_testing::{Fixture, RedisServer};
use support::*;

fn fleet(server: &RedisServer, args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .output()
        .unwrap();
    support::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn wake_on_lan_powers_a_slot_on_and_its_agent_powers_it_off_with_no_script() {
    let server = server();
    let nic = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = Fixture::new()
        .group(
            Group::new("minis")
                .max(1)
                .ungated()
                .driver(
                    Driver::wol()
                        .broadcast(nic.local_addr().unwrap())
                        .off("agent"),
                )
                .timing("job_timeout", "20s")
                .timing("job_monitor_poll_interval", "100ms"),
        )
        .slot(Slot::new("mini-1", "minis").driver(Driver::overrides().mac("52:54:00:12:34:56")))
        .write(dir.path());
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--interval",
        "100ms",
        "--blind-grace",
        "0s",
        "--lease",
        "1s",
    ];
    let mut serve = Serve::start("serve", &server, &path, &args);
    serve.log(&["became the leader"]).await;
    fleet(&server, &["claim", "mini-1"]);

    // The machine hears its magic packet and boots: its agent starts beating.
    let mut buf = [0u8; 256];
    let (len, _) = bounded("the magic packet", nic.recv_from(&mut buf))
        .await
        .unwrap();
    assert_eq!(len, 102);
    assert_eq!(buf[..6], [0xFF; 6]);
    assert_eq!(buf[96..102], [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    let mut agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args([
            "--redis",
            &server.url(),
            "agent",
            "mini-1",
            "--interval",
            "100ms",
            // What `systemctl poweroff` does to the agent: a SIGTERM, and its final beat.
            "--power-off-command",
            "kill -TERM $PPID",
        ])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    serve.log(&["claim moved", "slot=mini-1", "to=ready"]).await;
    assert_eq!(fleet(&server, &["live"]), "mini-1\n");

    // Released, the machine is powered off through its agent.
    let claims: serde_json::Value =
        serde_json::from_str(&fleet(&server, &["claims", "-o", "json"])).unwrap();
    let claim = claims[0]["name"].as_str().unwrap().to_owned();
    fleet(&server, &["cancel", &claim]);
    let status = bounded("the agent to power off", agent.wait())
        .await
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the agent stopped with its final beat"
    );
    serve
        .log(&["claim moved", "slot=mini-1", "to=completed"])
        .await;
    assert_eq!(fleet(&server, &["live"]), "");

    // The claim's timeline shows the startup's audit record as its operation's output.
    let described: serde_json::Value =
        serde_json::from_str(&fleet(&server, &["describe", &claim, "-o", "json"])).unwrap();
    let startup = described["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "operation" && e["operation"] == "startup")
        .unwrap_or_else(|| panic!("{described:#}"));
    assert!(
        startup["detail"]
            .as_str()
            .unwrap()
            .contains("ms: magic packet for 52:54:00:12:34:56 to 127.0.0.1:"),
        "{startup:#}"
    );
    // The claim ended when the machine was seen off, which may come before the shutdown's
    // report: its outcome is in the slot's operation record, with the agent's answer.
    let store = fleet::store::claims::ClaimStore::new(
        conn(&server).await,
        fleet::store::keys::Keys::default(),
    );
    let group = fleet::domain::name::GroupName::parse("minis").unwrap();
    let end = bounded("the shutdown's outcome in the store", async {
        loop {
            let read = store
                .read_groups(std::slice::from_ref(&group))
                .await
                .unwrap()
                .remove(0);
            let op = &read.operations.by_slot[&name("mini-1")];
            if op.kind == fleet::domain::claim::OperationKind::Shutdown
                && let Some(end) = op.end.clone()
            {
                return end;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        end.outcome,
        fleet::domain::claim::OperationOutcome::Completed
    );
    assert!(
        end.tail
            .contains(" to the agent of mini-1 -> accepted: it runs its power-off command"),
        "{}",
        end.tail
    );
    let lines = serve.stop().await;
    assert!(!lines.iter().any(|l| l.contains(" ERROR ")), "{lines:#?}");
}
