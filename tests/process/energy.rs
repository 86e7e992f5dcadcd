//! The energy ledger's store (SPEC §4.12) against a real redis-server: a scripted day of
//! observations, written step by step as the leader writes them, reads back to the expected
//! hours and kWh to the second; a controller restart in between (a successor that reads the
//! ledger back) changes nothing; a writer that read a stale mark or lost the fence writes
//! nothing.

use crate::support;

use chrono::{DateTime, Duration, TimeZone, Utc};
use fleet::domain::energy::{Bucket, Draw, Figures, Ledger, day_of};
use fleet::domain::name::GroupName;
use fleet::domain::power::Power;
use fleet::store::claims::ClaimStore;
use fleet::store::energy::{Accounted, EnergyError, EnergyStore};
use fleet::store::keys::Keys;
use fleet_testing::Fixture;
use fleet_testing::fixture::{self, Group, Op, Slot, Template};
use redis::aio::MultiplexedConnection;
use support::*;

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, h, m, s).unwrap()
}

fn group() -> GroupName {
    GroupName::parse("rack").unwrap()
}

/// The group `rack` of up to `max` machines of 4 cores and 8 GiB, each drawing 200 W on (5 W
/// off) at 0.3 a kWh.
fn rack(max: u32) -> Group {
    let draw = fixture::Power::new(200.0, 0.3).standby(5.0);
    Group::new("rack")
        .max(max)
        .startup(Op::command(["true"]))
        .shutdown(Op::command(["true"]))
        .template(
            Template::new()
                .capacity("cpu", "4")
                .capacity("memory", "8Gi")
                .power(draw),
        )
}

/// Off at midnight, on 08:00–12:30, blind 14:00–15:00, on 18:15:30–22:00, off to midnight, with
/// the once-a-minute re-accounting of an unchanged power in between at a few points.
fn scripted_day() -> Vec<(Option<Power>, DateTime<Utc>)> {
    use Power::*;
    vec![
        (Some(Off), at(0, 0, 0)),
        (Some(Off), at(0, 1, 0)),
        (Some(On), at(8, 0, 0)),
        (Some(On), at(8, 0, 59)),
        (Some(Off), at(12, 30, 0)),
        (None, at(14, 0, 0)),
        (None, at(14, 30, 0)),
        (Some(Off), at(15, 0, 0)),
        (Some(On), at(18, 15, 30)),
        (Some(Off), at(22, 0, 0)),
        (Some(Off), at(23, 59, 0)),
        (Some(Off), at(0, 0, 0) + Duration::days(1)),
    ]
}

/// The leader's side: its ledger in memory, read from the store when it has none.
struct Leader {
    store: EnergyStore<MultiplexedConnection>,
    ledger: Option<Ledger>,
}

impl Leader {
    async fn observe(&mut self, power: Option<Power>, now: DateTime<Utc>) -> Accounted {
        let slot = name("n1");
        let mut ledger = match self.ledger.take() {
            Some(l) => l,
            None => {
                let stored = self.store.read(&group(), &slot).await.unwrap();
                assert_eq!(stored.skipped, Vec::<String>::new());
                stored.ledger
            }
        };
        let before = ledger.mark();
        let advance = ledger.observe(power, now);
        let done = self
            .store
            .account(&group(), &slot, before, &ledger, &advance)
            .await
            .unwrap();
        if done == Accounted::Written {
            self.ledger = Some(ledger);
        }
        done
    }
}

async fn leader(server: &fleet_testing::RedisServer, token: &str) -> Leader {
    let c = conn(server).await;
    let claims = ClaimStore::new(c.clone(), Keys::default());
    assert!(claims.raise_fence(&group(), token).await.unwrap());
    Leader {
        store: EnergyStore::new(c, Keys::default()).fenced(token),
        ledger: None,
    }
}

const ON_MS: u64 = (4 * 3600 + 1800 + 3 * 3600 + 44 * 60 + 30) * 1000;

fn expected() -> Bucket {
    Bucket {
        on_ms: ON_MS,
        off_ms: 86_400_000 - 3_600_000 - ON_MS,
        activations: 2,
    }
}

async fn stored_day(server: &fleet_testing::RedisServer) -> Ledger {
    let reader = EnergyStore::new(conn(server).await, Keys::default());
    let stored = reader.read(&group(), &name("n1")).await.unwrap();
    assert_eq!(stored.skipped, Vec::<String>::new());
    stored.ledger
}

#[tokio::test]
async fn a_scripted_day_reads_back_to_the_second() {
    let server = server();
    let mut l = leader(&server, "1").await;
    for (p, t) in scripted_day() {
        assert_eq!(l.observe(p, t).await, Accounted::Written);
    }
    let ledger = stored_day(&server).await;
    let day = day_of(at(0, 0, 0));
    assert_eq!(ledger.days().len(), 1);
    assert_eq!(ledger.days().get(&day), Some(&expected()));
    let f = Figures::of(
        ledger.totals(day),
        Draw {
            watts: 200.0,
            standby_watts: 5.0,
            price_per_kwh: 0.30,
        },
    );
    let hours_on = 29_670.0 / 3600.0;
    let hours_off = (86_400.0 - 3600.0 - 29_670.0) / 3600.0;
    assert!((f.hours_on - hours_on).abs() < 1e-12);
    assert!((f.hours_off - hours_off).abs() < 1e-12);
    assert!((f.kwh - (hours_on * 0.2 + hours_off * 0.005)).abs() < 1e-12);
    assert!((f.kwh_saved - hours_off * 0.195).abs() < 1e-12);
    assert!((f.cost_saved - hours_off * 0.195 * 0.30).abs() < 1e-12);
    assert_eq!(f.activations, 2);
    // The stored form is the one the module documents.
    let raw: String = raw(&server, &["HGET", "{fleet:rack}:energy:n1", "2026-11-30"]).await;
    assert_eq!(
        raw,
        format!("{} {} 2", ON_MS, 86_400_000 - 3_600_000 - ON_MS)
    );
}

#[tokio::test]
async fn a_controller_restart_at_any_step_changes_nothing() {
    let events = scripted_day();
    for cut in 1..events.len() {
        let server = server();
        let mut first = leader(&server, "1").await;
        for (p, t) in &events[..cut] {
            assert_eq!(first.observe(*p, *t).await, Accounted::Written);
        }
        // The successor raises the fence and starts from what the store holds.
        let mut second = leader(&server, "2").await;
        for (p, t) in &events[cut..] {
            assert_eq!(second.observe(*p, *t).await, Accounted::Written);
        }
        let ledger = stored_day(&server).await;
        assert_eq!(
            ledger.days().get(&day_of(at(0, 0, 0))),
            Some(&expected()),
            "restart before step {cut}"
        );
        // The old leader, fenced out, writes nothing.
        let last = events[events.len() - 1].1 + Duration::hours(1);
        let mut stale = first.ledger.take().unwrap();
        let before = stale.mark();
        let advance = stale.observe(Some(Power::On), last);
        let refused = first
            .store
            .account(&group(), &name("n1"), before, &stale, &advance)
            .await;
        assert!(
            matches!(refused, Err(EnergyError::Fenced { .. })),
            "{refused:?}"
        );
        assert_eq!(stored_day(&server).await, ledger);
    }
}

#[tokio::test]
async fn a_step_from_a_stale_mark_is_refused_and_writes_nothing() {
    let server = server();
    let mut a = leader(&server, "1").await;
    a.observe(Some(Power::Off), at(0, 0, 0)).await;
    // Another writer of the same token (a pass of a process that read earlier) moved on.
    let mut b = Leader {
        store: a.store.clone(),
        ledger: None,
    };
    assert_eq!(
        b.observe(Some(Power::On), at(1, 0, 0)).await,
        Accounted::Written
    );
    assert_eq!(
        a.observe(Some(Power::Off), at(2, 0, 0)).await,
        Accounted::Moved
    );
    let ledger = stored_day(&server).await;
    assert_eq!(
        ledger.totals(0),
        Bucket {
            on_ms: 0,
            off_ms: 3_600_000,
            activations: 1
        }
    );
    // Read again, the writer continues from the other's mark.
    assert_eq!(
        a.observe(Some(Power::Off), at(2, 0, 0)).await,
        Accounted::Written
    );
    assert_eq!(stored_day(&server).await.totals(0).on_ms, 3_600_000);
}

#[tokio::test]
async fn garbage_in_the_ledger_hash_is_skipped_with_a_reason() {
    let server = server();
    let _: i64 = raw(
        &server,
        &[
            "HSET",
            "{fleet:rack}:energy:n1",
            "2026-11-30",
            "12 34 1",
            "2026-11-29",
            "twelve",
            "mark",
            "on on 1764460800000",
        ],
    )
    .await;
    let stored = EnergyStore::new(conn(&server).await, Keys::default())
        .read(&group(), &name("n1"))
        .await
        .unwrap();
    assert_eq!(stored.ledger.totals(0).on_ms, 12);
    assert_eq!(
        stored.skipped,
        vec![
            "field 2026-11-29: bucket \"twelve\": on_ms \"twelve\" is not a whole number"
                .to_owned()
        ]
    );
}

/// The controller's own accounting (SPEC §4.12): each pass gives each slot's observed power to
/// its ledger; a successor controller (fresh memory) reads the ledger back and goes on from its
/// mark. The stored figures are exactly the intervals between the marks the passes left, by the
/// server's clock, and the counters say the same.
#[tokio::test]
async fn the_controller_accounts_what_each_pass_observes_across_a_restart() {
    use fleet::reconcile::Controller;
    use fleet::telemetry::{Health, Metrics};
    use std::sync::Arc;

    let server = server();
    let text = Fixture::new()
        .group(rack(1).ungated())
        .slots("rack", ["n1"])
        .yaml();
    let cfg = fleet::config::parse(&text, std::path::Path::new("energy.yaml")).unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(cfg));
    let controller = |metrics: Arc<Metrics>| {
        let rx = rx.clone();
        let server = &server;
        async move {
            Controller::new(
                rx,
                fleet::store::presence::Presence::new(conn(server).await, Keys::default()),
                ClaimStore::new(conn(server).await, Keys::default()),
                Arc::new(exec(server)),
                metrics,
                Arc::new(Health::default()),
            )
        }
    };
    let reader = EnergyStore::new(conn(&server).await, Keys::default());
    let mark = || async {
        let stored = reader.read(&group(), &name("n1")).await.unwrap();
        assert_eq!(stored.skipped, Vec::<String>::new());
        (stored.ledger.mark().unwrap(), stored.ledger.totals(0))
    };
    let ms = |a: &fleet::domain::energy::Mark, b: &fleet::domain::energy::Mark| {
        u64::try_from((b.at - a.at).num_milliseconds()).unwrap()
    };

    let first_metrics = Arc::new(Metrics::default());
    let mut first = controller(first_metrics.clone()).await;
    bounded("a pass", first.pass()).await.unwrap();
    let (m1, totals) = mark().await;
    assert_eq!(m1.power, Some(Power::Off), "no beat: the machine reads off");
    assert_eq!(
        totals,
        Bucket::default(),
        "the first step only sets the mark"
    );

    presence(&server)
        .await
        .beat(&beat("n1", std::time::Duration::from_secs(3600)))
        .await
        .unwrap();
    bounded("a pass", first.pass()).await.unwrap();
    let (m2, totals) = mark().await;
    assert_eq!(m2.power, Some(Power::On));
    let off_ms = ms(&m1, &m2);
    assert!(off_ms > 0);
    let want = Bucket {
        on_ms: 0,
        off_ms,
        activations: 1,
    };
    assert_eq!(totals, want);
    assert_eq!(
        counter(&first_metrics, "off_seconds"),
        off_ms as f64 / 1000.0
    );
    assert_eq!(counter(&first_metrics, "activations"), 1.0);

    // A successor with no memory: an unchanged power within the minute writes nothing, and the
    // machine going dark is accounted from the predecessor's mark.
    let second_metrics = Arc::new(Metrics::default());
    let mut second = controller(second_metrics.clone()).await;
    bounded("a pass", second.pass()).await.unwrap();
    assert_eq!(
        mark().await.0,
        m2,
        "an unchanged power within the minute is not a step"
    );
    presence(&server).await.forget(&[name("n1")]).await.unwrap();
    bounded("a pass", second.pass()).await.unwrap();
    let (m3, totals) = mark().await;
    assert_eq!(m3.power, Some(Power::Off));
    let on_ms = ms(&m2, &m3);
    assert_eq!(
        totals,
        Bucket {
            on_ms,
            off_ms,
            activations: 1
        }
    );
    let kwh = Figures::of(
        Bucket {
            on_ms,
            off_ms: 0,
            activations: 0,
        },
        Draw {
            watts: 200.0,
            standby_watts: 5.0,
            price_per_kwh: 0.3,
        },
    )
    .kwh;
    assert_eq!(counter(&second_metrics, "kwh"), kwh);
    assert_eq!(
        counter(&second_metrics, "on_seconds"),
        on_ms as f64 / 1000.0
    );
    // The first controller's copy is stale (its mark is m2): its step is refused, it writes
    // nothing and reads the ledger again for its next step.
    bounded("a pass", first.pass()).await.unwrap();
    let (m4, totals) = mark().await;
    assert_eq!(m4, m3, "a step from a moved mark writes nothing");
    assert_eq!(totals.on_ms, on_ms);
    presence(&server)
        .await
        .beat(&beat("n1", std::time::Duration::from_secs(3600)))
        .await
        .unwrap();
    bounded("a pass", first.pass()).await.unwrap();
    let (m5, totals) = mark().await;
    assert_eq!(m5.power, Some(Power::On));
    assert_eq!(totals.off_ms, off_ms + ms(&m3, &m5));
    assert_eq!(totals.activations, 2);
}

/// A group of one slot more than a round trip of the accounting takes (`LEDGERS_AT_ONCE`): a
/// new leader's first pass reads and steps every ledger, in parts, each once; a change on either
/// side of the parts' edge is written to its own slot, and the slots between are left alone.
#[tokio::test]
async fn a_group_larger_than_a_part_is_accounted_in_parts_each_ledger_once() {
    use fleet::reconcile::{Controller, LEDGERS_AT_ONCE};
    use fleet::telemetry::{Health, Metrics};
    use std::sync::Arc;

    let server = server();
    let n = LEDGERS_AT_ONCE + 1;
    let names: Vec<String> = (0..n).map(|i| format!("n{i:05}")).collect();
    let text = Fixture::new()
        .group(rack(n as u32).ungated())
        .slots("rack", names.iter().map(String::as_str))
        .yaml();
    let cfg = fleet::config::parse(&text, std::path::Path::new("energy.yaml")).unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(Arc::new(cfg));
    let mut controller = Controller::new(
        rx,
        fleet::store::presence::Presence::new(conn(&server).await, Keys::default()),
        ClaimStore::new(conn(&server).await, Keys::default()),
        Arc::new(exec(&server)),
        Arc::new(Metrics::default()),
        Arc::new(Health::default()),
    );
    let reader = EnergyStore::new(conn(&server).await, Keys::default());
    let slots: Vec<_> = names.iter().map(|s| name(s)).collect();
    let marks = || async {
        let stored = reader.read_all(&group(), &slots).await.unwrap();
        stored
            .into_iter()
            .map(|s| s.ledger.mark().map(|m| m.power))
            .collect::<Vec<_>>()
    };

    bounded("a pass", controller.pass()).await.unwrap();
    assert_eq!(
        marks().await,
        vec![Some(Some(Power::Off)); n],
        "every ledger of both parts has its first mark"
    );
    let (first, last) = (&names[0], &names[n - 1]);
    for bench in [first, last] {
        presence(&server)
            .await
            .beat(&beat(bench, std::time::Duration::from_secs(3600)))
            .await
            .unwrap();
    }
    bounded("a pass", controller.pass()).await.unwrap();
    let after = marks().await;
    assert_eq!(after[0], Some(Some(Power::On)));
    assert_eq!(
        after[n - 1],
        Some(Some(Power::On)),
        "the second part's slot"
    );
    let off = after[1..n - 1]
        .iter()
        .filter(|m| **m == Some(Some(Power::Off)))
        .count();
    assert_eq!(off, n - 2, "the slots between still read off");
    for bench in [first, last] {
        let stored = reader.read(&group(), &name(bench)).await.unwrap();
        let today = stored.ledger.mark().unwrap().at;
        assert_eq!(
            stored.ledger.totals(day_of(today)).activations,
            1,
            "{bench}"
        );
    }
}

/// The value of `fleet_energy_<what>_total` for slot n1 of rack.
fn counter(metrics: &fleet::telemetry::Metrics, what: &str) -> f64 {
    let text = metrics.encode();
    let series = format!("fleet_energy_{what}_total{{group=\"rack\",slot=\"n1\"}} ");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series}in\n{text}"));
    line.parse().unwrap()
}

/// `fleet energy` (SPEC §4.12) over a scripted yesterday and an hour of today, by the server's
/// clock: each slot's row and the group's total are the figures of the stored buckets, in JSON
/// and in the table; `--since` narrows the window by whole days; a slot without a draw shows
/// hours only; bad input is exit 2.
#[tokio::test]
async fn fleet_energy_reports_each_slot_and_the_group_total_from_the_ledgers() {
    use fleet::store::catalog::Catalog;
    let server = server();
    let minis = Group::new("minis")
        .max(1)
        .startup(Op::command(["true"]))
        .shutdown(Op::command(["true"]));
    let text = Fixture::new()
        .group(rack(2))
        .group(minis)
        .slots("rack", ["n1"])
        .slot(
            Slot::new("n2", "rack")
                .power(fixture::Power::overrides().watts(100.0).price_per_kwh(0.5)),
        )
        .slots("minis", ["m1"])
        .yaml();
    let cfg = fleet::config::parse(&text, std::path::Path::new("energy.yaml")).unwrap();
    Catalog::of(&cfg)
        .publish(&mut conn(&server).await, &Keys::default())
        .await
        .unwrap();
    let (secs, _): (i64, i64) = raw(&server, &["TIME"]).await;
    let today = day_of(DateTime::from_timestamp(secs, 0).unwrap());
    let midnight = |day: i64| DateTime::from_timestamp(day * 86_400, 0).unwrap();
    let yesterday = midnight(today - 1);
    let h = |hours: i64| yesterday + Duration::hours(hours);
    // n1: yesterday off 0–8, on 8–20, off 20–24 and into today; n2: on all of yesterday; m1:
    // off 0–6 then on to midnight.
    let mut c = conn(&server).await;
    let claims = ClaimStore::new(c.clone(), Keys::default());
    let _ = claims.raise_fence(&group(), "1").await.unwrap();
    let write = |slot: &'static str, grp: &'static str, steps: Vec<(Power, DateTime<Utc>)>| {
        let store = EnergyStore::new(c.clone(), Keys::default());
        async move {
            let g = GroupName::parse(grp).unwrap();
            let mut ledger = Ledger::default();
            for (p, t) in steps {
                let before = ledger.mark();
                let adv = ledger.observe(Some(p), t);
                let slot = name(slot);
                let done = store.account(&g, &slot, before, &ledger, &adv).await;
                assert_eq!(done.unwrap(), Accounted::Written);
            }
            ledger
        }
    };
    use Power::*;
    let n1 = write(
        "n1",
        "rack",
        vec![(Off, h(0)), (On, h(8)), (Off, h(20)), (Off, h(25))],
    )
    .await;
    let n2 = write("n2", "rack", vec![(On, h(0)), (On, h(24))]).await;
    let m1 = write("m1", "minis", vec![(Off, h(0)), (On, h(6)), (On, h(24))]).await;
    assert_eq!(n1.totals(today - 1).on_ms, 12 * 3_600_000);
    assert_eq!(n2.totals(today - 1).on_ms, 24 * 3_600_000);

    let json: serde_json::Value =
        serde_json::from_str(&fleet_ok(&server, &["energy", "-o", "json"])).unwrap();
    let groups = json["groups"].as_array().unwrap();
    let rack = groups.iter().find(|g| g["group"] == "rack").unwrap();
    let slot = |g: &serde_json::Value, s: &str| {
        g["slots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["slot"] == s)
            .unwrap()
            .clone()
    };
    let n1_row = slot(rack, "n1");
    assert_eq!(n1_row["hours_on"], 12.0);
    assert_eq!(n1_row["hours_off"], 13.0);
    assert_eq!(n1_row["activations"], 1);
    let want = Figures::of(
        n1.totals(today - 1),
        Draw {
            watts: 200.0,
            standby_watts: 5.0,
            price_per_kwh: 0.3,
        },
    );
    assert_eq!(n1_row["kwh"].as_f64().unwrap(), want.kwh);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(
        n1_row["kwh"].as_f64().unwrap(),
        12.0 * 0.2 + 13.0 * 0.005
    ));
    assert!(close(n1_row["kwh_saved"].as_f64().unwrap(), 13.0 * 0.195));
    assert_eq!(n1_row["cost_saved"].as_f64().unwrap(), want.cost_saved);
    let n2_row = slot(rack, "n2");
    assert_eq!(
        (n2_row["hours_on"].as_f64(), n2_row["kwh"].as_f64()),
        (Some(24.0), Some(2.4))
    );
    assert_eq!(n2_row["kwh_saved"].as_f64(), Some(0.0));
    assert_eq!(rack["total"]["hours_on"].as_f64(), Some(36.0));
    assert_eq!(rack["total"]["kwh"].as_f64(), Some(want.kwh + 2.4));
    assert_eq!(rack["total"]["activations"], 1);
    let minis = groups.iter().find(|g| g["group"] == "minis").unwrap();
    let m1_row = slot(minis, "m1");
    assert_eq!(
        (m1_row["hours_on"].as_f64(), m1_row["hours_off"].as_f64()),
        (Some(18.0), Some(6.0))
    );
    assert!(m1_row["kwh"].is_null(), "no draw, no kWh: {m1_row}");
    assert!(minis["total"]["kwh"].is_null());
    assert_eq!(m1.totals(0).activations, 1);

    // Today only: n1's hour off, nothing else.
    let json: serde_json::Value = serde_json::from_str(&fleet_ok(
        &server,
        &["energy", "--since", "1ms", "rack", "-o", "json"],
    ))
    .unwrap();
    let groups = json["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    let n1_today = slot(&groups[0], "n1");
    assert_eq!(
        (
            n1_today["hours_on"].as_f64(),
            n1_today["hours_off"].as_f64()
        ),
        (Some(0.0), Some(1.0))
    );

    let table = fleet_ok(&server, &["energy"]);
    let row = |slot: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(slot))
            .unwrap_or_else(|| panic!("no row {slot} in\n{table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        row("n1"),
        [
            "rack", "n1", "12.00", "13.00", "2.465", "2.535", "0.76", "1"
        ]
    );
    assert_eq!(
        row("m1"),
        ["minis", "m1", "18.00", "6.00", "-", "-", "-", "1"]
    );
    let totals: Vec<_> = table.lines().filter(|l| l.contains("(total)")).collect();
    assert_eq!(totals.len(), 2, "{table}");

    // A foreign field is left out and said.
    let _: () = redis::cmd("HSET")
        .arg("{fleet:rack}:energy:n1")
        .arg("junk")
        .arg("1")
        .query_async(&mut c)
        .await
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&fleet_ok(&server, &["energy", "-o", "json"])).unwrap();
    assert_eq!(json["problems"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(slot(&json["groups"][1], "n1")["hours_on"], 12.0, "{json}");

    for (args, says) in [
        (&["energy", "nope"][..], "no group nope"),
        (
            &["energy", "--since", "401d"][..],
            "invalid duration \"401d\"",
        ),
        (&["energy", "--since", "soon"][..], "invalid duration"),
    ] {
        let o = run_fleet(&server, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Five steps on fresh ledgers (`<prefix>0` to `<prefix>4`, each on at `t`) written by `store`
/// in one call, every one written: the `EVAL`s and `EVALSHA`s Redis ran for them.
async fn account_five(
    server: &fleet_testing::RedisServer,
    store: EnergyStore<MultiplexedConnection>,
    prefix: &str,
    t: DateTime<Utc>,
) -> (u64, u64) {
    let taken: Vec<_> = (0..5)
        .map(|i| {
            let mut ledger = Ledger::default();
            let advance = ledger.observe(Some(Power::On), t);
            (name(&format!("{prefix}{i}")), ledger, advance)
        })
        .collect();
    let steps: Vec<fleet::store::energy::Step> = (taken.iter())
        .map(|(slot, after, advance)| fleet::store::energy::Step {
            slot,
            before: None,
            after,
            advance,
        })
        .collect();
    let calls = || async {
        (
            command_calls(server, "eval").await,
            command_calls(server, "evalsha").await,
        )
    };
    let before = calls().await;
    let answers = store.account_all(&group(), &steps).await.unwrap();
    assert!(
        answers.iter().all(|a| matches!(a, Ok(Accounted::Written))),
        "{answers:?}"
    );
    let after = calls().await;
    (after.0 - before.0, after.1 - before.1)
}

// A group's steps go in one pipeline, the first whole (`EVAL`) and the rest by hash behind it (a
// 100 000-slot pass sent 2.3 kB of script per step and peaked at 1.4 GB, SPEC §5.7); a user
// whose ACL refuses `EVALSHA` (a file written before fleet used it) gets every step written all
// the same, the refused ones sent again whole.
#[tokio::test]
async fn a_groups_steps_go_by_hash_after_the_first_and_whole_again_where_evalsha_is_refused() {
    let server = server();
    let _leader = leader(&server, "1").await;
    let store = EnergyStore::new(conn(&server).await, Keys::default()).fenced("1");
    assert_eq!(
        account_five(&server, store, "a", at(1, 0, 0)).await,
        (1, 4),
        "one whole, four by hash"
    );

    let _: () = raw(
        &server,
        &[
            "ACL", "SETUSER", "old", "on", ">pw", "~*", "+@all", "-evalsha",
        ],
    )
    .await;
    let mut old = conn(&server).await;
    let _: () = redis::cmd("AUTH")
        .arg("old")
        .arg("pw")
        .query_async(&mut old)
        .await
        .unwrap();
    let store = EnergyStore::new(old, Keys::default()).fenced("1");
    assert_eq!(
        account_five(&server, store, "b", at(2, 0, 0)).await,
        (5, 0),
        "refused by hash, then whole"
    );

    let reader = EnergyStore::new(conn(&server).await, Keys::default());
    for (slot, t) in [
        ("a0", at(1, 0, 0)),
        ("a4", at(1, 0, 0)),
        ("b0", at(2, 0, 0)),
        ("b4", at(2, 0, 0)),
    ] {
        let stored = reader.read(&group(), &name(slot)).await.unwrap();
        assert_eq!(stored.ledger.mark().map(|m| m.at), Some(t), "{slot}");
    }
}

// SPEC §4.12: one forward step of Redis's clock deleted up to 400 days of buckets,
// the days being trimmed by the clock's day. A ledger of 400 days, written step by step through
// the store as the leader writes it, then the server's time (the `now` every step is taken at)
// a year ahead: the step writes no day and deletes none; the hour of steps on that clock adds
// its own day and deletes none; a successor that reads the ledger back on a clock put right
// again accounts from there, at once, and the 400 days are still whole.
#[tokio::test]
async fn a_year_forward_step_of_the_servers_clock_keeps_every_day_of_history() {
    let server = server();
    let mut a = leader(&server, "1").await;
    let first = at(12, 0, 0);
    for d in 0..400 {
        let power = if d % 3 == 0 { Power::Off } else { Power::On };
        let now = first + Duration::days(d);
        assert_eq!(a.observe(Some(power), now).await, Accounted::Written);
    }
    let history = stored_day(&server).await;
    assert_eq!(history.days().len(), 400);
    let last = first + Duration::days(399);

    let leap = last + Duration::days(365);
    assert_eq!(a.observe(Some(Power::On), leap).await, Accounted::Written);
    let stepped = stored_day(&server).await;
    let changed = (history.days().iter())
        .filter(|(d, b)| stepped.days().get(d) != Some(b))
        .count();
    assert_eq!(
        (changed, stepped.days().len()),
        (0, 400),
        "the step changed days of the history, or wrote new ones"
    );
    assert_eq!(stepped.mark().map(|m| m.at), Some(leap));
    for minute in 1..=60 {
        let now = leap + Duration::minutes(minute);
        assert_eq!(a.observe(Some(Power::On), now).await, Accounted::Written);
    }
    let after = stored_day(&server).await;
    assert_eq!(after.days().len(), 401);
    let kept = (history.days().iter())
        .filter(|(d, b)| after.days().get(d) == Some(b))
        .count();
    assert_eq!(kept, 400, "every day of the history kept");
    assert_eq!(after.days()[&day_of(leap)].on_ms, 3_600_000);
    let fields: i64 = raw(&server, &["HLEN", "{fleet:rack}:energy:n1"]).await;
    assert_eq!(fields, 402, "401 days and the mark");

    // The clock put right, read by a successor: it accounts from the new time at once.
    let mut b = leader(&server, "2").await;
    let right = last + Duration::hours(1);
    assert_eq!(b.observe(Some(Power::Off), right).await, Accounted::Written);
    assert_eq!(
        b.observe(Some(Power::Off), right + Duration::hours(2))
            .await,
        Accounted::Written
    );
    let mended = stored_day(&server).await;
    assert_eq!(mended.days().len(), 401);
    let day = day_of(last);
    assert_eq!(
        mended.days()[&day].off_ms,
        history.days()[&day].off_ms + 2 * 3_600_000
    );
    let kept = (history.days().iter())
        .filter(|(d, b)| **d == day || mended.days().get(d) == Some(b))
        .count();
    assert_eq!(kept, 400, "every other day of the history kept");
}
