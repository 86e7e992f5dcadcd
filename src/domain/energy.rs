//! The energy ledger (SPEC §4.12): a slot's time on and off by UTC day, from the transitions the
//! controller observes, and what powering off saved against an always-on baseline.
//!
//! The ledger is advanced by [`Ledger::observe`] with the slot's observed power and `now` (the
//! Redis server's time): the interval since the last observation is credited to the power that
//! was observed then, split at UTC midnights. Unknown power (a blind controller, SPEC §5.2)
//! accrues nothing and does not end an interval: off, blind, on is one activation, and on,
//! blind, on is none. The time is kept in whole milliseconds, so splitting the same history at
//! any points (a restart, a failover, the controller's once-a-minute re-accounting) gives the
//! same totals exactly. Daily buckets older than [`RETENTION_DAYS`] are dropped, so the ledger
//! is bounded. Pure: no I/O, no clock.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};

use super::power::Power;

/// Days of buckets kept before the current one. The issue asks for at least 400.
pub const RETENTION_DAYS: i64 = 400;

/// How often an unchanged power is accounted again, so the stored ledger is never more than
/// this behind and a successor loses at most this much to a crash.
pub const REACCOUNT_MS: i64 = 60_000;

/// Whether the ledger should take a step now: it has none yet, the power changed since its
/// mark, or the mark is [`REACCOUNT_MS`] old (or from the future: a clock that stepped back is
/// left to `observe`).
pub fn due(mark: Option<Mark>, power: Option<Power>, now: DateTime<Utc>) -> bool {
    mark.is_none_or(|m| m.power != power || (now - m.at).num_milliseconds().abs() >= REACCOUNT_MS)
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    days: BTreeMap<Day, Bucket>,
    mark: Option<Mark>,
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

    pub fn days(&self) -> &BTreeMap<Day, Bucket> {
        &self.days
    }

    /// Builds a ledger from stored parts. Days outside the representable range are skipped by
    /// the caller's parse; here they are taken as given.
    pub fn from_parts(days: BTreeMap<Day, Bucket>, mark: Option<Mark>) -> Ledger {
        Ledger { days, mark }
    }

    /// Advances the ledger to `now` with the power observed now (None: unknown).
    ///
    /// The interval since the mark counts as the power observed at the mark: the ledger knows
    /// only the transitions it observes, so a controller's absence (a restart, a failover)
    /// counts as the state it last saw, and the first observation after it ends the interval.
    /// An observation earlier than the mark (a clock that stepped back) accrues nothing and
    /// keeps the mark's time, so no interval is counted twice.
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
        let oldest = day_of(now.max(mark.at)) - RETENTION_DAYS;
        if now > mark.at {
            credit(&mut advance.increments, mark.power, mark.at, now, oldest);
        }
        let at = now.max(mark.at);
        if mark.known == Some(Power::Off) && power == Some(Power::On) && day_of(at) >= oldest {
            advance
                .increments
                .entry(day_of(at))
                .or_default()
                .activations += 1;
        }
        for (day, inc) in &advance.increments {
            self.days.entry(*day).or_default().add(*inc);
        }
        advance.trimmed = self.days.range(..oldest).map(|(d, _)| *d).collect();
        for day in &advance.trimmed {
            self.days.remove(day);
        }
        self.mark = Some(Mark {
            power,
            known: power.or(mark.known),
            at,
        });
        advance
    }

    /// The sum of the buckets from `since` (a day) on.
    pub fn totals(&self, since: Day) -> Bucket {
        let mut sum = Bucket::default();
        for bucket in self.days.range(since..).map(|(_, b)| b) {
            sum.add(*bucket);
        }
        sum
    }
}

/// Credits `[from, to)` to `power`'s column, split at UTC midnights; days before `oldest` are
/// outside the retention window and get nothing.
fn credit(
    into: &mut BTreeMap<Day, Bucket>,
    power: Option<Power>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    oldest: Day,
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
        if day >= oldest {
            let bucket = into.entry(day).or_default();
            match power {
                Power::On => bucket.on_ms += span,
                Power::Off => bucket.off_ms += span,
            }
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

    /// The sum of slots' figures, for a group's total.
    pub fn sum(figures: impl IntoIterator<Item = Figures>) -> Figures {
        let zero = Figures {
            hours_on: 0.0,
            hours_off: 0.0,
            kwh: 0.0,
            kwh_saved: 0.0,
            cost_saved: 0.0,
            activations: 0,
        };
        figures.into_iter().fold(zero, |a, f| Figures {
            hours_on: a.hours_on + f.hours_on,
            hours_off: a.hours_off + f.hours_off,
            kwh: a.kwh + f.kwh,
            kwh_saved: a.kwh_saved + f.kwh_saved,
            cost_saved: a.cost_saved + f.cost_saved,
            activations: a.activations + f.activations,
        })
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

    #[test]
    fn buckets_older_than_the_retention_are_trimmed() {
        let mut l = Ledger::default();
        l.observe(Some(Power::On), at(0, 0, 0));
        l.observe(Some(Power::On), at(12, 0, 0));
        let later = at(12, 0, 0) + chrono::Duration::days(RETENTION_DAYS + 1);
        let adv = l.observe(Some(Power::Off), later);
        let today = day_of(later);
        assert_eq!(adv.trimmed, vec![day_of(at(0, 0, 0))]);
        assert_eq!(l.days().keys().next(), Some(&(today - RETENTION_DAYS)));
        assert_eq!(l.days().len() as i64, RETENTION_DAYS + 1);
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
            let mut split = Ledger::default();
            let mut cut_at: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
            for (i, dt) in &cuts {
                cut_at.entry(i.index(events.len() - 1)).or_default().push(*dt);
            }
            for (n, (p, when)) in events.iter().enumerate() {
                split.observe(*p, *when);
                let next = events.get(n + 1).map_or(i64::MAX, |e| e.1.timestamp_millis());
                let mut offsets = cut_at.get(&n).cloned().unwrap_or_default();
                offsets.sort();
                for dt in offsets {
                    let mid = when.timestamp_millis() + dt;
                    if mid >= next { continue; }
                    split.observe(*p, DateTime::from_timestamp_millis(mid).unwrap());
                    split = reread(&split);
                }
            }
            prop_assert_eq!(split.totals(0), whole.totals(0));
            prop_assert_eq!(split.days(), whole.days());
            let total = whole.totals(0);
            let span = u64::try_from(t - start).unwrap();
            prop_assert!(total.on_ms + total.off_ms <= span);
        }
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
