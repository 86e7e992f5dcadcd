//! Wake-on-LAN's configuration (SPEC §4.10, `docs/drivers.md`): the machine's `mac`, and the
//! `broadcast` address its packets go to (the subnet's broadcast or the machine's own: broadcasts
//! do not cross VLANs). A wol driver sends no power-off, so its slot needs `off: agent`. Pure: no
//! I/O.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::power::fields::{Fields, Kind, OffBy};

pub const KIND: Kind = Kind {
    name: "wol",
    shown: "wol (Wake-on-LAN)",
    fields: &["mac", "broadcast"],
    choices: &[],
};

/// The port a Wake-on-LAN packet goes to when the broadcast address names none (the discard
/// port, which every WoL tool uses).
pub const WOL_PORT: u16 = 9;
/// Where a Wake-on-LAN packet goes when the file names no `broadcast`: 255.255.255.255:9.
pub const DEFAULT_BROADCAST: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::BROADCAST), WOL_PORT);

/// Wake-on-LAN: magic packets to an address of the machine's own network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WolDriver {
    pub mac: Mac,
    /// A subnet-directed broadcast address or the machine's own address, with a port:
    /// broadcasts do not cross VLANs, so the address is the machine's, not the fleet's.
    pub broadcast: SocketAddr,
}

/// A wol driver from its fields.
pub fn read(fields: &mut Fields<'_, '_>) -> Option<WolDriver> {
    if fields.off() != OffBy::Agent {
        fields.refuse(
            "off",
            "Wake-on-LAN has no power-off: add off: agent (the bench's own fleet agent powers \
             the machine off, started with --power-off-command)",
        );
    }
    let mac = fields.required(
        "mac",
        "the machine's MAC address, like 52:54:00:12:34:56",
        str::parse,
    );
    let broadcast = fields.optional("broadcast", broadcast);
    Some(WolDriver {
        mac: mac?,
        broadcast: broadcast?.unwrap_or(DEFAULT_BROADCAST),
    })
}

/// A Wake-on-LAN target: `host:port` or a bare address (port 9). An IPv6 address with a port
/// is written `[addr]:port`. Port 0 reaches nothing.
pub fn broadcast(text: &str) -> Result<SocketAddr, String> {
    let addr = match (text.parse::<SocketAddr>(), text.parse::<std::net::IpAddr>()) {
        (Ok(addr), _) => addr,
        (_, Ok(ip)) => SocketAddr::new(ip, WOL_PORT),
        _ => {
            return Err(format!(
                "invalid broadcast {text:?}: an IP address with an optional port, like \
                 192.168.1.255:9 (the subnet's broadcast address, or the machine's own)"
            ));
        }
    };
    if addr.port() == 0 {
        return Err(format!(
            "invalid broadcast {text:?}: port 0 reaches nothing; use 9 or 7"
        ));
    }
    Ok(addr)
}

/// A MAC address (EUI-48).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Mac(pub [u8; 6]);

impl FromStr for Mac {
    type Err = String;

    /// Six pairs of hex digits separated by `:` or `-` (`52:54:00:12:34:56`), in either case.
    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || {
            format!(
                "invalid MAC address {text:?}: six pairs of hex digits separated by ':' or '-', \
                 like 52:54:00:12:34:56"
            )
        };
        let separator = if text.contains('-') { '-' } else { ':' };
        let parts: Vec<&str> = text.split(separator).collect();
        if parts.len() != 6 {
            return Err(invalid());
        }
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(parts) {
            if part.len() != 2 || !part.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(invalid());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| invalid())?;
        }
        Ok(Mac(mac))
    }
}

impl TryFrom<String> for Mac {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<Mac> for String {
    fn from(mac: Mac) -> String {
        mac.to_string()
    }
}

impl fmt::Display for Mac {
    /// Lowercase, `:`-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broadcast_is_an_address_with_port_9_unless_it_names_one_but_0() {
        assert_eq!(broadcast("10.1.2.255"), Ok("10.1.2.255:9".parse().unwrap()));
        assert_eq!(
            broadcast("10.1.2.255:7"),
            Ok("10.1.2.255:7".parse().unwrap())
        );
        assert_eq!(broadcast("[fe80::1]:9"), Ok("[fe80::1]:9".parse().unwrap()));
        assert_eq!(DEFAULT_BROADCAST, "255.255.255.255:9".parse().unwrap());
        assert!(
            broadcast("10.0.0.255:0")
                .unwrap_err()
                .contains("port 0 reaches nothing")
        );
        assert!(
            broadcast("lan.example")
                .unwrap_err()
                .contains("an IP address")
        );
    }

    #[test]
    fn a_mac_is_six_hex_pairs_shown_lowercase_with_colons() {
        let mac: Mac = "52-54-00-AB-CD-EF".parse().unwrap();
        assert_eq!(mac.to_string(), "52:54:00:ab:cd:ef");
        for bad in [
            "52:54:00:12:34",
            "52:54:00:12:34:5g",
            "525400123456",
            "52:54:00:12:34:567",
        ] {
            assert!(bad.parse::<Mac>().is_err(), "{bad}");
        }
    }
}
