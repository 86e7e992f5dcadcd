//! When the controller must pass next to see a bench's key stop counting (SPEC §4.5, the wake
//! path): the earliest deadline among the keys that count at the last read.
//!
//! Expiry sends no message a controller can rely on (keyspace notifications lag by seconds,
//! reference §0.1), but every read already holds each key's deadline: the controller waits for
//! the earliest one instead of its next tick. The caller turns the span returned here into a
//! local timer from the moment the read returned, so the timer never fires before the deadline
//! on the server's clock (the read's `now` was taken before its reply arrived).
//!
//! Pure: no I/O, no clock, no environment, no async; `now` is the server time of the read.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::state::Bench;

/// How long after a deadline the controller passes. Redis hides a key once its own clock is past
/// the deadline (SPEC §2.2 row 3 reads it DOWN during the deadline's own millisecond anyway); the
/// margin covers the local timer's granularity and its clock running a little fast against the
/// server's over the wait.
pub const EXPIRY_MARGIN: Duration = Duration::from_millis(5);

/// The span from the read (server time `now`) to the pass that sees the first key that counts at
/// `now` stop counting: its deadline minus `now`, plus `margin`. `None` when no key counts, so
/// only the tick and the announced beats wake the controller.
///
/// A key counts by the presence rule itself (`state::decide`, SPEC §2.2 rows 5 and 6): a missing,
/// unreadable, outlived or future key is DOWN already and has no deadline to wait for.
pub fn expiry(benches: &[Bench], now: DateTime<Utc>, margin: Duration) -> Option<Duration> {
    benches
        .iter()
        .filter_map(|b| b.verdict(now).expires_in)
        .min()
        .map(|left| left.saturating_add(margin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::name::{BenchName, Reason};
    use crate::domain::state::{Key, Reading};
    use chrono::TimeZone;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
    }

    fn bench(reading: Reading) -> Bench {
        Bench {
            name: BenchName::parse("bench-01").unwrap(),
            load: None,
            cores: None,
            reading,
            requested_hold: None,
        }
    }

    /// A beat written at t(at) with the TTL, holding when `hold` says.
    fn beat(at: i64, ttl_ms: u64, hold: Option<&str>) -> Reading {
        Reading::Beat(Key {
            written_at: t(at),
            ttl: Duration::from_millis(ttl_ms),
            hold: hold.map(|h| Reason::parse(h).unwrap()),
        })
    }

    const M: Duration = EXPIRY_MARGIN;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    // One key alone, read at t(0), over every row of SPEC §2.2: only a key that counts has a
    // deadline to wake for.
    #[test]
    fn a_single_key_wakes_the_controller_only_while_it_counts() {
        let rows: [(&str, Reading, Option<Duration>); 9] = [
            ("row 1: missing", Reading::Missing, None),
            ("row 2: unreadable", Reading::unreadable("not JSON"), None),
            ("row 2b: from the future", beat(1_001, 10_000, None), None),
            ("row 3: at its deadline", beat(-500, 500, None), None),
            ("row 3: just past it", beat(-600, 500, None), None),
            ("row 4: outlived", beat(-5_000, 1_000, None), None),
            ("row 5: UP", beat(-200, 1_000, None), Some(ms(800) + M)),
            (
                "row 6: HELD",
                beat(-200, 1_000, Some("repair")),
                Some(ms(800) + M),
            ),
            // Within row 2b's second of tolerance the key counts, to its own deadline.
            (
                "row 5: a beat 1 s ahead",
                beat(1_000, 500, None),
                Some(ms(1_500) + M),
            ),
        ];
        for (row, reading, wake) in rows {
            assert_eq!(expiry(&[bench(reading)], t(0), M), wake, "{row}");
        }
    }

    #[test]
    fn the_earliest_deadline_of_the_keys_that_count_wins() {
        let benches = [
            bench(beat(0, 3_000, None)),
            bench(Reading::Missing),
            bench(beat(-900, 1_000, Some("repair"))), // 100 ms left: the earliest
            bench(beat(-5_000, 1_000, None)),         // outlived: no deadline
            bench(beat(0, 200, None)),
        ];
        assert_eq!(expiry(&benches, t(0), M), Some(ms(100) + M));
        // Read later, the same keys: the one that stopped counting no longer wakes anyone.
        assert_eq!(expiry(&benches, t(100), M), Some(ms(100) + M));
        assert_eq!(expiry(&benches, t(3_000), M), None);
    }

    #[test]
    fn no_key_that_counts_means_no_expiry_wake() {
        assert_eq!(expiry(&[], t(0), M), None);
        assert_eq!(
            expiry(
                &[bench(Reading::Missing), bench(beat(-10, 10, None))],
                t(0),
                M
            ),
            None
        );
    }

    #[test]
    fn the_margin_is_added_once_and_never_overflows() {
        let one = [bench(beat(0, 1, None))];
        assert_eq!(expiry(&one, t(0), Duration::ZERO), Some(ms(1)));
        assert_eq!(expiry(&one, t(0), ms(7)), Some(ms(8)));
        assert_eq!(expiry(&one, t(0), Duration::MAX), Some(Duration::MAX));
        // The longest promise a beat may make (30 days) is still a deadline.
        let month = Duration::from_secs(30 * 24 * 3600);
        let long = [bench(beat(0, month.as_millis() as u64, None))];
        assert_eq!(expiry(&long, t(0), M), Some(month + M));
    }
}
