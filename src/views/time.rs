//! How times read for people, in a view's table or on the live page: the local clock, a span
//! relative to now, a short duration.

use chrono::{DateTime, Local, Utc};

/// An RFC 3339 time, or `-`.
pub fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or("-".to_owned(), |t| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    })
}

/// Milliseconds as a short human duration: `850ms`, `4.7s`, then whole units (`12s`, `59m59s`).
pub fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => humantime::format_duration(std::time::Duration::from_secs(ms / 1000))
            .to_string()
            .replace(' ', ""),
    }
}

/// A time for people: the local clock, `14:02:11` today, with the date otherwise.
pub fn clock(t: DateTime<Utc>) -> String {
    let local = t.with_timezone(&Local);
    if local.date_naive() == Local::now().date_naive() {
        local.format("%H:%M:%S").to_string()
    } else {
        local.format("%Y-%m-%d %H:%M").to_string()
    }
}

/// A time for a table: the local clock and how far from `now` (`14:02:11 (3m ago)`), or `-`.
pub fn moment(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map_or("-".to_owned(), |t| {
        format!("{} ({})", clock(t), relative(t, now))
    })
}

/// A time relative to `now`, for people: `3m ago`, `in 11m`, `now`.
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (t - now).num_seconds();
    let span = |s: i64| -> String {
        let s = s.unsigned_abs();
        match s {
            0..=59 => format!("{s}s"),
            60..=3599 => format!("{}m", s / 60),
            3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
            _ => format!("{}d", s / 86_400),
        }
    };
    match secs {
        0 => "now".to_owned(),
        s if s > 0 => format!("in {}", span(s)),
        s => format!("{} ago", span(s)),
    }
}
