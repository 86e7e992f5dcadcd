//! Unit tests of the configuration's parts; the file's behaviour as a whole is tested in
//! `tests/config.rs`.

use std::path::Path;

use super::raw::parse_count;
use super::*;

#[test]
fn env_names_are_shell_names_outside_the_fleet_prefix() {
    for good in ["BMC", "_x", "a1", "BMC_HOST", "fleet_lowercase", "FLEETX"] {
        assert_eq!(check_env_name(good), Ok(()), "{good}");
    }
    for bad in ["", "1A", "A-B", "A B", "A=B", "é", "A.B"] {
        let err = check_env_name(bad).expect_err(bad);
        assert!(err.contains("a letter or '_'"), "{bad:?}: {err}");
    }
    for reserved in ["FLEET_SLOT", "FLEET_OPERATION", "FLEET_ANYTHING", "FLEET_"] {
        let err = check_env_name(reserved).expect_err(reserved);
        assert!(err.contains("is reserved"), "{reserved}: {err}");
        assert!(err.contains("FLEET_PROVIDER_ID"), "{reserved}: {err}");
    }
}

#[test]
fn counts_are_whole_numbers_read_from_text() {
    assert_eq!(parse_count("0"), Ok(0));
    assert_eq!(parse_count("4"), Ok(4));
    assert_eq!(parse_count("4294967295"), Ok(u32::MAX));
    for bad in ["-1", "4294967296", "1.5", "1e3", "+4", "", "four", "0x10"] {
        let err = parse_count(bad).expect_err(bad);
        assert!(err.contains("a whole number from 0"), "{bad:?}: {err}");
    }
}

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
