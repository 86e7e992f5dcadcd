//! Power without scripts (SPEC §4.10): fleet's own power drivers, run behind the operation port
//! like a command or a Job. Each driver turns an intent (on, off) into its protocol's calls and
//! reports what it did as an audit record; none decides anything about claims. The heartbeat
//! stays the observation of record: a driver's power reading is a second opinion that confirms
//! an off landed, never what makes a machine count as on.
//!
//! A driver is in one place: its folder holds its protocol and its configuration
//! (`<name>/config.rs`: its fields as the file gives them, their checks, its typed
//! configuration); this module lists it (a variant of [`DriverKind`], a row of [`KINDS`]), and
//! [`drive`] has its arms. The configuration file's reader (`config`, a layer above) takes the
//! drivers' configuration from here; this layer imports only `domain` and `units` of fleet
//! (SPEC §1.2).
//!
//! - [`action`]: what a driver is asked and answers: the intent, the power reading, the audit
//!   record, the error, and the password, which never shows.
//! - [`drive`]: running a slot's driver for one operation, in the operation wrapper: the one
//!   dispatch over the drivers.
//! - [`fields`]: a driver's entries as the file gives them, a slot's merged over its group's,
//!   each problem at its place, and the fields several drivers share.
//! - `wol`: Wake-on-LAN magic packets (on only).
//! - `redfish`: `ComputerSystem.Reset` and `PowerState` over HTTPS.
//! - `ipmi`: chassis power through `ipmitool` (LAN+).
//! - `secrets`: the BMC passwords fleet took out of its environment at start.
//!
//! The leader's periodic reading of each Redfish and IPMI slot's BMC runs with the controller
//! (`reconcile::bmc`), over `drive::read_state`.
//!
//! Secrets (BMC passwords) are read when an operation runs, from a file or an environment
//! variable named in the configuration (held in [`secrets`] since start); they are held in
//! [`Secret`], whose `Debug` and `Display` never show them.

pub mod action;
pub mod drive;
pub mod fields;
pub mod ipmi;
pub mod redfish;
pub mod secrets;
pub mod wol;

use std::sync::LazyLock;

use serde::{Deserialize, Deserializer, Serialize};

pub use self::action::{Audit, Bmc, Intent, PowerError, PowerState, SOFT_SHARE, Secret, Sent};
use self::fields::{Given, Registered, Said, Written};
pub use self::fields::{OffBy, SecretSource};

/// How a slot's machine is powered, and how its power-off is sent. It travels in an operation's
/// request to the wrapper, so it is serialized; it holds where a password is, never the password.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Driver {
    pub kind: DriverKind,
    /// `agent`: the power-off goes through the bench's own `fleet agent` (SPEC §4.10); required
    /// for Wake-on-LAN, which has no off.
    #[serde(default)]
    pub off: OffBy,
}

/// The protocol that powers the machine on (and off, unless `off: agent`), with its
/// configuration: one variant per driver, tagged with its `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DriverKind {
    Wol(wol::config::WolDriver),
    Redfish(redfish::config::RedfishDriver),
    Ipmi(ipmi::config::IpmiDriver),
}

/// Every driver fleet has: its type and fields, and how its configuration is read from the
/// file (SPEC §4.10), in the order the messages list them.
pub const KINDS: &[Registered<DriverKind>] = &[
    Registered {
        kind: wol::config::KIND,
        read: |fields| wol::config::read(fields).map(DriverKind::Wol),
    },
    Registered {
        kind: redfish::config::KIND,
        read: |fields| redfish::config::read(fields).map(DriverKind::Redfish),
    },
    Registered {
        kind: ipmi::config::KIND,
        read: |fields| ipmi::config::read(fields).map(DriverKind::Ipmi),
    },
];

impl DriverKind {
    /// The driver's `type`, as the file spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            DriverKind::Wol(_) => wol::config::KIND.name,
            DriverKind::Redfish(_) => redfish::config::KIND.name,
            DriverKind::Ipmi(_) => ipmi::config::KIND.name,
        }
    }

    /// Where the driver's password is, for the check at start and on reload.
    pub fn password(&self) -> Option<&SecretSource> {
        match self {
            DriverKind::Wol(_) => None,
            DriverKind::Redfish(r) => Some(&r.password),
            DriverKind::Ipmi(i) => Some(&i.password),
        }
    }
}

impl Driver {
    /// The driver's `type`, as the file spells it.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }

    /// Where the driver's password is, for the check at start and on reload.
    pub fn password(&self) -> Option<&SecretSource> {
        self.kind.password()
    }
}

/// The types of driver, as a message lists them: `wol, redfish or ipmi`.
pub fn type_names() -> String {
    fields::listed(KINDS.iter().map(|r| r.kind.name))
}

/// A group's `driver`, read alone: its values checked where they are written.
pub fn defaults(group: Given<'_>, said: &mut dyn Said) {
    fields::defaults(KINDS, group, said);
}

/// A slot's driver: its group's defaults with its own fields over them; `Some(None)` when
/// neither gives one, `None` when it has a problem (said at its place).
pub fn driver(
    group: Option<Given<'_>>,
    slot: Option<Given<'_>>,
    place: &str,
    said: &mut dyn Said,
) -> Option<Option<Driver>> {
    let read = fields::read(KINDS, group, slot, place, said)?;
    Some(read.map(|(kind, off)| Driver { kind, off }))
}

impl<'de> Deserialize<'de> for Written {
    /// An entry whose keys are those some driver takes: a key no driver takes is refused,
    /// naming it and every key there is.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        static KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| fields::keys(KINDS));
        Written::read(d, KEYS.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A driver travels in an operation's request tagged with its type (SPEC §4.10), and the
    // registry lists the drivers in the order of their variants.
    #[test]
    fn each_driver_travels_tagged_with_its_type_as_the_registry_names_it() {
        let password = || SecretSource::Env("BMC_PASS".into());
        let drivers = [
            DriverKind::Wol(wol::config::WolDriver {
                mac: wol::config::Mac([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
                broadcast: wol::config::DEFAULT_BROADCAST,
            }),
            DriverKind::Redfish(redfish::config::RedfishDriver {
                endpoint: "https://10.0.0.21".into(),
                system: None,
                username: "admin".into(),
                password: password(),
                ca_file: None,
                tls_fingerprint: None,
                insecure: false,
            }),
            DriverKind::Ipmi(ipmi::config::IpmiDriver {
                host: "10.0.0.31".into(),
                port: 623,
                username: "admin".into(),
                password: password(),
                cipher_suite: None,
            }),
        ];
        let listed: Vec<&str> = KINDS.iter().map(|r| r.kind.name).collect();
        let named: Vec<&str> = drivers.iter().map(DriverKind::type_name).collect();
        assert_eq!(named, listed);
        for kind in drivers {
            let json = serde_json::to_value(&kind).unwrap();
            assert_eq!(json["type"], kind.type_name(), "{json}");
            assert_eq!(serde_json::from_value::<DriverKind>(json).unwrap(), kind);
        }
        assert_eq!(type_names(), "wol, redfish or ipmi");
    }
}
