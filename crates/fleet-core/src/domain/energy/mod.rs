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
//! is old, so a clock that steps forward deletes no history. A step longer than
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
/// spread over the minute, a sixtieth of them each second, rather than all in one pass,
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
/// controller's energy memory. A leader's copy may [`shed`](Ledger::shed) the buckets no
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
    /// goes only when a newer day's bucket takes its place (with the days trimmed by
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
mod tests;
