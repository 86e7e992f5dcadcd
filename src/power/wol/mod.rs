//! Wake-on-LAN (SPEC §4.10): the magic packet, six bytes of 0xFF and then the machine's MAC
//! sixteen times (102 bytes), sent over UDP to the slot's configured address.
//!
//! On only: a machine has no way to hear a packet that turns it off. The packets' arrival is
//! not knowable (UDP, and a sleeping NIC answers nothing), so sending them is all this driver
//! does and all its audit can say; the operation's success is the bench's heartbeat arriving,
//! which the controller's readiness gate already waits for. Broadcasts do not cross VLANs: the
//! address is the machine's own subnet-directed broadcast or its own address, per slot.
//!
//! - `config`: its fields in the file (`mac`, `broadcast`) and their checks, and `WolDriver`.

pub mod config;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;

use self::config::{KIND, Mac};
use crate::power::action::{Audit, PowerError, Sent};

/// The length of a magic packet.
pub const PACKET_LEN: usize = 6 + 16 * 6;
/// How many packets one wake sends: UDP may drop one, and a NIC that is still settling into its
/// low-power state may miss the first.
pub const PACKETS: u32 = 3;
/// The gap between two packets: short, so the operation ends at once, and long enough that one
/// burst of loss on the path does not take them all.
pub const GAP: Duration = Duration::from_millis(100);

/// The magic packet for `mac`.
pub fn magic_packet(mac: &Mac) -> [u8; PACKET_LEN] {
    let mut packet = [0xFF; PACKET_LEN];
    for copy in packet[6..].chunks_exact_mut(6) {
        copy.copy_from_slice(&mac.0);
    }
    packet
}

/// Sends `PACKETS` magic packets for `mac` to `target`, `GAP` apart, from a socket allowed to
/// broadcast. Succeeds once every packet was handed to the network; fails on the first send the
/// host refuses (no route, a firewall), saying where it was going.
pub async fn wake(mac: &Mac, target: SocketAddr) -> Result<Audit, PowerError> {
    let start = Instant::now();
    let who = format!("wol {mac} via {target}");
    let unreachable = |what: &str, e: std::io::Error| PowerError::Unreachable {
        bmc: who.clone(),
        detail: format!("{what}: {e}"),
    };
    let local: SocketAddr = match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local)
        .await
        .map_err(|e| unreachable("opening a UDP socket", e))?;
    // Without SO_BROADCAST the kernel refuses a send to a broadcast address (EACCES).
    socket
        .set_broadcast(true)
        .map_err(|e| unreachable("allowing broadcast", e))?;
    let packet = magic_packet(mac);
    let mut audit = Audit {
        driver: KIND.name.to_owned(),
        ..Audit::default()
    };
    for n in 0..PACKETS {
        if n > 0 {
            tokio::time::sleep(GAP).await;
        }
        let sent = socket
            .send_to(&packet, target)
            .await
            .map_err(|e| unreachable("sending the magic packet", e))?;
        audit.attempts += 1;
        audit.sent.push(Sent {
            value: format!("magic packet for {mac} to {target}"),
            answer: format!("sent ({sent} bytes); a machine answers by beating"),
            at_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
    }
    audit.duration = start.elapsed();
    Ok(audit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_magic_packet_is_six_ff_then_the_mac_sixteen_times() {
        let mac: Mac = "52:54:00:12:34:56".parse().unwrap();
        let packet = magic_packet(&mac);
        assert_eq!(packet.len(), 102);
        assert_eq!(packet[..6], [0xFF; 6]);
        for i in 0..16 {
            let at = 6 + 6 * i;
            assert_eq!(
                packet[at..at + 6],
                [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
                "copy {i}"
            );
        }
    }

    // The proof: the packet captured on a loopback UDP socket, byte for byte.
    #[tokio::test]
    async fn the_packets_arrive_on_a_loopback_socket_byte_for_byte() {
        let listener = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let mac: Mac = "0a-1B-2c-3D-4e-5F".parse().unwrap();
        let audit = wake(&mac, target).await.unwrap();
        let mut expected = vec![0xFF; 6];
        for _ in 0..16 {
            expected.extend_from_slice(&[0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]);
        }
        for n in 0..PACKETS {
            let mut buf = [0u8; 512];
            let (len, from) =
                tokio::time::timeout(Duration::from_secs(10), listener.recv_from(&mut buf))
                    .await
                    .expect("a packet within 10 s")
                    .unwrap();
            assert_eq!(&buf[..len], expected.as_slice(), "packet {n}");
            assert!(from.ip().is_loopback(), "{from}");
        }
        assert_eq!(audit.driver, "wol");
        assert_eq!(audit.attempts, PACKETS);
        assert_eq!(
            audit.verified, None,
            "WoL verifies nothing: the heartbeat does"
        );
        assert_eq!(audit.sent.len(), PACKETS as usize);
        assert_eq!(
            audit.sent[0].value,
            format!("magic packet for 0a:1b:2c:3d:4e:5f to {target}")
        );
        assert!(audit.sent[0].answer.starts_with("sent (102 bytes)"));
    }

    #[tokio::test]
    async fn a_send_the_host_refuses_fails_naming_the_target() {
        // Port 0 is no destination: the kernel refuses the send at once.
        let mac: Mac = "52:54:00:12:34:56".parse().unwrap();
        let err = wake(&mac, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("wol 52:54:00:12:34:56 via 127.0.0.1:0: unreachable (sending"),
            "{text}"
        );
    }
}
