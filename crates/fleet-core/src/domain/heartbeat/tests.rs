use super::*;
use crate::domain::state::{Flaw, State, decide};

const AT: i64 = 1_767_225_600_000;

fn value(extra: &str) -> Vec<u8> {
    format!("{{\"v\":1,\"at\":{AT},\"ttl\":30000{extra}}}").into_bytes()
}

fn kind(read: &Read) -> Option<Flaw> {
    match &read.reading {
        Reading::Unreadable(u) => Some(u.kind),
        Reading::Missing | Reading::Beat(_) => None,
    }
}

#[test]
fn a_well_formed_value_decodes() {
    let v = br#"{"v":1,"at":1799999990000,"ttl":30000,"hold":"upgrade","load":21,"cores":16}"#;
    let read = decode_beat(v);
    let Reading::Beat(key) = read.reading else {
        panic!("{read:?}")
    };
    assert_eq!(key.ttl, Duration::from_secs(30));
    assert_eq!(key.hold.unwrap().as_str(), "upgrade");
    assert_eq!(key.written_at.timestamp_millis(), 1_799_999_990_000);
    assert_eq!((read.load, read.cores), (Some(21.0), Some(16)));
}

// docs/protocol.md §3, the rows a read decides before the clock: missing, of another type, too
// large, not a value of §2; each with its kind.
#[test]
fn a_key_reads_by_what_the_bounded_read_found() {
    assert_eq!(read(Found::Missing).reading, Reading::Missing);
    assert_eq!(read(Found::Bytes(b"")).reading, Reading::Missing);
    let hash = read(Found::OtherType(Some("hash")));
    assert_eq!(kind(&hash), Some(Flaw::WrongType));
    assert!(format!("{:?}", hash.reading).contains("holds a hash"));
    assert_eq!(kind(&read(Found::OtherType(None))), Some(Flaw::WrongType));
    let big = vec![b' '; MAX_VALUE + 1];
    assert_eq!(kind(&read(Found::Bytes(&big))), Some(Flaw::TooLarge));
    let mut padded = value("");
    padded.resize(MAX_VALUE, b' ');
    assert!(
        matches!(read(Found::Bytes(&padded)).reading, Reading::Beat(_)),
        "2048 bytes"
    );
    assert_eq!(kind(&read(Found::Bytes(b"hello"))), Some(Flaw::Unreadable));
}

// docs/protocol.md §2: each rule of `v`, `at`, `ttl` and `hold` that makes a value unreadable.
#[test]
fn a_value_that_breaks_a_rule_of_the_state_is_unreadable_saying_why() {
    let max_at = MAX_AT_MS;
    for (value, want) in [
        (&b"hello"[..], "not a heartbeat"),
        (&[0xff, 0xfe][..], "not UTF-8"),
        (
            b"{\"v\":1,\"at\":1,\"ttl\":1,\"hold\":\"\xed\xa0\x80\"}",
            "not UTF-8",
        ),
        (br#"{"v":2,"at":1,"ttl":1}"#, "version 2"),
        (br#"{"v":1.0,"at":1,"ttl":1}"#, "v is not the integer 1"),
        (br#"{"v":"1","at":1,"ttl":1}"#, "v is not the integer 1"),
        (br#"{"v":null,"at":1,"ttl":1}"#, "v is not the integer 1"),
        (br#"{"at":1,"ttl":1}"#, "no v"),
        (br#"{"v":1,"ttl":1}"#, "no at"),
        (br#"{"v":1,"at":1}"#, "no ttl"),
        (br#"{"v":1,"at":null,"ttl":1}"#, "at is not a number"),
        (br#"{"v":1,"at":1,"ttl":-5}"#, "ttl -5 is out of its range"),
        (
            br#"{"v":1,"at":1,"ttl":2592000001}"#,
            "ttl 2592000001 is out of its range",
        ),
        (
            br#"{"v":1,"at":1,"ttl":3e4}"#,
            "ttl 3e4 is not written as an integer",
        ),
        (
            br#"{"v":1,"at":1,"ttl":30000.0}"#,
            "not written as an integer",
        ),
        (br#"{"v":1,"at":-1,"ttl":1}"#, "at -1 is out of its range"),
        (
            br#"{"v":1,"at":8000000000000001,"ttl":1}"#,
            "out of its range",
        ),
        (br#"{"v":1,"at":1,"ttl":1,"hold":"a\tb"}"#, "bad hold"),
        (br#"{"v":1,"at":1,"ttl":1,"hold":""}"#, "bad hold"),
        (br#"{"v":1,"at":1,"ttl":1,"hold":"\u202e"}"#, "bad hold"),
        (br#"{"v":1,"at":1,"ttl":1,"hold":7}"#, "hold is not text"),
        (br#"{"v":1,"at":1,"ttl":1,"v":1}"#, "named twice"),
        (br#"{"v":1,"at":1,"ttl":1,"x":"\ud800"}"#, "lone surrogate"),
        (br#"[{"v":1,"at":1,"ttl":1}]"#, "not a JSON object"),
    ] {
        let read = decode_beat(value);
        assert_eq!(kind(&read), Some(Flaw::Unreadable), "{value:?}");
        match &read.reading {
            Reading::Unreadable(u) => assert!(u.why.contains(want), "{value:?}: {}", u.why),
            other => panic!("{value:?} read as {other:?}"),
        }
    }
    let at_max = format!("{{\"v\":1,\"at\":{max_at},\"ttl\":2592000000}}");
    assert!(matches!(
        decode_beat(at_max.as_bytes()).reading,
        Reading::Beat(_)
    ));
    let zero = decode_beat(br#"{"v":1,"at":-0,"ttl":0,"hold":null}"#);
    let Reading::Beat(key) = zero.reading else {
        panic!("{zero:?}")
    };
    assert_eq!(
        (key.written_at.timestamp_millis(), key.ttl, key.hold),
        (0, Duration::ZERO, None)
    );
}

// docs/protocol.md §2: `load` and `cores` never make a value unreadable. Out of range, of another
// type, in another form, or null, each is dropped alone and the beat counts.
#[test]
fn load_and_cores_out_of_their_ranges_are_dropped_and_the_beat_counts() {
    for (extra, load, cores) in [
        (",\"load\":21.0,\"cores\":16", Some(21.0), Some(16)),
        (",\"load\":0,\"cores\":1", Some(0.0), Some(1)),
        (
            ",\"load\":1000000,\"cores\":4294967295",
            Some(1e6),
            Some(u32::MAX),
        ),
        (",\"load\":1e6", Some(1e6), None),
        (",\"load\":2.5E-1", Some(0.25), None),
        (",\"load\":-0", Some(0.0), None),
        (",\"load\":-1.0", None, None),
        (",\"load\":1000000.5", None, None),
        (",\"load\":1e400", None, None),
        (",\"load\":\"21\"", None, None),
        (",\"load\":true", None, None),
        (",\"load\":null,\"cores\":null", None, None),
        (",\"load\":[21]", None, None),
        (",\"cores\":0", None, None),
        (",\"cores\":-1", None, None),
        (",\"cores\":4294967296", None, None),
        (",\"cores\":16.0", None, None),
        (",\"cores\":1.6e1", None, None),
        (",\"cores\":\"16\"", None, None),
        (",\"cores\":{}", None, None),
        (
            ",\"cores\":99999999999999999999999999999999999999999999",
            None,
            None,
        ),
    ] {
        let read = decode_beat(&value(extra));
        assert!(
            matches!(read.reading, Reading::Beat(_)),
            "{extra}: {read:?}"
        );
        assert_eq!((read.load, read.cores), (load, cores), "{extra}");
        assert!(
            read.load.is_none_or(|l| l.is_sign_positive()),
            "{extra}: -0 reads as 0"
        );
    }
}

/// A JSON text for a number in `load` or `cores`: an integer, a fraction or an exponent form.
fn number() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
        (any::<i32>(), -400i32..400).prop_map(|(m, e)| format!("{m}e{e}")),
        Just("null".to_owned()),
        Just("\"7\"".to_owned()),
        Just("true".to_owned()),
        Just("[1,2]".to_owned()),
    ]
}

proptest::proptest! {
    // The seed's principle over the whole space of `load` and `cores`: whatever they hold, the
    // state, the hold, the TTL and the error are the same as without them.
    #[test]
    fn load_and_cores_never_have_a_say_in_the_state(
        load in proptest::option::of(number()),
        cores in proptest::option::of(number()),
        held: bool,
        now in -40_000i64..40_000,
    ) {
        let hold = if held { ",\"hold\":\"h\"" } else { "" };
        let mut extra = hold.to_owned();
        if let Some(l) = &load {
            extra.push_str(&format!(",\"load\":{l}"));
        }
        if let Some(c) = &cores {
            extra.push_str(&format!(",\"cores\":{c}"));
        }
        let with = decode_beat(&value(&extra));
        let without = decode_beat(&value(hold));
        let now = DateTime::from_timestamp_millis(AT + now).unwrap();
        proptest::prop_assert_eq!(decide(&with.reading, now), decide(&without.reading, now));
        if let Some(l) = with.load {
            proptest::prop_assert!((0.0..=MAX_LOAD).contains(&l));
        }
        proptest::prop_assert!(with.cores.is_none_or(|c| c >= 1));
    }

    // Any bytes at all: a reading, never a panic; a value that reads as a beat has its fields in
    // their ranges.
    #[test]
    fn any_bytes_read_as_a_reading(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
        let read = read(Found::Bytes(&bytes));
        if let Reading::Beat(key) = &read.reading {
            proptest::prop_assert!(key.ttl <= MAX_TTL);
            proptest::prop_assert!((0..=MAX_AT_MS).contains(&key.written_at.timestamp_millis()));
        }
        let verdict = decide(&read.reading, DateTime::from_timestamp_millis(AT).unwrap());
        if !matches!(read.reading, Reading::Beat(_)) {
            proptest::prop_assert_eq!(verdict.state, State::Down);
        }
    }
}

#[test]
fn a_hold_counts_characters_as_unicode_scalar_values() {
    // 256 characters of four bytes each (a UTF-16 reader counts 512 code units): a valid hold.
    let emoji = "😀".repeat(256);
    let read = decode_beat(&value(&format!(",\"hold\":\"{emoji}\"")));
    assert!(matches!(read.reading, Reading::Beat(_)), "{read:?}");
    let escaped = "\\ud83d\\ude00".repeat(257);
    let read = decode_beat(&value(&format!(",\"hold\":\"{escaped}\"")));
    assert_eq!(kind(&read), Some(Flaw::Unreadable), "257 characters");
}

#[test]
fn garbage_hold_requests_are_no_requests() {
    for raw in [
        &b"nonsense"[..],
        br#"{"reason":""}"#,
        br#"{"until":5}"#,
        br#"{"reason":"x","until":1.5}"#,
        br#"{"reason":"x","until":"5"}"#,
        br#"{"reason":"x","until":true}"#,
        br#"{"reason":"x","until":8000000000000001}"#,
        br#"{"reason":"x","until":1e400}"#,
        br#"{"reason":"\ud800"}"#,
        br#"{"reason":7}"#,
        br#"{"reason":"x"} x"#,
        b"{\"reason\":\"\xff\"}",
    ] {
        assert_eq!(
            decode_request(raw),
            None,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn a_hold_request_reads_as_the_previous_release_read_it() {
    let until = |raw: &[u8]| {
        let r = decode_request(raw).unwrap();
        (
            r.reason.as_str().to_owned(),
            r.until.map(|u| u.timestamp_millis()),
        )
    };
    assert_eq!(until(br#"{"reason":"x","until":5}"#), ("x".into(), Some(5)));
    assert_eq!(
        until(br#"{"reason":"x","until":9e12}"#),
        ("x".into(), Some(9_000_000_000_000))
    );
    assert_eq!(
        until(br#"{"reason":"x","until":9000000000000.0}"#),
        ("x".into(), Some(9_000_000_000_000))
    );
    assert_eq!(
        until(br#"{"reason":"x","until":-8e15}"#),
        ("x".into(), Some(-8_000_000_000_000_000))
    );
    assert_eq!(until(br#"{"reason":"x","until":null}"#), ("x".into(), None));
    assert_eq!(
        until(br#"{"reason":"a","reason":"b"}"#),
        ("b".into(), None),
        "the last counts"
    );
    assert_eq!(
        until(br#"{"reason":"a\/b","rack":[1]}"#),
        ("a/b".into(), None)
    );
}
