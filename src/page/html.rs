//! The live page's HTML (SPEC §4.13), rendered on the server: the first render is whole, and
//! the stream sends the parts that change (`view::Main::delta`), so the page reads the same
//! with or without JavaScript. The first screen is the summary: the controller, the slots
//! counted by phase, power and bench (each count a link to those slots), each group's counts
//! and health, the claims in flight and the last failures. The slot table below it holds one
//! page of the view's slots. Tables have captions and column headers; every colour has its text
//! beside it; every control has a name a screen reader says.

use std::fmt::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::state::State;

use super::frame::{BENCHES, ClaimView, Failure, Frame, Line, PHASES, POWERS, phase_word};
pub use super::view::esc;
use super::view::{Main, PAGE, Part, Query, Rows, bench_word, pager};

/// What the page's shell needs beside the fragment.
pub struct Shell<'a> {
    pub css: &'a str,
    pub js: &'a str,
    /// The CSRF token actions must echo, when actions are on.
    pub csrf: Option<&'a str>,
}

/// The whole page around `fragment` (the `<main>` content) read at `at`.
pub fn page(shell: &Shell<'_>, fragment: &str, at: &str) -> String {
    let actions = match shell.csrf {
        Some(csrf) => format!("<meta name=\"fleet-csrf\" content=\"{}\">", esc(csrf)),
        None => String::new(),
    };
    let panel = if shell.csrf.is_some() {
        "<form id=\"actions\" class=\"actions\" onsubmit=\"return false\">\
         <label for=\"token\">Action token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\">\
         <label for=\"reason\">Reason for holds</label>\
         <input id=\"reason\" name=\"reason\" type=\"text\" value=\"held from the page\">\
         <p id=\"action-result\" role=\"status\" aria-live=\"polite\"></p></form>"
    } else {
        "<p class=\"note\">Read-only: <code>fleet serve --ui-token-file</code> turns actions on.</p>"
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">{actions}\
         <title>fleet</title><link rel=\"stylesheet\" href=\"{css}\">\
         <script src=\"{js}\" defer></script></head><body>\
         <header><h1>fleet</h1><p id=\"live\" role=\"status\" aria-live=\"polite\">\
         Not live: the page updates itself when JavaScript runs.</p>\
         <p id=\"asof\" class=\"asof\">As of <time>{at}</time> (the store's clock).</p>{panel}\
         </header>\
         <main id=\"frame\">{fragment}</main></body></html>",
        css = esc(shell.css),
        js = esc(shell.js),
        at = esc(at),
    )
}

/// The slot table's filter: a plain GET form, so it works without JavaScript and its address
/// is a link that keeps the view. Its part changes only with the view or the groups, so an
/// update does not touch what is being typed into it.
fn filter(q: &Query, groups: &[&str]) -> String {
    let mut out = String::from(
        "<h2 id=\"s-filter-h\">Find slots</h2><form id=\"filter\" class=\"filter\" \
         method=\"get\" action=\"./#s-slots\" aria-labelledby=\"s-filter-h\">",
    );
    let select =
        |out: &mut String, name: &str, label: &str, words: &[&str], chosen: Option<&str>| {
            let _ = write!(
                out,
                "<label for=\"f-{name}\">{label}</label><select id=\"f-{name}\" name=\"{name}\">\
             <option value=\"\">any</option>"
            );
            for w in words {
                let on = if chosen == Some(*w) { " selected" } else { "" };
                let _ = write!(out, "<option{on}>{}</option>", esc(w));
            }
            out.push_str("</select>");
        };
    select(
        &mut out,
        "group",
        "Group",
        groups,
        q.group.as_ref().map(|g| g.as_str()),
    );
    select(&mut out, "phase", "Phase", &PHASES, q.phase);
    select(&mut out, "power", "Power", &POWERS, q.power);
    select(
        &mut out,
        "bench",
        "Bench",
        &BENCHES.map(bench_word),
        q.bench.map(bench_word),
    );
    let _ = write!(
        out,
        "<label for=\"f-prefix\">Name starts with</label><input id=\"f-prefix\" name=\"prefix\" \
         type=\"search\" maxlength=\"253\" value=\"{}\"><button type=\"submit\" \
         aria-label=\"Show the slots that match\">Show</button>",
        esc(q.prefix.as_deref().unwrap_or(""))
    );
    if q.filters() {
        out.push_str("<a href=\"./#s-slots\">Every slot</a>");
    }
    out.push_str("</form>");
    out
}

/// The view `query` of a read (or the reason there is none yet), part by part.
pub fn main(frame: Option<&Frame>, error: Option<&str>, query: &Query, actions: bool) -> Main {
    let mut parts = Vec::new();
    if let Some(why) = error {
        parts.push(Part::plain(
            "s-banner",
            format!(
                "<p class=\"banner bad\" role=\"alert\"><strong>Cannot read the store:</strong> \
                 {}{}</p>",
                esc(why),
                if frame.is_some() {
                    " (showing the last read)"
                } else {
                    ""
                }
            ),
        ));
    }
    let stale = error.is_some();
    let Some(frame) = frame else {
        if error.is_none() {
            parts.push(Part::plain(
                "s-reading",
                "<p>Reading the store…</p>".to_owned(),
            ));
        }
        return Main { parts, stale };
    };
    parts.push(Part::plain("s-controller", controller(frame)));
    parts.push(Part::plain("s-summary", summary(frame, query)));
    parts.push(groups(frame, query));
    parts.push(in_flight(frame, actions));
    parts.push(Part::plain("s-failures", failures(&frame.failures)));
    let mut problems = String::new();
    if !frame.problems.is_empty() {
        problems.push_str("<h2 id=\"s-problems-h\">Problems</h2><ul>");
        for p in &frame.problems {
            let _ = write!(problems, "<li>{}</li>", esc(p));
        }
        problems.push_str("</ul>");
    }
    parts.push(Part::plain("s-problems", problems));
    let names: Vec<&str> = frame.groups.iter().map(|g| g.row.name.as_str()).collect();
    parts.push(Part::plain("s-filter", filter(query, &names)));
    parts.push(slots(frame, query, actions));
    Main { parts, stale }
}

fn controller(frame: &Frame) -> String {
    let mut out = String::from("<h2 id=\"s-controller-h\">Controller</h2>");
    match &frame.controller {
        None => out.push_str(
            "<p><span class=\"badge warn\">no leader</span> No <code>fleet serve</code> leads \
             under this prefix: nothing is powered on or off.</p>",
        ),
        Some(c) => {
            let _ = write!(out, "<p>Leader <strong>{}</strong>. ", esc(&c.holder));
            match &c.blind {
                None => out.push_str("<span class=\"badge ok\">sees</span> every machine.</p>"),
                Some(b) => {
                    let until = b.until.map_or_else(
                        || "until sight returns, then a grace".to_owned(),
                        |u| format!("until {}", clock(u)),
                    );
                    let _ = write!(
                        out,
                        "<span class=\"badge bad\">blind</span> {} ({until}): it powers nothing \
                         off meanwhile.</p>",
                        esc(&b.why)
                    );
                }
            }
        }
    }
    out
}

/// The slots counted by phase, power and bench, each count a link to those slots (keeping the
/// view's other filters).
fn summary(frame: &Frame, q: &Query) -> String {
    let c = &frame.counts;
    let mut out = format!(
        "<h2 id=\"s-summary-h\">Slots</h2><p class=\"total\"><strong>{}</strong> slots in {} \
         {}; {} in flight, {} whose last claim failed.</p><dl class=\"counts\">",
        c.slots,
        frame.groups.len(),
        if frame.groups.len() == 1 {
            "group"
        } else {
            "groups"
        },
        frame.in_flight_total,
        c.failed
    );
    let row = |out: &mut String,
               title: &str,
               class: &str,
               words: &[&str],
               counts: &[usize],
               to: &dyn Fn(&str) -> Query| {
        let _ = write!(out, "<div><dt>{title}</dt><dd><ul>");
        for (w, n) in words.iter().zip(counts) {
            let lower = w.to_lowercase();
            let _ = write!(
                out,
                "<li><a href=\"{href}#s-slots\"><span class=\"badge {class}-{lower}\">{w}</span> \
                 {n}</a></li>",
                href = esc(&to(w).to_query(1)),
            );
        }
        out.push_str("</ul></dd></div>");
    };
    row(&mut out, "Phase", "phase", &PHASES, &c.phase, &|w| Query {
        phase: PHASES.iter().copied().find(|p| *p == w),
        page: 1,
        ..q.clone()
    });
    row(&mut out, "Power", "power", &POWERS, &c.power, &|w| Query {
        power: POWERS.iter().copied().find(|p| *p == w),
        page: 1,
        ..q.clone()
    });
    row(
        &mut out,
        "Bench",
        "bench",
        &BENCHES.map(bench_word),
        &c.bench,
        &|w| Query {
            bench: BENCHES.iter().copied().find(|b| bench_word(*b) == w),
            page: 1,
            ..q.clone()
        },
    );
    out.push_str("</dl>");
    out
}

fn groups(frame: &Frame, q: &Query) -> Part {
    let head = "<h2 id=\"s-groups-h\">Groups</h2><div class=\"scroll\">\
         <table id=\"groups\"><caption>Each group's size bounds, target, slots and health\
         </caption><thead><tr><th scope=\"col\">Group</th><th scope=\"col\">Min</th>\
         <th scope=\"col\">Target</th><th scope=\"col\">Max</th><th scope=\"col\">On</th>\
         <th scope=\"col\">Off</th><th scope=\"col\">In flight</th><th scope=\"col\">Failed</th>\
         <th scope=\"col\">Health</th><th scope=\"col\">Energy</th></tr></thead><tbody>"
        .to_owned();
    let keyed = frame
        .groups
        .iter()
        .map(|g| {
            let health = format!("{:?}", g.row.status.health).to_lowercase();
            let class = match health.as_str() {
                "healthy" => "ok",
                "degraded" => "warn",
                _ => "bad",
            };
            let energy = frame.energy.get(&g.row.name).map_or_else(
                || "—".to_owned(),
                |e| {
                    let num = |v: Option<f64>, unit: &str| {
                        v.map_or_else(String::new, |v| format!("{v:.1} {unit}"))
                    };
                    format!(
                        "{:.0} h on since {}; {} drawn, {} saved{}",
                        e.hours_on,
                        esc(&e.since),
                        num(e.kwh, "kWh"),
                        num(e.kwh_saved, "kWh"),
                        e.cost_saved
                            .map_or_else(String::new, |c| format!(" ({c:.2} saved)"))
                    )
                },
            );
            let name = esc(&g.row.name);
            let href = esc(&Query {
                group: crate::domain::name::GroupName::parse(&g.row.name).ok(),
                page: 1,
                ..q.clone()
            }
            .to_query(1));
            let html = format!(
                "<tr data-group=\"{name}\"><th scope=\"row\"><a href=\"{href}#s-slots\">{name}</a>\
                 </th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td><span class=\"badge {class}\">{health}</span></td><td>{energy}</td></tr>",
                g.row.min_size,
                g.row.target,
                g.row.max_size,
                g.row.status.on,
                g.row.status.off,
                g.in_flight,
                g.failed,
            );
            (g.row.name.clone(), html)
        })
        .collect();
    Part {
        id: "s-groups",
        head,
        rows: Some(Rows { by: "group", keyed }),
        foot: "</tbody></table></div>".to_owned(),
    }
}

/// An action's button: its visible label, and a name that says what it acts on.
fn button(action: &str, target: &str, label: &str, what: &str) -> String {
    format!(
        "<button type=\"button\" data-action=\"{action}\" data-target=\"{target}\" \
         aria-label=\"{label} {what}\">{label}</button>"
    )
}

// Long: the table's head, its caption's words and its pager, column by column.
fn slots(frame: &Frame, q: &Query, actions: bool) -> Part {
    let seen = q.select(frame);
    let first = (seen.page - 1) * PAGE + 1;
    let shown = if seen.matching == 0 {
        "No slot matches".to_owned()
    } else {
        format!(
            "Slots {first}–{} of {}{}",
            first + seen.rows.len() - 1,
            seen.matching,
            if q.filters() { " matching" } else { "" }
        )
    };
    let mut head = format!(
        "<h2 id=\"s-slots-h\">Slots</h2><div class=\"scroll\"><table id=\"slots\"><caption>\
         {shown}: each one's phase, power and bench</caption><thead><tr>\
         <th scope=\"col\">Slot</th><th scope=\"col\">Group</th><th scope=\"col\">Phase</th>\
         <th scope=\"col\">Power</th><th scope=\"col\">BMC</th><th scope=\"col\">Bench</th>\
         <th scope=\"col\">Hold</th><th scope=\"col\">Claim</th>"
    );
    if actions {
        head.push_str("<th scope=\"col\">Actions</th>");
    }
    head.push_str("</tr></thead><tbody>");
    let keyed = seen
        .rows
        .iter()
        .map(|l| (l.name.to_string(), slot_row(frame, l, actions)))
        .collect();
    let foot = format!("</tbody></table></div>{}", pager(q, seen.page, seen.pages));
    Part {
        id: "s-slots",
        head,
        rows: Some(Rows { by: "slot", keyed }),
        foot,
    }
}

fn slot_row(frame: &Frame, l: &Line, actions: bool) -> String {
    let phase = phase_word(l.phase);
    let bench = bench_word(l.bench);
    let name = esc(l.name.as_str());
    let group = frame
        .groups
        .get(l.group as usize)
        .map_or_else(String::new, |g| esc(&g.row.name));
    let dash = |v: &Option<Box<str>>| v.as_deref().map_or_else(|| "—".to_owned(), esc);
    let mut out = format!(
        "<tr data-slot=\"{name}\"><th scope=\"row\">{name}</th><td>{group}</td>\
         <td class=\"phase\"><span class=\"badge phase-{phase}\">{phase}</span></td>\
         <td class=\"power\"><span class=\"badge power-{power}\">{power}</span></td>\
         <td>{bmc}</td><td class=\"bench\"><span class=\"badge bench-{lower}\">{bench}</span></td>\
         <td>{hold}</td><td>{claim}</td>",
        power = l.power,
        bmc = dash(&l.bmc),
        lower = bench.to_lowercase(),
        hold = dash(&l.hold),
        claim = dash(&l.claim),
    );
    if actions {
        out.push_str("<td>");
        match &l.claim {
            None => out.push_str(&button("claim", &name, "Claim", &name)),
            Some(c) => {
                let c = esc(c);
                out.push_str(&button("cancel", &c, "Cancel", &c));
            }
        }
        let (action, label) = match l.bench {
            State::Held => ("release", "Release"),
            _ => ("hold", "Hold"),
        };
        out.push_str(&button(action, &name, label, &name));
        out.push_str("</td>");
    }
    out.push_str("</tr>");
    out
}

/// The claims in flight (live and not ready, or marked for deletion), oldest first.
fn in_flight(frame: &Frame, actions: bool) -> Part {
    let mut head = String::from("<h2 id=\"s-flight-h\">In flight</h2>");
    if frame.in_flight.is_empty() {
        head.push_str("<p>No claim is in flight.</p>");
        return Part::plain("s-flight", head);
    }
    let more = frame.in_flight_total - frame.in_flight.len();
    let _ = write!(
        head,
        "<div class=\"scroll\"><table id=\"claims\"><caption>{}: each against its deadline\
         </caption><thead><tr><th scope=\"col\">Claim</th><th scope=\"col\">Slot</th>\
         <th scope=\"col\">Phase</th><th scope=\"col\">Elapsed</th><th scope=\"col\">Attempt</th>\
         <th scope=\"col\">Operation</th><th scope=\"col\">Waiting</th>",
        if more == 0 {
            format!("{} claims in flight", frame.in_flight.len())
        } else {
            format!(
                "The oldest {} of {} claims in flight (<code>fleet claims</code> lists them all)",
                frame.in_flight.len(),
                frame.in_flight_total
            )
        }
    );
    if actions {
        head.push_str("<th scope=\"col\">Actions</th>");
    }
    head.push_str("</tr></thead><tbody>");
    let keyed = frame
        .in_flight
        .iter()
        .map(|c| (c.row.name.to_string(), claim_row(c, actions)))
        .collect();
    Part {
        id: "s-flight",
        head,
        rows: Some(Rows { by: "claim", keyed }),
        foot: "</tbody></table></div>".to_owned(),
    }
}

fn claim_row(c: &ClaimView, actions: bool) -> String {
    let mut out = String::new();
    let phase = c.row.phase.to_string().to_lowercase();
    // Absolute times, so a frame changes only when the claim does; the page's script shows the
    // time elapsed against the deadline from them, every second.
    let elapsed = match c.deadline {
        None => format!(
            "<td data-since=\"{}\">made {}</td>",
            c.made.to_rfc3339(),
            clock(c.made)
        ),
        Some(d) => format!(
            "<td data-since=\"{}\" data-deadline=\"{}\">made {}, deadline {}{}</td>",
            c.made.to_rfc3339(),
            d.to_rfc3339(),
            clock(c.made),
            clock(d),
            if c.past { " (past it)" } else { "" }
        ),
    };
    let _ = write!(
        out,
        "<tr data-claim=\"{name}\"><th scope=\"row\">{name}</th><td>{slot}</td>\
         <td class=\"phase\"><span class=\"badge phase-{phase}\">{phase}</span></td>{elapsed}\
         <td>{attempt}</td><td>{op}</td><td>{waiting}</td>",
        name = esc(c.row.name.as_str()),
        slot = esc(c.row.slot.as_str()),
        attempt = c.row.attempt,
        op = c
            .row
            .operation
            .as_deref()
            .map_or_else(|| "—".to_owned(), esc),
        waiting = c.row.waiting.as_deref().map_or_else(|| "—".to_owned(), esc),
    );
    if actions {
        let name = esc(c.row.name.as_str());
        let _ = write!(out, "<td>{}</td>", button("cancel", &name, "Cancel", &name));
    }
    out.push_str("</tr>");
    out
}

fn failures(failures: &[Failure]) -> String {
    let mut out = String::from("<h2 id=\"s-failures-h\">Last failures</h2>");
    if failures.is_empty() {
        out.push_str("<p>No slot's last claim failed.</p>");
        return out;
    }
    for f in failures {
        let _ = write!(
            out,
            "<details><summary><span class=\"badge phase-failed\">failed</span> {slot} \
             ({group}): {reason}{at}, claim {claim}</summary>",
            slot = esc(f.slot.as_str()),
            group = esc(&f.group),
            reason = esc(&f.reason),
            at =
                f.at.map_or_else(String::new, |t| format!(" at {}", clock(t))),
            claim = esc(&f.claim),
        );
        if f.tail.is_empty() {
            out.push_str("<p>No output was kept.</p>");
        } else {
            let _ = write!(out, "<pre>{}</pre>", esc(&f.tail.join("\n")));
        }
        out.push_str("</details>");
    }
    out
}

/// A time of day on the store's clock, in UTC.
pub fn clock(t: DateTime<Utc>) -> String {
    t.format("%H:%M:%S UTC").to_string()
}

/// A duration as people read it: `45s`, `3m 20s`, `2h 5m`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_content_and_attributes() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn spans_read_as_people_read_them() {
        assert_eq!(span(Duration::from_secs(45)), "45s");
        assert_eq!(span(Duration::from_secs(200)), "3m 20s");
        assert_eq!(span(Duration::from_secs(7500)), "2h 5m");
    }
}
