//! Unit tests of the configuration's parts; the file's behaviour as a whole is tested in
//! `tests/pure/config.rs`.

use std::path::Path;

use super::*;
use crate::power::redfish::config::{RedfishDriver, TlsFingerprint};
use crate::power::{Driver, DriverKind};

/// What `openssl x509 -noout -fingerprint -sha256` prints (after `sha256:`).
const OPENSSL_FORM: &str = "6D:40:AE:D7:B3:D4:CC:42:97:26:97:90:0D:0A:7C:77:CF:2E:D7:30:BD:BD:D1:AD:4C:19:42:F6:09:25:85:15";

#[test]
fn a_group_without_slots_or_with_max_size_above_them_is_doubted_not_refused() {
    let yaml = |max: u32, slots: &str| {
        format!(
            "groups:\n  - {{ name: a, min_size: 0, max_size: {max}, startup: {{ command: [on] }}, shutdown: {{ command: [off] }} }}\n  - {{ name: b, min_size: 0, max_size: 1, startup: {{ command: [on] }}, shutdown: {{ command: [off] }} }}\nslots:\n{slots}"
        )
    };
    let both =
        "  - { name: s1, group: a }\n  - { name: s2, group: a }\n  - { name: t1, group: b }\n";
    let config = parse(&yaml(2, both), Path::new("f.yaml")).expect("valid");
    assert_eq!(config.doubts(), Vec::<String>::new());
    let config = parse(&yaml(3, both), Path::new("f.yaml")).expect("valid");
    assert_eq!(
        config.doubts(),
        ["group a: max_size 3 is above its 2 slot(s), so it can never be reached"]
    );
    let config = parse(
        &yaml(2, "  - { name: s1, group: a }\n"),
        Path::new("f.yaml"),
    )
    .expect("valid");
    let doubts = config.doubts();
    assert_eq!(doubts.len(), 2, "{doubts:?}");
    assert!(doubts[0].starts_with("group a: max_size 2 is above its 1 slot(s)"));
    assert!(
        doubts[1].starts_with("group b: it has no slots"),
        "{doubts:?}"
    );
}

#[test]
fn the_example_is_valid() {
    let config = parse(example(), Path::new("example.yaml"));
    assert_eq!(config.map(|c| c.slots.len()).ok(), Some(5));
}

/// A Redfish group with `group` in its driver and one slot n1 with `slot` in its own.
fn redfish_config(group: &str, slot: &str) -> String {
    format!(
        "groups:\n  - name: rack\n    max_size: 1\n    driver: {{ type: redfish, username: admin, \
         password_file: /etc/fleet/bmc-password{group} }}\nslots:\n  - {{ name: n1, group: rack, \
         driver: {{ endpoint: \"https://10.0.0.21\"{slot} }} }}\n"
    )
}

fn redfish_of(text: &str) -> Result<RedfishDriver, Vec<String>> {
    match parse(text, Path::new("fleet.yaml")) {
        Ok(config) => match config
            .slots
            .values()
            .next()
            .and_then(|s| s.driver.as_deref().cloned())
        {
            Some(Driver {
                kind: DriverKind::Redfish(r),
                ..
            }) => Ok(r),
            other => panic!("not a redfish driver: {other:?}"),
        },
        Err(ConfigError::Invalid { problems, .. }) => {
            Err(problems.iter().map(ToString::to_string).collect())
        }
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn a_redfish_tls_fingerprint_is_one_choice_with_ca_file_and_insecure() {
    let fingerprint = format!("sha256:{OPENSSL_FORM}");
    let pinned = format!(", tls_fingerprint: \"{fingerprint}\"");
    let want = Some(fingerprint.parse::<TlsFingerprint>().expect("valid"));

    let slot = redfish_of(&redfish_config("", &pinned)).expect("valid");
    assert_eq!(
        (slot.tls_fingerprint, slot.ca_file, slot.insecure),
        (want, None, false)
    );
    // The slot's fingerprint replaces the group's CA file: one choice, not two fields.
    let over = redfish_of(&redfish_config(", ca_file: /etc/fleet/ca.pem", &pinned)).expect("valid");
    assert_eq!((over.tls_fingerprint, over.ca_file), (want, None));
    // And a slot's CA file replaces the group's fingerprint.
    let back = redfish_of(&redfish_config(&pinned, ", ca_file: /etc/fleet/ca.pem")).expect("valid");
    assert_eq!(
        (back.tls_fingerprint, back.ca_file),
        (None, Some("/etc/fleet/ca.pem".into()))
    );
    let group = redfish_of(&redfish_config(&pinned, "")).expect("valid");
    assert_eq!(group.tls_fingerprint, want);

    for (slot, want) in [
        (
            ", tls_fingerprint: \"sha256:12:34\"".to_string(),
            "slots[0] (n1).driver.tls_fingerprint: invalid tls_fingerprint \
             \"sha256:12:34\": it is not 64 hex digits (with or without ':' between pairs); \
             write sha256: and the SHA-256 of the certificate the BMC presents, like \
             sha256:6D:40:AE:…:85:15 as `openssl x509 -noout -fingerprint -sha256` prints it",
        ),
        (
            format!("{pinned}, ca_file: /etc/fleet/ca.pem"),
            "slots[0] (n1).driver: both ca_file and tls_fingerprint: the fingerprint \
             accepts exactly one certificate, so the CA file is never used; keep one (the BMC's \
             own certificate may go in ca_file too)",
        ),
        (
            format!("{pinned}, insecure: true"),
            "slots[0] (n1).driver: both tls_fingerprint and insecure: true: insecure \
             accepts any certificate, so the fingerprint is never checked; keep tls_fingerprint",
        ),
    ] {
        assert_eq!(
            redfish_of(&redfish_config("", &slot)),
            Err(vec![want.to_string()]),
            "{slot}"
        );
    }
    // A group's bad fingerprint is said at the group's place.
    let problems = redfish_of(&redfish_config(", tls_fingerprint: AB:CD", "")).expect_err("bad");
    assert!(
        problems.iter().any(|p| p.starts_with(
            "groups[0] (rack).driver.tls_fingerprint: invalid tls_fingerprint \"AB:CD\": it does not start with sha256:"
        )),
        "{problems:#?}"
    );
}
