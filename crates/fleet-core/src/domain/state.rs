//! The presence decision: a bench is UP, HELD or DOWN by its heartbeat key and that key's TTL
//! alone (SPEC §2).
//!
//! The key is the bench's own word that it is there. It expires on its own and each beat renews
//! it, with a TTL the bench chooses per write. Load and cores ride on the row beside the state and
//! never have a say in it: a bench at load 21 on 16 cores that keeps writing its key is UP.
//!
//! Pure: no I/O, no clock, no environment, no async. `now` is the Redis server's time, read in
//! the same round trip as the keys, so the reader's and the writer's clocks are never compared.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::name::{BenchName, Reason};

/// What `fleet state` says of one bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum State {
    /// The bench is there: its key is within its TTL and carries no hold.
    #[serde(rename = "UP")]
    Up,
    /// The bench is there and taking no work: its key is within its TTL and carries a hold.
    #[serde(rename = "HELD")]
    Held,
    /// No word from the bench within its key's TTL: expired, never written, or unreadable.
    #[serde(rename = "DOWN")]
    Down,
}

impl State {
    pub const ALL: [State; 3] = [State::Up, State::Held, State::Down];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Up => "UP",
            State::Held => "HELD",
            State::Down => "DOWN",
        }
    }

    /// Whether the bench is there (UP or HELD): the question `fleet live` answers.
    pub fn is_present(self) -> bool {
        match self {
            State::Up | State::Held => true,
            State::Down => false,
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long past its promised expiry a key may still be seen before it is a defect. Redis hides
/// an expired key from every read, so a key written with `PX` is never seen more than a
/// millisecond or so past its deadline; one seen a second past it has no TTL, or a longer one than
/// its value promised (SPEC §2.2 row 4).
pub const OUTLIVED_GRACE: Duration = Duration::from_secs(1);

/// One bench's heartbeat key as one read found it.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// The server's time when the beat was written (SPEC §2.4: a `TIME` of the server, never
    /// later than the write).
    pub written_at: DateTime<Utc>,
    /// How long this one write promised to count, and the `PX` it was written with. The bench
    /// chooses it per beat.
    pub ttl: Duration,
    /// The hold this write carried, if any. A hold rides the key and expires with it.
    pub hold: Option<Reason>,
}

impl Key {
    /// When the key expires: the server's write time plus the TTL, both on the server's clock.
    pub fn deadline(&self) -> DateTime<Utc> {
        TimeDelta::from_std(self.ttl)
            .ok()
            .and_then(|ttl| self.written_at.checked_add_signed(ttl))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// An operator's request that a bench hold (SPEC §2.4).
#[derive(Clone, Debug, PartialEq)]
pub struct HoldRequest {
    pub reason: Reason,
    /// When the request lapses by itself, on the server's clock; `None` lasts until released.
    pub until: Option<DateTime<Utc>>,
}

impl HoldRequest {
    /// Whether the request still stands at the server time `now`.
    pub fn stands(&self, now: DateTime<Utc>) -> bool {
        self.until.is_none_or(|until| now < until)
    }
}

/// What one read of a bench's heartbeat key found.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// No key. The bench never beat, or its key expired: Redis cannot tell the two apart, and the
    /// decision does not need to.
    Missing,
    /// A key that is there and is not a heartbeat: of which kind, and why.
    Unreadable(Unreadable),
    /// A heartbeat key.
    Beat(Key),
}

impl Reading {
    /// A value that is not a heartbeat, `why` in words.
    pub fn unreadable(why: impl Into<String>) -> Reading {
        Reading::Unreadable(Unreadable {
            kind: Flaw::Unreadable,
            why: why.into(),
        })
    }
}

/// A key that is there and is not a heartbeat (docs/protocol.md §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub kind: Flaw,
    /// Why, in words: the row's `error` after "heartbeat value is unreadable: ".
    pub why: String,
}

/// Why a key that is there is not a heartbeat, by the error kinds of docs/protocol.md §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// A key of another type than a string.
    WrongType,
    /// A string longer than `heartbeat::MAX_VALUE` bytes.
    TooLarge,
    /// A string that is not a heartbeat value.
    Unreadable,
}

/// One machine as the rows carry it: its key, and its load facts beside the key.
#[derive(Clone, Debug, PartialEq)]
pub struct Bench {
    pub name: BenchName,
    /// The bench's one-minute load average, as it last reported it. Never a say in the state.
    pub load: Option<f64>,
    /// The bench's core count, as it last reported it. Never a say in the state.
    pub cores: Option<u32>,
    pub reading: Reading,
    /// An operator's request that the bench hold (SPEC §2.4). The bench carries it on its own
    /// next beat, so HELD always means the bench itself said it.
    pub requested_hold: Option<HoldRequest>,
}

/// Why a key that exists still reads DOWN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Defect {
    /// The key is not a heartbeat: of another type, too large, or a value that does not decode.
    Unreadable(Unreadable),
    /// The key is still there past its promised expiry: it was written or changed without `PX`
    /// (or with a longer TTL than its value promises), and would keep the bench from ever
    /// reading DOWN.
    Outlived,
    /// The value says it was written more than a second after `now`: the server's clock stepped
    /// back, or something else wrote it. A beat cannot come from the future.
    Future,
}

impl std::fmt::Display for Defect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Defect::Unreadable(u) => write!(f, "heartbeat value is unreadable: {}", u.why),
            Defect::Outlived => f.write_str(
                "heartbeat key outlived its TTL (written without PX?); it reads DOWN until the bench beats again",
            ),
            Defect::Future => f.write_str(
                "heartbeat written in the server's future (its clock stepped back, or something else wrote it); it reads DOWN until the bench beats again",
            ),
        }
    }
}

impl Defect {
    /// Its kind, as the protocol names it (docs/protocol.md §3).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Defect::Unreadable(u) => match u.kind {
                Flaw::WrongType => ErrorKind::WrongType,
                Flaw::TooLarge => ErrorKind::TooLarge,
                Flaw::Unreadable => ErrorKind::Unreadable,
            },
            Defect::Outlived => ErrorKind::Outlived,
            Defect::Future => ErrorKind::Future,
        }
    }
}

/// The kind of a row's error (docs/protocol.md §3): what a program tells apart, where the
/// `error` says it in words. `fleet state -o json` carries it as `error_kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The key holds another type than a string.
    WrongType,
    /// The value is longer than `heartbeat::MAX_VALUE` bytes.
    TooLarge,
    /// The value is not a heartbeat value (docs/protocol.md §2).
    Unreadable,
    /// The value was written more than a second after `now`.
    Future,
    /// The key is still there a second or more past its deadline: written without its expiry.
    Outlived,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::WrongType,
        ErrorKind::TooLarge,
        ErrorKind::Unreadable,
        ErrorKind::Future,
        ErrorKind::Outlived,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::WrongType => "wrong_type",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Unreadable => "unreadable",
            ErrorKind::Future => "future",
            ErrorKind::Outlived => "outlived",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The decision for one key at one instant of the server's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub state: State,
    /// The TTL the counted beat promised; `None` when nothing counts.
    pub ttl: Option<Duration>,
    /// How long the counted beat still counts; `None` when nothing counts.
    pub expires_in: Option<Duration>,
    /// The hold the counted beat carries.
    pub hold: Option<Reason>,
    pub defect: Option<Defect>,
}

impl Verdict {
    fn down(defect: Option<Defect>) -> Self {
        Verdict {
            state: State::Down,
            ttl: None,
            expires_in: None,
            hold: None,
            defect,
        }
    }
}

/// Decides UP, HELD or DOWN from the key and its TTL alone, at the server time `now`.
///
/// The key counts while `now` is strictly before its deadline (the server's write time plus the
/// TTL, which is when Redis expires a key written with `PX`), so a bench reads DOWN at the instant
/// its key expires (SPEC §2.2). A TTL of zero counts while `now` is before the write time, so
/// for no instant unless the beat was written ahead of `now` (within the second of tolerance).
///
/// `now` counts in whole ms, rounded down (docs/protocol.md §3: `TIME`'s microseconds dropped),
/// as every deadline does: a reader that keeps the microseconds would say a key 0 ms from its
/// deadline where the protocol says 1.
pub fn decide(reading: &Reading, now: DateTime<Utc>) -> Verdict {
    let now = whole_ms(now);
    match reading {
        Reading::Missing => Verdict::down(None),
        Reading::Unreadable(u) => Verdict::down(Some(Defect::Unreadable(u.clone()))),
        Reading::Beat(key) => {
            let deadline = key.deadline();
            let grace = TimeDelta::from_std(OUTLIVED_GRACE).unwrap_or(TimeDelta::MAX);
            if key.written_at - now > grace {
                Verdict::down(Some(Defect::Future))
            } else if now < deadline {
                Verdict {
                    state: if key.hold.is_some() {
                        State::Held
                    } else {
                        State::Up
                    },
                    ttl: Some(key.ttl),
                    // `now < deadline`, so the span is positive and `to_std` succeeds.
                    expires_in: (deadline - now).to_std().ok(),
                    hold: key.hold.clone(),
                    defect: None,
                }
            } else if now - deadline >= grace {
                Verdict::down(Some(Defect::Outlived))
            } else {
                Verdict::down(None)
            }
        }
    }
}

/// The row `fleet state` prints for one bench: exactly the fields of SPEC §2.6. It is the
/// decision's own output (the protocol's vectors test it), so it lives here; the read model
/// writes it as it writes every view's rows (`views::rows`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub name: String,
    pub state: State,
    pub hold: Option<String>,
    pub requested_hold: Option<String>,
    pub load: Option<f64>,
    pub cores: Option<u32>,
    pub ttl_ms: Option<u64>,
    pub expires_in_ms: Option<u64>,
    pub error: Option<String>,
    /// The error's kind, for a program to tell a wrong type from an outlived key.
    pub error_kind: Option<ErrorKind>,
}

impl Bench {
    /// The decision for this bench at the server time `now`.
    pub fn verdict(&self, now: DateTime<Utc>) -> Verdict {
        decide(&self.reading, now)
    }

    /// The bench's row at the server time `now`.
    ///
    /// `requested_hold` shows a request the counted beat does not carry yet (the bench has not
    /// beaten since it was asked, or is DOWN); once the bench carries it, it is the `hold`.
    pub fn row(&self, now: DateTime<Utc>) -> Row {
        let verdict = self.verdict(now);
        let standing = self.requested_hold.as_ref().filter(|r| r.stands(now));
        let requested_hold = match (standing, &verdict.hold) {
            (Some(asked), Some(carried)) if asked.reason == *carried => None,
            (asked, _) => asked.map(|r| r.reason.as_str().to_owned()),
        };
        Row {
            name: self.name.as_str().to_owned(),
            state: verdict.state,
            hold: verdict.hold.as_ref().map(|r| r.as_str().to_owned()),
            requested_hold,
            load: self.load,
            cores: self.cores,
            ttl_ms: verdict.ttl.map(millis),
            expires_in_ms: verdict.expires_in.map(millis),
            error: verdict.defect.as_ref().map(ToString::to_string),
            error_kind: verdict.defect.as_ref().map(Defect::kind),
        }
    }
}

/// What `fleet live` lists: the names whose heartbeat key still counts, in the order given.
///
/// It answers presence, not eligibility: a HELD bench is here (that is what held means). Whether
/// a bench may take work is `State::Up`, and that is the caller's question, not this one.
pub fn live(benches: &[Bench], now: DateTime<Utc>) -> Vec<&BenchName> {
    there(benches, now, false).map(|(b, _)| &b.name).collect()
}

/// The benches that are there at `now`, in the order given, each with its verdict: present (UP
/// or HELD), or UP alone with `up_only` (those that may take work). `fleet live` and [`live`].
pub fn there(
    benches: &[Bench],
    now: DateTime<Utc>,
    up_only: bool,
) -> impl Iterator<Item = (&Bench, Verdict)> {
    benches.iter().filter_map(move |b| {
        let verdict = b.verdict(now);
        let wanted = if up_only {
            verdict.state == State::Up
        } else {
            verdict.state.is_present()
        };
        wanted.then_some((b, verdict))
    })
}

/// `t` rounded down to its millisecond.
fn whole_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_displays_as_its_name() {
        for state in State::ALL {
            assert_eq!(state.to_string(), state.as_str());
        }
        assert_eq!(
            State::ALL.map(|s| s.to_string()),
            ["UP", "HELD", "DOWN"].map(String::from)
        );
    }
    use chrono::TimeZone;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
    }

    fn reason(s: &str) -> Reason {
        Reason::parse(s).unwrap()
    }

    /// A beat written at t(0) with the given TTL: its deadline is t(ttl_ms).
    fn key(ttl_ms: u64, hold: Option<&str>) -> Reading {
        Reading::Beat(Key {
            written_at: t(0),
            ttl: Duration::from_millis(ttl_ms),
            hold: hold.map(reason),
        })
    }

    fn request(text: &str, until: Option<i64>) -> HoldRequest {
        HoldRequest {
            reason: reason(text),
            until: until.map(t),
        }
    }

    fn bench(reading: Reading, load: Option<f64>, requested: Option<HoldRequest>) -> Bench {
        Bench {
            name: BenchName::parse("bench-01").unwrap(),
            load,
            cores: Some(16),
            reading,
            requested_hold: requested,
        }
    }

    // SPEC §2.2, the decision table, row by row over the whole input space: the kind of reading,
    // where `now` stands against the deadline, the hold, the load, and the operator's request.
    #[test]
    fn decision_table_over_the_whole_input_space() {
        // (now relative to the deadline in ms, counted?, a defect?)
        let instants = [
            (-10_000, true, false),
            (-1, true, false),
            (0, false, false),
            (1, false, false),
            (999, false, false),
            (1_000, false, true),
            (3_600_000, false, true),
        ];
        let holds = [None, Some("maintenance")];
        let loads = [None, Some(0.0), Some(21.0), Some(1e9)];
        let ttl: i64 = 30_000;
        // The request, and whether it still stands when read at `deadline + offset` for any
        // offset in `instants` (a lapsed one lapsed before all of them).
        let requests = [
            (None, false),
            (Some(request("maintenance", None)), true),
            (Some(request("other", None)), true),
            (Some(request("maintenance", Some(ttl - 20_000))), false),
        ];
        for load in loads {
            for (asked, stands) in &requests {
                let asked_text = asked
                    .as_ref()
                    .filter(|_| *stands)
                    .map(|r| r.reason.as_str());
                // §2.2 row 1: no key.
                let row = bench(Reading::Missing, load, asked.clone()).row(t(0));
                assert_eq!(row.state, State::Down, "row 1");
                assert_eq!(
                    (row.ttl_ms, row.expires_in_ms, &row.error, row.error_kind),
                    (None, None, &None, None)
                );
                let standing_at_0 = asked
                    .as_ref()
                    .filter(|r| r.stands(t(0)))
                    .map(|r| r.reason.as_str());
                assert_eq!(
                    row.requested_hold.as_deref(),
                    standing_at_0,
                    "row 1: request not carried"
                );
                // §2.2 row 2b: a beat written in the server's future (more than a second).
                for (before, future) in [(1_001, true), (1_000, false)] {
                    let row = bench(key(ttl as u64, None), load, asked.clone()).row(t(-before));
                    let case = format!("{before} ms before the write");
                    if future {
                        assert_eq!(row.state, State::Down, "row 2b: {case}");
                        assert_eq!(row.error_kind, Some(ErrorKind::Future), "row 2b: {case}");
                        assert!(row.error.unwrap().contains("future"), "row 2b: {case}");
                    } else {
                        assert_eq!(row.state, State::Up, "row 5: {case}");
                        assert_eq!(row.error_kind, None, "row 5: {case}");
                    }
                }
                // §2.2 row 2: a key that is not a heartbeat, of each kind.
                for (flaw, kind) in [
                    (Flaw::WrongType, ErrorKind::WrongType),
                    (Flaw::TooLarge, ErrorKind::TooLarge),
                    (Flaw::Unreadable, ErrorKind::Unreadable),
                ] {
                    let reading = Reading::Unreadable(Unreadable {
                        kind: flaw,
                        why: "not json".to_owned(),
                    });
                    let row = bench(reading, load, asked.clone()).row(t(0));
                    assert_eq!(row.state, State::Down, "row 2: {flaw:?}");
                    assert_eq!(row.error_kind, Some(kind), "row 2: {flaw:?}");
                    assert_eq!(
                        row.error.as_deref(),
                        Some("heartbeat value is unreadable: not json"),
                        "row 2: {flaw:?}"
                    );
                }
                for hold in holds {
                    for (offset, counted, defect) in instants {
                        let now = t(ttl + offset);
                        let row = bench(key(ttl as u64, hold), load, asked.clone()).row(now);
                        let want = match (counted, hold) {
                            (false, _) => State::Down,      // rows 3 and 4: expired, outlived
                            (true, None) => State::Up,      // row 5
                            (true, Some(_)) => State::Held, // row 6
                        };
                        let case =
                            format!("offset {offset} hold {hold:?} load {load:?} asked {asked:?}");
                        assert_eq!(row.state, want, "{case}");
                        assert_eq!(row.error.is_some(), defect, "{case}");
                        assert_eq!(
                            row.error_kind,
                            defect.then_some(ErrorKind::Outlived),
                            "{case}"
                        );
                        if defect {
                            assert!(
                                row.error.as_ref().unwrap().contains("outlived its TTL"),
                                "row 4"
                            );
                        }
                        assert_eq!(row.load, load, "load rides beside the state");
                        assert_eq!(row.cores, Some(16));
                        if counted {
                            assert_eq!(row.ttl_ms, Some(30_000));
                            assert_eq!(row.expires_in_ms, Some((-offset) as u64));
                            assert_eq!(row.hold.as_deref(), hold);
                        } else {
                            assert_eq!(
                                (row.ttl_ms, row.expires_in_ms, row.hold.as_deref()),
                                (None, None, None)
                            );
                        }
                        let carried = counted && hold.is_some() && hold == asked_text;
                        assert_eq!(
                            row.requested_hold.as_deref(),
                            if carried { None } else { asked_text },
                            "{case}: requested_hold shows only a standing request not yet carried"
                        );
                    }
                }
            }
        }
    }

    proptest::proptest! {
        // The whole rule in one line, over random write times, TTLs, instants, holds and loads:
        // counted exactly while `now < at + ttl`; load never changes the state.
        #[test]
        fn the_state_is_the_key_against_its_deadline_and_nothing_else(
            at in -1_000_000i64..1_000_000,
            ttl in 0u64..10_000_000,
            now in -2_000_000i64..12_000_000,
            held: bool,
            load in proptest::option::of(0.0f64..1e6),
        ) {
            let reading = Reading::Beat(Key {
                written_at: t(at),
                ttl: Duration::from_millis(ttl),
                hold: held.then(|| reason("h")),
            });
            let b = bench(reading, load, None);
            let verdict = b.verdict(t(now));
            let future = now < at - 1_000;
            let counted = !future && now < at + ttl as i64;
            let want = match (counted, held) {
                (false, _) => State::Down,
                (true, false) => State::Up,
                (true, true) => State::Held,
            };
            proptest::prop_assert_eq!(verdict.state, want);
            proptest::prop_assert_eq!(
                verdict.defect.is_some(),
                future || now >= at + ttl as i64 + 1_000
            );
            proptest::prop_assert_eq!(bench(b.reading.clone(), None, None).verdict(t(now)), verdict);
        }
    }

    proptest::proptest! {
        // docs/protocol.md §3: `now` counts in whole ms, rounded down. The microseconds of
        // `TIME` never change a decision, nor the span left: a key 1 ms from its deadline reads
        // 1 ms from it until the deadline's own millisecond.
        #[test]
        fn the_microseconds_of_now_are_dropped(
            at in -5_000i64..5_000,
            ttl in 0u64..10_000,
            now in -10_000i64..20_000,
            micros in 0i64..1_000,
            held: bool,
        ) {
            let reading = Reading::Beat(Key {
                written_at: t(at),
                ttl: Duration::from_millis(ttl),
                hold: held.then(|| reason("h")),
            });
            let exact = t(now) + TimeDelta::microseconds(micros);
            proptest::prop_assert_eq!(decide(&reading, exact), decide(&reading, t(now)));
        }
    }

    #[test]
    fn an_error_kind_is_named_as_the_protocol_names_it() {
        assert_eq!(
            ErrorKind::ALL.map(|k| (k.as_str(), serde_json::to_string(&k).unwrap())),
            [
                ("wrong_type", "\"wrong_type\"".to_owned()),
                ("too_large", "\"too_large\"".to_owned()),
                ("unreadable", "\"unreadable\"".to_owned()),
                ("future", "\"future\"".to_owned()),
                ("outlived", "\"outlived\"".to_owned()),
            ]
        );
        assert_eq!(ErrorKind::Outlived.to_string(), "outlived");
    }

    #[test]
    fn bench_at_load_21_on_16_cores_that_keeps_beating_is_up() {
        let b = bench(key(10_000, None), Some(21.0), None);
        assert_eq!(b.row(t(5_000)).state, State::Up);
        assert_eq!(b.row(t(5_000)).load, Some(21.0));
    }

    #[test]
    fn expired_key_with_hold_reads_down() {
        let b = bench(key(10_000, Some("maintenance")), None, None);
        assert_eq!(b.row(t(9_999)).state, State::Held);
        assert_eq!(b.row(t(10_000)).state, State::Down);
    }

    #[test]
    fn zero_ttl_write_expires_at_once() {
        let b = bench(key(0, None), None, None);
        assert_eq!(b.row(t(0)).state, State::Down);
        assert_eq!(b.row(t(0)).error_kind, None);
    }

    // docs/protocol.md §3: the one rule, `now < at + ttl`, holds for a TTL of 0 too. Written
    // ahead of `now` (within the second of tolerance), it counts until `at`.
    #[test]
    fn zero_ttl_written_ahead_counts_until_its_write_time() {
        let b = bench(key(0, None), None, None);
        let row = b.row(t(-500));
        assert_eq!(
            (row.state, row.ttl_ms, row.expires_in_ms),
            (State::Up, Some(0), Some(500))
        );
        assert_eq!(b.row(t(-1_001)).error_kind, Some(ErrorKind::Future));
    }

    #[test]
    fn an_hour_long_promise_counts_for_the_hour() {
        let b = bench(key(3_600_000, Some("sleeping")), None, None);
        assert_eq!(b.row(t(3_599_999)).state, State::Held);
        assert_eq!(b.row(t(3_599_999)).expires_in_ms, Some(1));
        assert_eq!(b.row(t(3_600_000)).state, State::Down);
    }

    #[test]
    fn an_absurd_ttl_saturates_instead_of_overflowing() {
        let k = Key {
            written_at: t(0),
            ttl: Duration::MAX,
            hold: None,
        };
        assert_eq!(k.deadline(), DateTime::<Utc>::MAX_UTC);
    }

    #[test]
    fn a_hold_request_stands_until_it_lapses() {
        let r = request("x", Some(100));
        assert!(r.stands(t(99)));
        assert!(!r.stands(t(100)));
        assert!(request("x", None).stands(DateTime::<Utc>::MAX_UTC));
    }

    #[test]
    fn live_lists_up_and_held_in_the_order_given() {
        let named = |n: &str, reading| Bench {
            name: BenchName::parse(n).unwrap(),
            ..bench(reading, None, None)
        };
        let benches = [
            named("c", key(1000, None)),
            named("a", Reading::Missing),
            named("b", key(1000, Some("x"))),
            named("d", key(10, None)),
            named("e", Reading::unreadable("x")),
            named("f", key(0, None)),
        ];
        let names: Vec<&str> = live(&benches, t(500)).iter().map(|n| n.as_str()).collect();
        assert_eq!(names, ["c", "b"]);
        let there = |up_only| -> Vec<(&str, State, Option<String>)> {
            there(&benches, t(500), up_only)
                .map(|(b, v)| {
                    (
                        b.name.as_str(),
                        v.state,
                        v.hold.map(|h| h.as_str().to_owned()),
                    )
                })
                .collect()
        };
        assert_eq!(
            there(false),
            [
                ("c", State::Up, None),
                ("b", State::Held, Some("x".to_owned()))
            ]
        );
        assert_eq!(
            there(true),
            [("c", State::Up, None)],
            "UP alone may take work"
        );
    }

    #[test]
    fn state_strings_and_presence() {
        assert_eq!(
            State::ALL.map(|s| (s.as_str(), s.is_present())),
            [("UP", true), ("HELD", true), ("DOWN", false)]
        );
        assert_eq!(serde_json::to_string(&State::Held).unwrap(), "\"HELD\"");
    }
}
