//! The agent's rules (docs/protocol.md §5, SPEC §2.4): the hold a beat carries, whether a beat
//! changes its bench's state (and so announces it on the wake channel), and whether a beat whose
//! reply arrived is sent again at once.
//!
//! A beat is planned from what its process knows (the last reply's `TIME` and hold request, the
//! value it wrote last); its reply says what was so (the key as the `SET` found it, the request,
//! the server's `TIME`). Two rules make a bench's state what it would have been had the beat known
//! right, within one round trip: a beat whose carried hold the reply shows wrong, or whose stamp
//! is off the server's clock, is sent again at once; a change of state the beat did not announce
//! (the key was deleted or expired behind the process's back) is announced at once.
//!
//! Pure: no I/O, no clock; every time is the server's, in ms.

use chrono::DateTime;

use super::heartbeat::decode_beat;
use super::name::Reason;
use super::state::{HoldRequest, Reading, decide};

/// How far a beat's stamp may be from the `TIME` its own reply carries, either way, before it is
/// sent again at once, stamped from that `TIME`: a second, the tolerance the reader allows a beat
/// from the server's future (SPEC §2.2 row 2b).
pub const STAMP_TOLERANCE_MS: i64 = 1_000;

/// The hold a beat stamped `at_ms` carries: the bench's own, else the operator's request while it
/// stands at `at_ms` (a request the reader would refuse never reaches here: it is no request).
pub fn carried(own: Option<&Reason>, request: Option<&HoldRequest>, at_ms: i64) -> Option<Reason> {
    if let Some(own) = own {
        return Some(own.clone());
    }
    let at = DateTime::from_timestamp_millis(at_ms)?;
    request.filter(|r| r.stands(at)).map(|r| r.reason.clone())
}

/// Whether writing `after` (its hold and deadline in ms; `None` deletes the key) over the key as
/// it was (`before`, its bytes) changes the bench's state at the server time `now_ms`: the key did
/// not count (no key, past its deadline, unreadable, from the server's future), the hold was put
/// on, changed or taken off, the deadline came earlier, or a TTL of 0 deleted a key that counted
/// (SPEC §4.5). A steady beat, the same hold and a deadline no earlier over a key that counts,
/// changes nothing.
pub fn changes(before: Option<&[u8]>, after: Option<(Option<&str>, i64)>, now_ms: i64) -> bool {
    let now = DateTime::from_timestamp_millis(now_ms).unwrap_or_default();
    let counted = before.and_then(|raw| {
        let reading = decode_beat(raw).reading;
        let verdict = decide(&reading, now);
        match reading {
            Reading::Beat(key) if verdict.state.is_present() => {
                Some((verdict.hold, key.deadline().timestamp_millis()))
            }
            _ => None,
        }
    });
    match (counted, after) {
        (None, None) => false,
        (Some(_), None) | (None, Some(_)) => true,
        (Some((was_hold, was_deadline)), Some((hold, deadline))) => {
            was_hold.as_ref().map(Reason::as_str) != hold || deadline < was_deadline
        }
    }
}

/// Whether a beat stamped `at_ms` that carried `carried` is sent again at once, once its reply
/// came with the server's `reply_ms`: the stamp is more than [`STAMP_TOLERANCE_MS`] off it, or
/// the hold the beat carries by the reply (`due`: the bench's own, else the reply's request as it
/// stands at `reply_ms`) is not the one it carried. A beat is sent again at most once.
pub fn again(at_ms: i64, reply_ms: i64, carried: Option<&str>, due: Option<&str>) -> bool {
    reply_ms.abs_diff(at_ms) > STAMP_TOLERANCE_MS.unsigned_abs() || carried != due
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_800_000_000_000;

    fn value(at: i64, ttl: u64, hold: Option<&str>) -> Vec<u8> {
        let hold = hold.map_or(String::new(), |h| format!(",\"hold\":\"{h}\""));
        format!("{{\"v\":1,\"at\":{at},\"ttl\":{ttl}{hold}}}").into_bytes()
    }

    // SPEC §4.5: what a beat announces, over the kinds of key it may find and write.
    #[test]
    fn a_beat_announces_exactly_the_changes_of_state() {
        let held = Some("upgrade");
        let counting = value(T - 1_000, 30_000, None);
        let counting_held = value(T - 1_000, 30_000, Some("upgrade"));
        let expired = value(T - 40_000, 30_000, None);
        let future = value(T + 5_000, 30_000, None);
        type Case<'a> = (
            Option<&'a [u8]>,
            Option<(Option<&'a str>, i64)>,
            bool,
            &'a str,
        );
        let cases: &[Case] = &[
            (None, None, false, "nothing deleted"),
            (None, Some((None, T + 30_000)), true, "a first beat"),
            (Some(&counting), None, true, "a counting key deleted"),
            (Some(&expired), None, false, "an expired key deleted"),
            (
                Some(&expired),
                Some((None, T + 30_000)),
                true,
                "a key past its deadline renewed",
            ),
            (
                Some(&future),
                Some((None, T + 30_000)),
                true,
                "a key from the future replaced",
            ),
            (
                Some(b"garbage"),
                Some((None, T + 30_000)),
                true,
                "an unreadable key replaced",
            ),
            (
                Some(&counting),
                Some((None, T + 30_000)),
                false,
                "a steady beat",
            ),
            (
                Some(&counting),
                Some((None, T + 29_000)),
                false,
                "the same deadline",
            ),
            (
                Some(&counting),
                Some((None, T + 28_999)),
                true,
                "a deadline brought forward",
            ),
            (
                Some(&counting),
                Some((held, T + 30_000)),
                true,
                "a hold put on",
            ),
            (
                Some(&counting_held),
                Some((None, T + 30_000)),
                true,
                "a hold taken off",
            ),
            (
                Some(&counting_held),
                Some((held, T + 30_000)),
                false,
                "a hold kept",
            ),
            (
                Some(&counting_held),
                Some((Some("other"), T + 30_000)),
                true,
                "a hold changed",
            ),
        ];
        for (before, after, want, what) in cases {
            assert_eq!(changes(*before, *after, T), *want, "{what}");
        }
    }

    // docs/protocol.md §5: a beat is sent again at once exactly when its stamp is more than a
    // second off its reply's TIME, or the hold it carried is not the one the reply gives.
    #[test]
    fn a_beat_is_sent_again_when_its_reply_shows_it_wrong() {
        for (at, reply, carried, due, want) in [
            (T, T, None, None, false),
            (T, T + 1_000, None, None, false),
            (T, T + 1_001, None, None, true),
            (T, T - 1_000, None, None, false),
            (T, T - 1_001, None, None, true),
            (T, T, None, Some("drain"), true),
            (T, T, Some("drain"), None, true),
            (T, T, Some("drain"), Some("other"), true),
            (T, T + 5, Some("drain"), Some("drain"), false),
        ] {
            assert_eq!(
                again(at, reply, carried, due),
                want,
                "{at} {reply} {carried:?} {due:?}"
            );
        }
    }

    #[test]
    fn a_beat_carries_its_own_hold_else_a_standing_request() {
        let reason = |s: &str| Reason::parse(s).unwrap();
        let request = |until: Option<i64>| HoldRequest {
            reason: reason("asked"),
            until: until.map(|u| DateTime::from_timestamp_millis(u).unwrap()),
        };
        let own = reason("mine");
        let text = |h: Option<Reason>| h.map(|h| h.as_str().to_owned());
        assert_eq!(
            text(carried(Some(&own), Some(&request(None)), T)),
            Some("mine".into())
        );
        assert_eq!(
            text(carried(None, Some(&request(None)), T)),
            Some("asked".into())
        );
        assert_eq!(
            text(carried(None, Some(&request(Some(T + 1))), T)),
            Some("asked".into())
        );
        assert_eq!(
            text(carried(None, Some(&request(Some(T))), T)),
            None,
            "lapsed at `at`"
        );
        assert_eq!(text(carried(None, None, T)), None);
    }
}
