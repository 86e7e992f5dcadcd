//! The live page's HTML (SPEC §4.13), rendered on the server: the first render is whole, and
//! the stream sends the same `<main>` fragment again for every new read, so the page reads the
//! same with or without JavaScript. Tables have captions and column headers; every colour has
//! its text beside it; every control has a name a screen reader says.

use std::fmt::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::state::State;

use super::frame::{ClaimView, Failure, Frame, SlotView};

/// Escapes text for an element's content or a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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

/// The `<main>` content for a read (or the reason there is none yet).
pub fn fragment(frame: Option<&Frame>, error: Option<&str>, actions: bool) -> String {
    let mut out = String::new();
    if let Some(why) = error {
        let _ = write!(
            out,
            "<p class=\"banner bad\" role=\"alert\"><strong>Cannot read the store:</strong> {}{}</p>",
            esc(why),
            if frame.is_some() {
                " (showing the last read)"
            } else {
                ""
            }
        );
    }
    let Some(frame) = frame else {
        if error.is_none() {
            out.push_str("<p>Reading the store…</p>");
        }
        return out;
    };
    controller(&mut out, frame);
    groups(&mut out, frame);
    tiles(&mut out, frame);
    slots(&mut out, frame, actions);
    claims(&mut out, frame, actions);
    failures(&mut out, &frame.failures);
    if !frame.problems.is_empty() {
        out.push_str("<section><h2>Problems</h2><ul>");
        for p in &frame.problems {
            let _ = write!(out, "<li>{}</li>", esc(p));
        }
        out.push_str("</ul></section>");
    }
    out
}

fn controller(out: &mut String, frame: &Frame) {
    out.push_str(
        "<section aria-labelledby=\"h-controller\"><h2 id=\"h-controller\">Controller</h2>",
    );
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
    out.push_str("</section>");
}

fn groups(out: &mut String, frame: &Frame) {
    out.push_str(
        "<section aria-labelledby=\"h-groups\"><h2 id=\"h-groups\">Groups</h2><div class=\"scroll\">\
         <table><caption>Each group's size bounds, target and health</caption><thead><tr>\
         <th scope=\"col\">Group</th><th scope=\"col\">Min</th><th scope=\"col\">Target</th>\
         <th scope=\"col\">Max</th><th scope=\"col\">On</th><th scope=\"col\">Off</th>\
         <th scope=\"col\">Health</th><th scope=\"col\">Energy</th></tr></thead><tbody>",
    );
    for g in &frame.groups {
        let health = format!("{:?}", g.status.health).to_lowercase();
        let class = match health.as_str() {
            "healthy" => "ok",
            "degraded" => "warn",
            _ => "bad",
        };
        let energy = frame.energy.get(&g.name).map_or_else(
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
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td><span class=\"badge {class}\">{health}</span></td><td>{energy}</td></tr>",
            esc(&g.name),
            g.min_size,
            g.target,
            g.max_size,
            g.status.on,
            g.status.off,
        );
    }
    out.push_str("</tbody></table></div></section>");
}

/// The phase a slot shows: its report's, or `idle` without one.
fn phase_of(s: &SlotView) -> String {
    s.row
        .phase
        .map_or_else(|| "idle".to_owned(), |p| p.to_string().to_lowercase())
}

/// The slots at a glance: one tile each, coloured by phase, with the phase, the power and the
/// bench's state written on it.
fn tiles(out: &mut String, frame: &Frame) {
    out.push_str(
        "<section aria-labelledby=\"h-tiles\"><h2 id=\"h-tiles\">At a glance</h2><ul class=\"tiles\">",
    );
    for s in &frame.slots {
        let phase = phase_of(s);
        let _ = write!(
            out,
            "<li class=\"tile phase-{phase} power-{power}\" data-slot=\"{name}\">\
             <strong>{name}</strong><span>{phase}</span><span>power {power}</span>\
             <span>{bench}</span></li>",
            name = esc(&s.row.name),
            power = s.row.power,
            bench = bench_word(s.bench),
        );
    }
    out.push_str("</ul></section>");
}

fn bench_word(state: State) -> &'static str {
    match state {
        State::Up => "UP",
        State::Held => "HELD",
        State::Down => "DOWN",
    }
}

// Long: one table row, column by column, each cell with its text.
fn slots(out: &mut String, frame: &Frame, actions: bool) {
    out.push_str(
        "<section aria-labelledby=\"h-slots\"><h2 id=\"h-slots\">Slots</h2><div class=\"scroll\">\
         <table id=\"slots\"><caption>Every slot: its phase, power and bench</caption><thead><tr>\
         <th scope=\"col\">Slot</th><th scope=\"col\">Group</th><th scope=\"col\">Phase</th>\
         <th scope=\"col\">Power</th><th scope=\"col\">BMC</th><th scope=\"col\">Bench</th>\
         <th scope=\"col\">Hold</th><th scope=\"col\">Claim</th>",
    );
    if actions {
        out.push_str("<th scope=\"col\">Actions</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for s in &frame.slots {
        let phase = phase_of(s);
        let bmc = s.row.bmc.as_ref().map_or_else(
            || "—".to_owned(),
            |b| match &b.reason {
                Some(why) => format!("{} ({})", b.state, esc(why)),
                None => b.state.to_owned(),
            },
        );
        let bench = bench_word(s.bench);
        let _ = write!(
            out,
            "<tr data-slot=\"{name}\"><th scope=\"row\">{name}</th><td>{group}</td>\
             <td class=\"phase\"><span class=\"badge phase-{phase}\">{phase}</span></td>\
             <td class=\"power\"><span class=\"badge power-{power}\">{power}</span></td>\
             <td>{bmc}</td><td class=\"bench\"><span class=\"badge bench-{lower}\">{bench}</span></td>\
             <td>{hold}</td><td>{claim}</td>",
            name = esc(&s.row.name),
            group = esc(&s.row.group),
            power = s.row.power,
            lower = bench.to_lowercase(),
            hold = s.hold.as_deref().map_or_else(|| "—".to_owned(), esc),
            claim = s.row.claim.as_deref().map_or_else(|| "—".to_owned(), esc),
        );
        if actions {
            let name = esc(&s.row.name);
            out.push_str("<td>");
            if s.row.claim.is_none() {
                let _ = write!(out, "{}", button("claim", &name, "Claim", &name));
            }
            let (action, label) = match s.bench {
                State::Held => ("release", "Release"),
                _ => ("hold", "Hold"),
            };
            let _ = write!(out, "{}", button(action, &name, label, &name));
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></section>");
}

/// An action's button: its visible label, and a name that says what it acts on.
fn button(action: &str, target: &str, label: &str, what: &str) -> String {
    format!(
        "<button type=\"button\" data-action=\"{action}\" data-target=\"{target}\" \
         aria-label=\"{label} {what}\">{label}</button>"
    )
}

fn claims(out: &mut String, frame: &Frame, actions: bool) {
    out.push_str("<section aria-labelledby=\"h-claims\"><h2 id=\"h-claims\">Live claims</h2>");
    if frame.claims.is_empty() {
        out.push_str("<p>No live claim.</p></section>");
        return;
    }
    out.push_str(
        "<div class=\"scroll\"><table id=\"claims\"><caption>Each live claim against its deadline\
         </caption><thead><tr><th scope=\"col\">Claim</th><th scope=\"col\">Slot</th>\
         <th scope=\"col\">Phase</th><th scope=\"col\">Elapsed</th><th scope=\"col\">Attempt</th>\
         <th scope=\"col\">Operation</th><th scope=\"col\">Waiting</th>",
    );
    if actions {
        out.push_str("<th scope=\"col\">Actions</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for c in &frame.claims {
        claim_row(out, c, actions);
    }
    out.push_str("</tbody></table></div></section>");
}

fn claim_row(out: &mut String, c: &ClaimView, actions: bool) {
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
}

fn failures(out: &mut String, failures: &[Failure]) {
    out.push_str(
        "<section aria-labelledby=\"h-failures\"><h2 id=\"h-failures\">Last failures</h2>",
    );
    if failures.is_empty() {
        out.push_str("<p>No slot's last claim failed.</p></section>");
        return;
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
    out.push_str("</section>");
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
