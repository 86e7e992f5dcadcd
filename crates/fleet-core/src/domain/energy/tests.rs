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
/// what 401 buckets cost it before.
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

// One forward step of Redis's clock could delete up to 400 days of buckets (the
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

// With passes every second, each unchanged ledger steps exactly once in each of its
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

    /// A leader's copy shed after every step steps exactly as the whole ledger:
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
