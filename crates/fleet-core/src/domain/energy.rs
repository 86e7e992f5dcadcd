//! The energy ledger (SPEC §4.12): a slot's time on and off by UTC day, from the transitions the
//! controller observes, and what powering off saved against an always-on baseline.
//!
//! The ledger is advanced by [`Ledger::observe`] with the slot's observed power and `now` (the
//! Redis server's time): the interval since the last observation is credited to the power that
//! was observed then, split at UTC midnights. Unknown power (a blind controller, SPEC §5.2)
//! accrues nothing and does not end an interval: off, blind, on is one activation, and on,
//! blind, on is none. The time is kept in whole milliseconds, so splitting the same history at
//! any points (a restart, a failover, the controller's once-a-minute re-accounting) gives the
//! same totals exactly. The ledger keeps the newest [`KEPT_DAYS`] daily buckets: an older day is
//! dropped only when a newer day's bucket takes its place, never because the clock says the day
//! is old, so a clock that steps forward deletes no history (issue 27). A step longer than
//! [`MAX_STEP_MS`], forward or back, is taken as a clock step: it accrues nothing and moves the
//! mark to the new time. Pure: no I/O, no clock.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};

use super::power::Power;

/// Days of buckets kept before the newest one. The issue asks for at least 400.
pub const RETENTION_DAYS: i64 = 400;

/// The most daily buckets a ledger keeps: the newest day and the [`RETENTION_DAYS`] before it
/// that have a bucket (SPEC §4.12).
pub const KEPT_DAYS: usize = RETENTION_DAYS as usize + 1;

/// The longest interval one step accounts, forward or back (SPEC §4.12): a week, far more than
/// the controller's once-a-minute steps leave between them while it runs, and more than an
/// outage of the controller is expected to last. A longer interval is a clock that stepped (or
/// an absence too long to know what the machine did): it accrues nothing, and the mark moves to
/// the new time.
pub const MAX_STEP_MS: i64 = 7 * DAY_MS;

/// How often an unchanged power is accounted again, so the stored ledger is never more than
/// this behind and a successor loses at most this much to a crash.
pub const REACCOUNT_MS: i64 = 60_000;

/// Whether the ledger should take a step now: it has none yet, the power changed since its
/// mark, or the ledger's minute turned since the mark. A ledger's minute starts at its own
/// `phase` (`phase_of` its slot, in `[0, REACCOUNT_MS)`), so a fleet's unchanged ledgers step
/// spread over the minute, a sixtieth of them each second, rather than all in one pass (issue 30),
/// and each still steps once a minute: never more than [`REACCOUNT_MS`] after its mark. A mark
/// from the future (a clock that stepped back) is in another minute, so it is due, and `observe`
/// judges it.
pub fn due(mark: Option<Mark>, power: Option<Power>, now: DateTime<Utc>, phase: i64) -> bool {
    let minute = |t: DateTime<Utc>| (t.timestamp_millis() - phase).div_euclid(REACCOUNT_MS);
    mark.is_none_or(|m| m.power != power || minute(now) != minute(m.at))
}

/// A slot's phase in the minute, in `[0, REACCOUNT_MS)`: a hash of its name (FNV-1a), the same in
/// every process, so a successor keeps the slot's place in the minute.
pub fn phase_of(slot: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in slot.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % REACCOUNT_MS.unsigned_abs()) as i64
}

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: f64 = 3_600_000.0;

/// A UTC day, as days since 1970-01-01.
pub type Day = i64;

/// The UTC day of an instant.
pub fn day_of(at: DateTime<Utc>) -> Day {
    at.timestamp_millis().div_euclid(DAY_MS)
}

/// A day's date, for the store's field names and the views.
pub fn date_of(day: Day) -> Option<NaiveDate> {
    DateTime::from_timestamp_millis(day.checked_mul(DAY_MS)?).map(|t| t.date_naive())
}

/// The day of a date.
pub fn day_of_date(date: NaiveDate) -> Day {
    day_of(date.and_time(chrono::NaiveTime::MIN).and_utc())
}

/// One day's bucket: milliseconds on and off, and the activations (off → on) seen that day.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub on_ms: u64,
    pub off_ms: u64,
    pub activations: u64,
}

impl Bucket {
    fn add(&mut self, other: Bucket) {
        self.on_ms = self.on_ms.saturating_add(other.on_ms);
        self.off_ms = self.off_ms.saturating_add(other.off_ms);
        self.activations = self.activations.saturating_add(other.activations);
    }

    /// The stored form: `on_ms off_ms activations`.
    pub fn render(&self) -> String {
        format!("{} {} {}", self.on_ms, self.off_ms, self.activations)
    }

    /// Reads the stored form; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Bucket, String> {
        let mut parts = text.split(' ');
        let mut next = |what: &str| -> Result<u64, String> {
            let part = parts
                .next()
                .ok_or_else(|| format!("bucket {text:?} has no {what}"))?;
            part.parse()
                .map_err(|_| format!("bucket {text:?}: {what} {part:?} is not a whole number"))
        };
        let bucket = Bucket {
            on_ms: next("on_ms")?,
            off_ms: next("off_ms")?,
            activations: next("activations")?,
        };
        match parts.next() {
            None => Ok(bucket),
            Some(_) => Err(format!("bucket {text:?} has more than three numbers")),
        }
    }
}

/// Where the ledger stands: the power observed last (None: unknown), the last power that was
/// known (for activations across a blind spell), and the instant accounted up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub power: Option<Power>,
    pub known: Option<Power>,
    pub at: DateTime<Utc>,
}

fn power_word(p: Option<Power>) -> &'static str {
    match p {
        Some(Power::On) => "on",
        Some(Power::Off) => "off",
        None => "unknown",
    }
}

fn power_from(word: &str) -> Result<Option<Power>, String> {
    match word {
        "on" => Ok(Some(Power::On)),
        "off" => Ok(Some(Power::Off)),
        "unknown" => Ok(None),
        other => Err(format!("power {other:?} is not on, off or unknown")),
    }
}

impl Mark {
    /// The stored form: `power known at_ms`.
    pub fn render(&self) -> String {
        format!(
            "{} {} {}",
            power_word(self.power),
            power_word(self.known),
            self.at.timestamp_millis()
        )
    }

    /// Reads the stored form; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Mark, String> {
        let parts: Vec<&str> = text.split(' ').collect();
        let [power, known, at] = parts.as_slice() else {
            return Err(format!("mark {text:?} is not `power known at_ms`"));
        };
        let ms: i64 = at
            .parse()
            .map_err(|_| format!("mark {text:?}: at_ms {at:?} is not a whole number"))?;
        Ok(Mark {
            power: power_from(power)?,
            known: power_from(known)?,
            at: DateTime::from_timestamp_millis(ms)
                .ok_or_else(|| format!("mark {text:?}: at_ms {ms} is out of range"))?,
        })
    }
}

/// A slot's ledger: its daily buckets and its mark.
///
/// The buckets are a vector sorted by day, not a map: a ledger of one day is one 32-byte entry,
/// where a `BTreeMap` allocated a node of eleven (about 360 bytes), a third of a 100 000-slot
/// controller's energy memory (issue 30). A leader's copy may [`shed`](Ledger::shed) the buckets no
/// step can change again, keeping only their days, so a year of history costs it a few bytes a
/// slot rather than 401 buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// The buckets held, oldest first, each day once; after a shed, only days from the mark's on.
    days: Vec<(Day, Bucket)>,
    /// The days before `days` whose buckets this copy let go, as runs `(first day, length)`,
    /// oldest first: only their count and order matter, for trimming (`observe`).
    shed: Vec<(Day, u32)>,
    mark: Option<Mark>,
}

/// A ledger's buckets, oldest first: read like the map of day to bucket they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Days<'a>(&'a [(Day, Bucket)]);

impl<'a> Days<'a> {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, day: &Day) -> Option<&'a Bucket> {
        let i = self.0.binary_search_by_key(day, |(d, _)| *d).ok()?;
        Some(&self.0[i].1)
    }

    pub fn contains_key(&self, day: &Day) -> bool {
        self.get(day).is_some()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&'a Day, &'a Bucket)> + use<'a> {
        self.0.iter().map(|(d, b)| (d, b))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &'a Day> + use<'a> {
        self.0.iter().map(|(d, _)| d)
    }

    /// The same days as a map, for a caller that keeps or compares them.
    pub fn to_map(&self) -> BTreeMap<Day, Bucket> {
        self.0.iter().copied().collect()
    }
}

impl std::ops::Index<&Day> for Days<'_> {
    type Output = Bucket;

    fn index(&self, day: &Day) -> &Bucket {
        self.get(day).expect("no bucket for that day")
    }
}

/// What one observation changed: the increments by day, and the days that fell out of the
/// retention window. The store applies exactly this, so it never recomputes the rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advance {
    pub increments: BTreeMap<Day, Bucket>,
    pub trimmed: Vec<Day>,
}

impl Advance {
    /// The increments of every day, summed (for the counters).
    pub fn total(&self) -> Bucket {
        let mut sum = Bucket::default();
        for bucket in self.increments.values() {
            sum.add(*bucket);
        }
        sum
    }
}

impl Ledger {
    pub fn mark(&self) -> Option<Mark> {
        self.mark
    }

    /// The buckets held (after a [`shed`](Ledger::shed), the days from the mark's on).
    pub fn days(&self) -> Days<'_> {
        Days(&self.days)
    }

    /// Builds a ledger from stored parts. Days outside the representable range are skipped by
    /// the caller's parse; here they are taken as given.
    pub fn from_parts(days: BTreeMap<Day, Bucket>, mark: Option<Mark>) -> Ledger {
        Ledger {
            days: days.into_iter().collect(),
            shed: Vec::new(),
            mark,
        }
    }

    /// How many days the ledger keeps, held or shed: what the trimming counts.
    pub fn kept_days(&self) -> usize {
        self.days.len() + self.shed.iter().map(|(_, n)| *n as usize).sum::<usize>()
    }

    /// Lets go of the buckets of the days before the mark's, which no step changes again (a
    /// step credits from its mark on, SPEC §4.12), keeping their days, so the copy steps and
    /// trims exactly as the whole ledger would and `Advance`s are the same. For the leader's
    /// copies (`reconcile::energy`), which write the buckets a step changed and nothing else; a
    /// shed ledger's `totals` count only the buckets it holds.
    pub fn shed(&mut self) {
        let Some(mark) = self.mark else {
            return;
        };
        let first_open = day_of(mark.at);
        let closed = self.days.partition_point(|(d, _)| *d < first_open);
        for (day, _) in self.days.drain(..closed) {
            match self.shed.last_mut() {
                Some((start, n)) if *start + i64::from(*n) == day => *n += 1,
                _ => self.shed.push((day, 1)),
            }
        }
        self.days.shrink_to_fit();
        self.shed.shrink_to_fit();
    }

    /// Whether this copy holds every bucket a step could change: no shed day is on or after the
    /// mark's day. Only a clock that stepped back past [`MAX_STEP_MS`] moves a mark back onto
    /// shed days; a copy for which this is false is read again before its next step.
    pub fn holds_the_open_days(&self) -> bool {
        let Some(mark) = self.mark else {
            return true;
        };
        self.shed
            .last()
            .is_none_or(|(start, n)| start + i64::from(*n) <= day_of(mark.at))
    }

    /// Drops the oldest day kept, held or shed; returns it.
    fn drop_oldest(&mut self) -> Option<Day> {
        if let Some((start, n)) = self.shed.first_mut() {
            let day = *start;
            *start += 1;
            *n -= 1;
            if *n == 0 {
                self.shed.remove(0);
            }
            return Some(day);
        }
        (!self.days.is_empty()).then(|| self.days.remove(0).0)
    }

    /// Advances the ledger to `now` with the power observed now (None: unknown).
    ///
    /// The interval since the mark counts as the power observed at the mark: the ledger knows
    /// only the transitions it observes, so a controller's absence (a restart, a failover)
    /// counts as the state it last saw, and the first observation after it ends the interval.
    /// An observation earlier than the mark (a clock that stepped back) accrues nothing and
    /// keeps the mark's time, so no interval is counted twice.
    ///
    /// A step more than [`MAX_STEP_MS`] from the mark, forward or back, is a clock step (SPEC
    /// §4.12): it accrues nothing (no time, no activation), drops no day, and moves the mark to
    /// `now`, so a clock a year ahead credits no year and a clock put right again does not leave
    /// the ledger waiting a year for its mark. The days kept are the newest [`KEPT_DAYS`]: a day
    /// goes only when a newer day's bucket takes its place (issue 27: with the days trimmed by
    /// the clock, one forward step of Redis's clock deleted up to 400 days of history).
    pub fn observe(&mut self, power: Option<Power>, now: DateTime<Utc>) -> Advance {
        let mut advance = Advance::default();
        let Some(mark) = self.mark else {
            self.mark = Some(Mark {
                power,
                known: power,
                at: now,
            });
            return advance;
        };
        let step_ms = (now - mark.at).num_milliseconds().unsigned_abs();
        if step_ms > MAX_STEP_MS.unsigned_abs() {
            self.mark = Some(Mark {
                power,
                known: power.or(mark.known),
                at: now,
            });
            return advance;
        }
        // A clock that stood still or stepped back credits nothing: `credit` walks forward only.
        credit(&mut advance.increments, mark.power, mark.at, now);
        let at = now.max(mark.at);
        if mark.known == Some(Power::Off) && power == Some(Power::On) {
            advance
                .increments
                .entry(day_of(at))
                .or_default()
                .activations += 1;
        }
        for (day, inc) in &advance.increments {
            // Every increment is on the mark's day or later, so never on a shed day.
            match self.days.binary_search_by_key(day, |(d, _)| *d) {
                Ok(i) => self.days[i].1.add(*inc),
                Err(i) => self.days.insert(i, (*day, *inc)),
            }
        }
        let excess = self.kept_days().saturating_sub(KEPT_DAYS);
        advance.trimmed = (0..excess).filter_map(|_| self.drop_oldest()).collect();
        self.mark = Some(Mark {
            power,
            known: power.or(mark.known),
            at,
        });
        advance
    }

    /// The sum of the buckets held from `since` (a day) on.
    pub fn totals(&self, since: Day) -> Bucket {
        let mut sum = Bucket::default();
        let from = self.days.partition_point(|(d, _)| *d < since);
        for (_, bucket) in &self.days[from..] {
            sum.add(*bucket);
        }
        sum
    }
}

/// Credits `[from, to)` to `power`'s column, split at UTC midnights. The interval is at most
/// [`MAX_STEP_MS`] long, so it spans at most eight days.
fn credit(
    into: &mut BTreeMap<Day, Bucket>,
    power: Option<Power>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) {
    let Some(power) = power else {
        // Blind: nothing accrues (SPEC §4.12).
        return;
    };
    let (mut t, end) = (from.timestamp_millis(), to.timestamp_millis());
    while t < end {
        let day = t.div_euclid(DAY_MS);
        let next = (day + 1).saturating_mul(DAY_MS).min(end);
        // The span is positive and at most one day, so it fits in u64.
        let span = u64::try_from(next - t).unwrap_or(0);
        let bucket = into.entry(day).or_default();
        match power {
            Power::On => bucket.on_ms += span,
            Power::Off => bucket.off_ms += span,
        }
        t = next;
    }
}

/// What a machine draws and what its energy costs: `template.power` and a slot's `power` (SPEC
/// §4.1, §4.12), validated by the configuration.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Draw {
    /// Finite, above zero.
    pub watts: f64,
    /// The draw when off: finite, zero or more, at most `watts`.
    pub standby_watts: f64,
    /// Finite, zero or more.
    pub price_per_kwh: f64,
}

/// A slot's figures over a range of days.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Figures {
    pub hours_on: f64,
    pub hours_off: f64,
    pub kwh: f64,
    pub kwh_saved: f64,
    pub cost_saved: f64,
    pub activations: u64,
}

impl Figures {
    /// kWh = hours_on × watts/1000 + hours_off × standby_watts/1000; against an always-on
    /// baseline, kwh_saved = hours_off × (watts − standby_watts)/1000 and cost_saved = kwh_saved
    /// × price_per_kwh.
    pub fn of(totals: Bucket, draw: Draw) -> Figures {
        // Milliseconds below 2^53 (285 000 years) convert to f64 exactly.
        let hours_on = totals.on_ms as f64 / HOUR_MS;
        let hours_off = totals.off_ms as f64 / HOUR_MS;
        let kwh_saved = hours_off * (draw.watts - draw.standby_watts) / 1000.0;
        Figures {
            hours_on,
            hours_off,
            kwh: hours_on * draw.watts / 1000.0 + hours_off * draw.standby_watts / 1000.0,
            kwh_saved,
            cost_saved: kwh_saved * draw.price_per_kwh,
            activations: totals.activations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, h, m, s).unwrap()
    }

    const DRAW: Draw = Draw {
        watts: 200.0,
        standby_watts: 5.0,
        price_per_kwh: 0.30,
    };

    /// The scripted day: off at midnight, on 08:00–12:30, off, blind 14:00–15:00 (off before
    /// and after: no activation), on 18:15:30–22:00, off to the next midnight.
    fn scripted_day() -> Vec<(Option<Power>, DateTime<Utc>)> {
        use Power::*;
        vec![
            (Some(Off), at(0, 0, 0)),
            (Some(On), at(8, 0, 0)),
            (Some(Off), at(12, 30, 0)),
            (None, at(14, 0, 0)),
            (Some(Off), at(15, 0, 0)),
            (Some(On), at(18, 15, 30)),
            (Some(Off), at(22, 0, 0)),
            (Some(Off), at(0, 0, 0) + chrono::Duration::days(1)),
        ]
    }

    fn run(events: &[(Option<Power>, DateTime<Utc>)]) -> Ledger {
        let mut ledger = Ledger::default();
        for (p, t) in events {
            ledger.observe(*p, *t);
        }
        ledger
    }

    #[test]
    fn a_scripted_day_gives_the_hours_and_kwh_to_the_second() {
        let ledger = run(&scripted_day());
        let day = day_of(at(0, 0, 0));
        let on_ms = (4 * 3600 + 1800 + 3 * 3600 + 44 * 60 + 30) * 1000;
        let off_ms = 86_400_000 - 3_600_000 - on_ms;
        assert_eq!(
            ledger.days().get(&day),
            Some(&Bucket {
                on_ms,
                off_ms,
                activations: 2
            })
        );
        assert_eq!(ledger.days().len(), 1, "nothing spills into the next day");
        let f = Figures::of(ledger.totals(day), DRAW);
        assert!((f.hours_on - 29_670.0 / 3600.0).abs() < 1e-12);
        assert!((f.hours_off - (86_400.0 - 3600.0 - 29_670.0) / 3600.0).abs() < 1e-12);
        let kwh = f.hours_on * 0.2 + f.hours_off * 0.005;
        assert!((f.kwh - kwh).abs() < 1e-12);
        assert!((f.kwh_saved - f.hours_off * 0.195).abs() < 1e-12);
        assert!((f.cost_saved - f.kwh_saved * 0.30).abs() < 1e-12);
        assert_eq!(f.activations, 2);
    }

    #[test]
    fn unknown_power_accrues_nothing_and_does_not_end_an_interval() {
        use Power::*;
        let mut l = Ledger::default();
        l.observe(Some(Off), at(1, 0, 0));
        l.observe(None, at(2, 0, 0));
        l.observe(Some(On), at(3, 0, 0));
        l.observe(None, at(4, 0, 0));
        l.observe(Some(On), at(5, 0, 0));
        let b = l.totals(0);
        assert_eq!(
            b,
            Bucket {
                on_ms: 3_600_000,
                off_ms: 3_600_000,
                activations: 1
            },
            "off, blind, on is one activation; on, blind, on is none"
        );
    }

    #[test]
    fn an_interval_across_midnight_is_split_by_utc_day() {
        let mut l = Ledger::default();
        l.observe(Some(Power::On), at(23, 0, 0));
        l.observe(Some(Power::On), at(1, 0, 0) + chrono::Duration::days(1));
        let d = day_of(at(0, 0, 0));
        assert_eq!(l.days()[&d].on_ms, 3_600_000);
        assert_eq!(l.days()[&(d + 1)].on_ms, 3_600_000);
    }

    #[test]
    fn a_clock_that_steps_back_counts_nothing_twice() {
        let mut l = Ledger::default();
        l.observe(Some(Power::On), at(10, 0, 0));
        l.observe(Some(Power::On), at(11, 0, 0));
        let back = l.observe(Some(Power::Off), at(10, 30, 0));
        assert!(back.increments.is_empty());
        assert_eq!(l.mark().map(|m| m.at), Some(at(11, 0, 0)));
        l.observe(Some(Power::Off), at(12, 0, 0));
        assert_eq!(
            l.totals(0),
            Bucket {
                on_ms: 3_600_000,
                off_ms: 3_600_000,
                activations: 0
            }
        );
    }

    /// A ledger observed on every day at noon from `first` for `days` days: a bucket a day.
    fn daily(first: DateTime<Utc>, days: i64) -> Ledger {
        let mut l = Ledger::default();
        for d in 0..days {
            l.observe(Some(Power::On), first + chrono::Duration::days(d));
        }
        l
    }

    #[test]
    fn the_newest_days_are_kept_and_an_older_one_goes_only_when_a_newer_one_comes() {
        let first = at(12, 0, 0);
        // 401 observations a day apart, at noon: a bucket on each of their 401 days.
        let mut l = daily(first, KEPT_DAYS as i64);
        assert_eq!(l.days().len(), KEPT_DAYS);
        assert_eq!(l.days().keys().next(), Some(&day_of(first)));
        // A step within the newest day adds no day: nothing goes.
        let noon = first + chrono::Duration::days(KEPT_DAYS as i64 - 1);
        let adv = l.observe(Some(Power::On), noon + chrono::Duration::hours(1));
        assert_eq!(adv.trimmed, Vec::<Day>::new());
        // The next day's bucket takes the oldest's place, and only that one.
        let adv = l.observe(Some(Power::On), noon + chrono::Duration::days(1));
        assert_eq!(adv.trimmed, vec![day_of(first)]);
        assert_eq!(l.days().len(), KEPT_DAYS);
        assert_eq!(l.days().keys().next(), Some(&(day_of(first) + 1)));
        assert_eq!(
            l.days().keys().last(),
            Some(&(day_of(first) + KEPT_DAYS as i64))
        );
    }

    /// A leader's copy of a ledger of a year and more holds one bucket and one run of days:
    /// what 401 buckets cost it before (issue 30).
    #[test]
    fn a_shed_copy_of_a_full_ledger_holds_one_bucket_and_one_run() {
        let first = at(12, 0, 0);
        let mut whole = daily(first, KEPT_DAYS as i64 + 30);
        assert_eq!(whole.days().len(), KEPT_DAYS);
        let mut copy = whole.clone();
        copy.shed();
        assert_eq!((copy.days().len(), copy.shed.len()), (1, 1));
        assert_eq!(copy.kept_days(), KEPT_DAYS);
        assert!(copy.holds_the_open_days());
        // The next day trims the same oldest day from both.
        let next = first + chrono::Duration::days(KEPT_DAYS as i64 + 30);
        assert_eq!(
            copy.observe(Some(Power::On), next),
            whole.observe(Some(Power::On), next)
        );
        copy.shed();
        assert_eq!((copy.days().len(), copy.kept_days()), (1, KEPT_DAYS));
        // A clock stepped back past the bound puts the mark on shed days: the copy says so.
        let back = next - chrono::Duration::days(30);
        copy.observe(Some(Power::On), back);
        assert!(!copy.holds_the_open_days());
    }

    // Issue 27: one forward step of Redis's clock could delete up to 400 days of buckets (the
    // days were trimmed by the clock's day). Over steps just past the bound, a month, a year and
    // a century, forward and back, on a ledger of 400 days: the step accrues nothing and drops
    // nothing, and the mark moves to the new time; the steps after it, on the stepped clock,
    // drop a day only when a newer day's bucket takes its place.
    #[test]
    fn a_clock_step_of_any_size_deletes_no_history_and_accrues_nothing() {
        let first = at(12, 0, 0);
        let history = daily(first, RETENTION_DAYS);
        let held = history.days().to_map();
        let mark = history.mark().expect("a mark");
        let ms = chrono::Duration::milliseconds;
        for (row, step) in [
            ("just past the bound", ms(MAX_STEP_MS + 1)),
            ("a month", chrono::Duration::days(31)),
            ("a year", chrono::Duration::days(365)),
            ("a century", chrono::Duration::days(36_525)),
            ("back, just past the bound", ms(-MAX_STEP_MS - 1)),
            ("back a year", chrono::Duration::days(-365)),
        ] {
            for power in [Some(Power::On), Some(Power::Off), None] {
                let mut l = history.clone();
                let now = mark.at + step;
                let adv = l.observe(power, now);
                assert_eq!(adv, Advance::default(), "{row}, {power:?}");
                assert_eq!(l.days().to_map(), held, "{row}, {power:?}: every day kept");
                let m = l.mark().expect("a mark");
                assert_eq!((m.at, m.power), (now, power), "{row}, {power:?}");
                assert_eq!(m.known, power.or(mark.known), "{row}, {power:?}");
                // On the stepped clock, a minute, then six hours later (the same UTC day): a
                // day's bucket comes, and the ledger holds 401 days, the 400 it had and the new
                // one.
                l.observe(power, now + chrono::Duration::minutes(1));
                let adv = l.observe(power, now + chrono::Duration::hours(6));
                assert_eq!(adv.trimmed, Vec::<Day>::new(), "{row}, {power:?}");
                // Every day kept (a clock put back credits its hours to days the ledger
                // already holds: added to, never taken from).
                for (day, bucket) in &held {
                    let kept = l.days().get(day);
                    assert!(
                        kept.is_some_and(|k| k.on_ms >= bucket.on_ms && k.off_ms >= bucket.off_ms),
                        "{row}: day {day} kept: {kept:?}"
                    );
                }
                let sum = |b: Bucket| b.on_ms + b.off_ms;
                let credited = sum(l.totals(0)) - sum(history.totals(0));
                let expected = if power.is_some() { 6 * 3_600_000 } else { 0 };
                assert_eq!(credited, expected, "{row}, {power:?}: only the hours since");
            }
        }
        // At the bound itself the interval is the controller's absence, accounted as the power
        // last observed.
        let mut l = history.clone();
        l.observe(Some(Power::Off), mark.at + ms(MAX_STEP_MS));
        assert_eq!(
            l.totals(day_of(mark.at)).on_ms,
            held[&day_of(mark.at)].on_ms + MAX_STEP_MS as u64
        );
    }

    #[test]
    fn stored_forms_read_back_and_garbage_is_an_error() {
        let b = Bucket {
            on_ms: 1,
            off_ms: 2,
            activations: 3,
        };
        assert_eq!(Bucket::parse(&b.render()), Ok(b));
        let m = Mark {
            power: None,
            known: Some(Power::Off),
            at: at(1, 2, 3),
        };
        assert_eq!(Mark::parse(&m.render()), Ok(m));
        for bad in ["", "1 2", "1 2 3 4", "a 2 3", "-1 2 3"] {
            assert!(Bucket::parse(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "on on", "up on 1", "on on x", "on on 99999999999999999"] {
            assert!(Mark::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(date_of(day_of(at(5, 0, 0))), Some(at(0, 0, 0).date_naive()));
        assert_eq!(day_of_date(at(0, 0, 0).date_naive()), day_of(at(5, 0, 0)));
    }

    #[test]
    fn a_step_is_due_on_a_change_of_power_or_once_a_minute() {
        let t = at(10, 0, 0);
        let mark = |power| {
            Some(Mark {
                power,
                known: power,
                at: t,
            })
        };
        let on = Some(Power::On);
        let later = |ms| t + chrono::Duration::milliseconds(ms);
        // The ledger's minute starts at the mark.
        let phase = t.timestamp_millis().rem_euclid(REACCOUNT_MS);
        let due = |mark, power, now| due(mark, power, now, phase);
        assert!(
            due(None, on, t),
            "a ledger with no mark takes its first step"
        );
        assert!(!due(mark(on), on, later(REACCOUNT_MS - 1)));
        assert!(due(mark(on), on, later(REACCOUNT_MS)));
        assert!(due(mark(on), Some(Power::Off), later(1)));
        assert!(due(mark(on), None, later(1)), "going blind is a change");
        assert!(due(mark(None), on, later(1)), "sight returning is a change");
        assert!(
            due(mark(on), on, later(-REACCOUNT_MS)),
            "a clock a minute back"
        );
        assert!(due(mark(on), on, later(-1)), "a clock a millisecond back");
    }

    // Issue 30: with passes every second, each unchanged ledger steps exactly once in each of its
    // minutes and never more than a minute after its mark, whatever its phase and the passes'
    // offset; and 100 000 slots' phases spread the steps over the minute, so no second holds
    // more than twice a sixtieth of them.
    #[test]
    fn unchanged_ledgers_step_once_a_minute_each_at_its_own_phase() {
        let start = at(10, 0, 0);
        for (phase, offset) in [(0, 0), (0, 999), (59_999, 0), (30_000, 500), (1, 1)] {
            let mut mark = Mark {
                power: Some(Power::On),
                known: Some(Power::On),
                at: start + chrono::Duration::milliseconds(offset),
            };
            let mut steps = Vec::new();
            for s in 1..=180 {
                let now = start + chrono::Duration::milliseconds(offset + s * 1_000);
                if due(Some(mark), Some(Power::On), now, phase) {
                    assert!(
                        (now - mark.at).num_milliseconds() <= REACCOUNT_MS,
                        "phase {phase}: a step {} ms after its mark",
                        (now - mark.at).num_milliseconds()
                    );
                    steps.push(s);
                    mark.at = now;
                }
            }
            assert_eq!(steps.len(), 3, "phase {phase}, offset {offset}: {steps:?}");
            assert!(
                steps.windows(2).all(|w| w[1] - w[0] == 60),
                "once a minute: {steps:?}"
            );
        }
        // The step comes at the phase, not before and not a minute later.
        let minute_start = at(10, 0, 0);
        assert_eq!(minute_start.timestamp_millis().rem_euclid(REACCOUNT_MS), 0);
        let ms = |n| minute_start + chrono::Duration::milliseconds(n);
        let mark = Some(Mark {
            power: Some(Power::On),
            known: Some(Power::On),
            at: ms(5_000),
        });
        assert!(!due(mark, Some(Power::On), ms(9_999), 10_000));
        assert!(due(mark, Some(Power::On), ms(10_000), 10_000));
        let mut per_second = vec![0u32; 60];
        for i in 0..100_000 {
            let phase = phase_of(&format!("bench-{i:05}"));
            assert!((0..REACCOUNT_MS).contains(&phase));
            per_second[(phase / 1_000) as usize] += 1;
        }
        let most = *per_second.iter().max().unwrap();
        let least = *per_second.iter().min().unwrap();
        assert!(most <= 2 * 100_000 / 60, "the busiest second: {most}");
        assert!(least >= 100_000 / 60 / 2, "the quietest second: {least}");
        assert_eq!(phase_of("bench-00001"), phase_of("bench-00001"));
        assert_ne!(phase_of("bench-00001"), phase_of("bench-00002"));
    }

    #[test]
    fn an_advance_totals_its_days() {
        let mut l = Ledger::default();
        l.observe(Some(Power::On), at(23, 0, 0));
        let next = at(1, 0, 0) + chrono::Duration::days(1);
        let adv = l.observe(Some(Power::Off), next);
        assert_eq!(adv.increments.len(), 2);
        assert_eq!(
            adv.total(),
            Bucket {
                on_ms: 2 * 3_600_000,
                off_ms: 0,
                activations: 0
            }
        );
    }

    fn power() -> impl Strategy<Value = Option<Power>> {
        prop_oneof![Just(Some(Power::On)), Just(Some(Power::Off)), Just(None)]
    }

    proptest! {
        /// Splitting the same history at any points (a restart that reads the stored ledger
        /// back, the controller's re-accounting with the power unchanged) gives the same totals.
        #[test]
        fn splitting_a_history_anywhere_gives_the_same_totals(
            steps in proptest::collection::vec((power(), 0i64..200_000_000), 1..40),
            cuts in proptest::collection::vec((any::<prop::sample::Index>(), 1i64..100_000_000), 0..10),
        ) {
            let start = at(0, 0, 0).timestamp_millis();
            let mut t = start;
            let mut events: Vec<_> = steps.iter().map(|(p, dt)| {
                t += dt;
                (*p, DateTime::from_timestamp_millis(t).unwrap())
            }).collect();
            // The history ends with one more observation, so every cut lies inside it.
            t += 100_000_000;
            events.push((events[events.len() - 1].0, DateTime::from_timestamp_millis(t).unwrap()));
            let whole = run(&events);
            // Every observation is re-accounted at points inside the interval that follows it,
            // with the same power, and the ledger is read back from its stored form there.
            let split = run_split(&events, &cuts);
            prop_assert_eq!(split.totals(0), whole.totals(0));
            prop_assert_eq!(split.days(), whole.days());
            let total = whole.totals(0);
            let span = u64::try_from(t - start).unwrap();
            prop_assert!(total.on_ms + total.off_ms <= span);
        }
    }

    fn ledger_of_days() -> impl Strategy<Value = Ledger> {
        // Up to 450 days with a bucket (a foreign or older ledger may hold more than the 401
        // kept), and a mark at noon of a day near the newest.
        (
            proptest::collection::btree_set(0i64..900, 0..450),
            0i64..1_000,
            power(),
            power(),
        )
            .prop_map(|(days, mark_day, p, k)| {
                let base = day_of(at(0, 0, 0));
                let days = days
                    .into_iter()
                    .map(|d| {
                        let b = Bucket {
                            on_ms: 1,
                            off_ms: 2,
                            activations: 0,
                        };
                        (base + d, b)
                    })
                    .collect();
                let mark = Mark {
                    power: p,
                    known: k.or(p),
                    at: at(12, 0, 0) + chrono::Duration::days(mark_day),
                };
                Ledger::from_parts(days, Some(mark))
            })
    }

    proptest! {
        /// Over ledgers of any size and steps of any length, forward or back (a millisecond to
        /// a century), and any power: a step never drops a day it did not replace with a newer
        /// one (a ledger of at most 401 days stays at most 401 and drops at most as many days as
        /// the step added), what it drops is older than everything kept, a step longer than the
        /// bound changes no day and accrues nothing, and one within it credits at most its own
        /// length.
        #[test]
        fn no_step_deletes_a_day_it_did_not_replace(
            ledger in ledger_of_days(),
            step in prop_oneof![
                -MAX_STEP_MS * 2..MAX_STEP_MS * 2,
                -3_155_760_000_000i64..3_155_760_000_000,
            ],
            power in power(),
        ) {
            let mut l = ledger.clone();
            let mark = l.mark().expect("a mark");
            let before = l.days().to_map();
            let adv = l.observe(power, mark.at + chrono::Duration::milliseconds(step));
            let added = l.days().keys().filter(|d| !before.contains_key(d)).count()
                + adv.trimmed.iter().filter(|d| !before.contains_key(d)).count();
            if step.unsigned_abs() > MAX_STEP_MS.unsigned_abs() {
                prop_assert_eq!(l.days().to_map(), before.clone());
                prop_assert_eq!(&adv, &Advance::default());
            } else {
                let credited = adv.total().on_ms + adv.total().off_ms;
                prop_assert!(credited <= step.max(0).unsigned_abs());
            }
            if before.len() <= KEPT_DAYS {
                prop_assert!(adv.trimmed.len() <= added);
                prop_assert!(l.days().len() <= KEPT_DAYS);
            }
            prop_assert!(l.days().len() <= before.len().max(KEPT_DAYS));
            if let (Some(dropped), Some(kept)) = (adv.trimmed.last(), l.days().keys().next()) {
                prop_assert!(dropped < kept);
            }
            for day in &adv.trimmed {
                prop_assert!(!l.days().contains_key(day));
            }
        }

        /// Splitting a history long enough to be trimmed (steps of up to the bound, up to 840
        /// days) anywhere gives the same days: which days are kept depends on the days
        /// accounted, not on where the steps fell.
        #[test]
        fn splitting_a_long_history_anywhere_keeps_the_same_days(
            steps in proptest::collection::vec((power(), 1i64..=MAX_STEP_MS), 60..120),
            cuts in proptest::collection::vec((any::<prop::sample::Index>(), 1i64..MAX_STEP_MS), 0..30),
        ) {
            let mut t = at(0, 0, 0).timestamp_millis();
            let events: Vec<_> = steps.iter().map(|(p, dt)| {
                t += dt;
                (*p, DateTime::from_timestamp_millis(t).unwrap())
            }).collect();
            let whole = run(&events);
            let split = run_split(&events, &cuts);
            prop_assert_eq!(split.days(), whole.days());
            prop_assert!(whole.days().len() <= KEPT_DAYS);
        }

        /// A leader's copy shed after every step (issue 30) steps exactly as the whole ledger:
        /// the same `Advance`s, the same kept days, and the same buckets from the mark's day on,
        /// over histories long enough to be trimmed, with clock steps of any size either way. A
        /// copy that no longer holds its open days (a clock stepped back onto shed days) is read
        /// again, as the controller does: here, from the whole ledger.
        #[test]
        fn a_shed_copy_steps_as_the_whole_ledger(
            steps in proptest::collection::vec(
                (power(), prop_oneof![
                    8 => 1i64..=MAX_STEP_MS,
                    1 => -3_155_760_000_000i64..3_155_760_000_000,
                ]),
                60..160,
            ),
        ) {
            let mut t = at(0, 0, 0).timestamp_millis();
            let mut whole = Ledger::default();
            let mut copy = Ledger::default();
            let mut reread_times = 0;
            for (p, dt) in &steps {
                t = t.saturating_add(*dt).clamp(0, 4_000_000_000_000);
                let now = DateTime::from_timestamp_millis(t).unwrap();
                let want = whole.observe(*p, now);
                let got = copy.observe(*p, now);
                prop_assert_eq!(&got, &want);
                copy.shed();
                if !copy.holds_the_open_days() {
                    copy = whole.clone();
                    copy.shed();
                    reread_times += 1;
                }
                prop_assert_eq!(copy.kept_days(), whole.kept_days());
                prop_assert_eq!(copy.mark(), whole.mark());
                let open = day_of(copy.mark().unwrap().at);
                let held: Vec<_> = copy.days().iter().map(|(d, b)| (*d, *b)).collect();
                let from_mark: Vec<_> = whole.days().iter().filter(|(d, _)| **d >= open).map(|(d, b)| (*d, *b)).collect();
                prop_assert_eq!(held, from_mark);
            }
            prop_assert!(reread_times <= steps.len());
        }
    }

    /// `events` observed one by one, and each re-observed at the points `cuts` name inside the
    /// interval that follows it (its index among the events, and how far into the interval),
    /// with the same power, the ledger read back from its stored form at each.
    fn run_split(
        events: &[(Option<Power>, DateTime<Utc>)],
        cuts: &[(prop::sample::Index, i64)],
    ) -> Ledger {
        let mut cut_at: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
        for (i, dt) in cuts {
            cut_at
                .entry(i.index(events.len() - 1))
                .or_default()
                .push(*dt);
        }
        let mut split = Ledger::default();
        for (n, (p, when)) in events.iter().enumerate() {
            split.observe(*p, *when);
            let next = events
                .get(n + 1)
                .map_or(i64::MAX, |e| e.1.timestamp_millis());
            let mut offsets = cut_at.get(&n).cloned().unwrap_or_default();
            offsets.sort();
            for dt in offsets {
                let mid = when.timestamp_millis() + dt;
                if mid >= next {
                    continue;
                }
                split.observe(*p, DateTime::from_timestamp_millis(mid).unwrap());
                split = reread(&split);
            }
        }
        split
    }

    /// The ledger through its stored form, as a successor reads it.
    fn reread(l: &Ledger) -> Ledger {
        let days = l
            .days()
            .iter()
            .map(|(d, b)| (*d, Bucket::parse(&b.render()).unwrap()))
            .collect();
        Ledger::from_parts(days, l.mark().map(|m| Mark::parse(&m.render()).unwrap()))
    }
}
