//! `fleet describe SLOT|CLAIM [-o table|json]`: one slot in full (its status, history ring,
//! boots, last-claim digest, and the timeline of its live claim, else of its last claim still
//! kept), or one claim still kept, with its slot. The timeline shows each operation's outcome
//! and the tail of its output, so why a startup or a shutdown failed is readable without Redis
//! tools (SPEC §4.7).

use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::claim::Claim;
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::store::claims::Entry;

use super::output::{Format, TABLE_JSON};
use super::output::{clock, grid, human_ms, moment, relative};
use super::{Ctx, Error};
use crate::views::rows::{Description, EntryRow, TransitionRow};
use crate::views::{SlotRow, World, claim_row, rfc3339, slot_rows};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A slot, or a claim still kept (as `fleet claims` lists them).
    #[arg(value_name = "SLOT|CLAIM")]
    pub target: String,
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = Format::offered(TABLE_JSON))]
    pub format: Format,
}

#[derive(tabled::Tabled)]
struct HistoryLine {
    #[tabled(rename = "AT")]
    at: String,
    #[tabled(rename = "FROM")]
    from: String,
    #[tabled(rename = "TO")]
    to: String,
}

#[derive(tabled::Tabled)]
struct TimelineLine {
    #[tabled(rename = "AT")]
    at: String,
    #[tabled(rename = "EVENT")]
    event: String,
    #[tabled(rename = "PHASE")]
    phase: String,
    #[tabled(rename = "REASON")]
    reason: String,
    #[tabled(rename = "TOOK")]
    took: String,
    #[tabled(rename = "DETAIL")]
    detail: String,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let world = World::read(ctx).await?;
        let (slot, claim) = resolve(&world, &self.target)?;
        let Some(row) = slot_rows(&world)
            .into_iter()
            .find(|r| r.name == slot.as_str())
        else {
            return Err(Error::usage(format!(
                "claim {} is on slot {slot}, which no group has any more",
                self.target
            )));
        };
        let (group, _, status, _) = world
            .slots
            .iter()
            .find(|(_, s, ..)| s == &slot)
            .cloned()
            .expect("the row came from this slot");
        let timeline = read_timeline(&world, claim.as_ref()).await?;
        let history = status.map(|s| s.history).unwrap_or_default();
        let d = Description {
            slot: row,
            recent_transitions: history
                .recent_transitions()
                .map(|t| TransitionRow {
                    at: rfc3339(t.at),
                    from: t.from,
                    to: t.to,
                })
                .collect(),
            activations: history.recent_activations().map(|t| rfc3339(*t)).collect(),
            claim: claim.as_ref().map(|c| claim_row(c, &world)),
            deadline: claim
                .as_ref()
                .and_then(|c| explain_deadline(c, &group, &world)),
            timeline: timeline.iter().map(EntryRow::from).collect(),
        };
        if self.format.is_json() {
            return Ok(super::output::json_doc(out, "describe", &d, false)?);
        }
        crate::views::notice(out, &world, false)?;
        let now = world.now;
        write_slot(out, &d.slot, &history, now)?;
        write_claim(out, claim.as_ref(), d.deadline.as_deref(), now)?;
        write_last_claim(out, &d.slot, claim.as_ref())?;
        write_history(out, &history, now)?;
        if !timeline.is_empty() {
            write_timeline(out, claim.as_ref(), &timeline, now)?;
        }
        Ok(())
    }
}

/// Finds what the target names: a slot first, with its live claim, else its last claim still
/// kept; else a claim still kept, with its slot.
fn resolve(world: &World, target: &str) -> Result<(BenchName, Option<Claim>), Error> {
    let slot_named = BenchName::parse(target)
        .ok()
        .filter(|s| world.slots.iter().any(|(_, name, ..)| name == s));
    if let Some(slot) = slot_named {
        let claim = world.live_claim(&slot).cloned().or_else(|| {
            world
                .claims
                .iter()
                .filter(|c| c.slot == slot)
                .max_by_key(|c| (c.requested_at, c.name.clone()))
                .cloned()
        });
        return Ok((slot, claim));
    }
    let found = ClaimName::parse(target)
        .ok()
        .and_then(|name| world.claims.iter().find(|c| c.name == name).cloned());
    match found {
        Some(c) => Ok((c.slot.clone(), Some(c))),
        None => Err(Error::usage(format!(
            "no slot {target} and no claim of that name: list them with `fleet slots` \
             and `fleet claims` (an ended claim is kept for its group's \
             ttl_after_finished)"
        ))),
    }
}

/// The claim's timeline, in one read; none without a claim.
async fn read_timeline(world: &World, claim: Option<&Claim>) -> Result<Vec<Entry>, Error> {
    match claim {
        Some(c) => world
            .store
            .timeline(&c.group, &c.name)
            .await
            .map_err(|e| Error::Runtime(e.into())),
        None => Ok(Vec::new()),
    }
}

/// The slot's own lines: name, phase, power, what it waits for and its boots.
fn write_slot(
    out: &mut dyn Write,
    s: &SlotRow,
    history: &crate::domain::history::History,
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    writeln!(out, "Slot:        {} (group {})", s.name, s.group)?;
    writeln!(
        out,
        "Phase:       {}{} (previously {}), since {}",
        opt(s.phase),
        s.held
            .as_ref()
            .map(|h| format!(", held ({h})"))
            .unwrap_or_default(),
        opt(s.previous_phase),
        moment(s.since, now)
    )?;
    writeln!(
        out,
        "Power:       {}, usable: {}",
        s.power,
        super::slots::yes_no(s.usable)
    )?;
    writeln!(out, "BMC:         {}", bmc_line(s.bmc.as_ref(), now))?;
    if let Some(waiting) = &s.waiting_local {
        writeln!(out, "Waiting for: {waiting}")?;
    }
    let last_boot = history.recent_activations().last().copied();
    writeln!(
        out,
        "Boots:       {} in 24h, {} in all{}",
        s.activations_24h,
        s.activations_total,
        last_boot
            .map(|t| format!("; the last {}", moment(Some(t), now)))
            .unwrap_or_default()
    )
}

/// The claim's lines: its phase and attempt, who made it, when it was asked, its deadline and
/// when it finished; `-` without one.
fn write_claim(
    out: &mut dyn Write,
    claim: Option<&Claim>,
    deadline: Option<&str>,
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    let Some(c) = claim else {
        return writeln!(out, "Claim:       -");
    };
    writeln!(
        out,
        "{}  {} {}, attempt {}{}{}",
        if c.phase.is_live() {
            "Live claim:"
        } else {
            "Claim:     "
        },
        c.name,
        c.phase,
        c.attempt,
        c.reason.map(|r| format!(", {r}")).unwrap_or_default(),
        c.call
            .map(|call| format!(", made by {}", call.as_str()))
            .unwrap_or_default()
    )?;
    writeln!(out, "Requested:   {}", moment(Some(c.requested_at), now))?;
    if let Some(text) = deadline {
        writeln!(out, "Deadline:    {text}")?;
    }
    if let Some(at) = c.finished_at {
        writeln!(out, "Finished:    {}", moment(Some(at), now))?;
    }
    Ok(())
}

/// The digest of the slot's last claim, when that claim is collected and so not shown above.
fn write_last_claim(
    out: &mut dyn Write,
    s: &SlotRow,
    claim: Option<&Claim>,
) -> std::io::Result<()> {
    if let Some(l) = &s.last_claim
        && claim.is_none_or(|c| c.name != l.name)
    {
        writeln!(
            out,
            "Last claim:  {} {} attempt {}{} (collected; its digest stays)",
            l.name,
            l.phase,
            l.attempt,
            l.reason.map(|r| format!(" ({r})")).unwrap_or_default(),
        )?;
    }
    Ok(())
}

/// The slot's recent transitions, as a table.
fn write_history(
    out: &mut dyn Write,
    history: &crate::domain::history::History,
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    writeln!(out, "\nHistory:")?;
    grid(
        out,
        history.recent_transitions().map(|t| HistoryLine {
            at: moment(Some(t.at), now),
            from: opt(t.from),
            to: t.to.to_string(),
        }),
    )
}

/// The claim's timeline as a table, each detail cut to its last line, then the whole output of
/// the last operation that said anything: why it failed, readable here (SPEC §4.7).
fn write_timeline(
    out: &mut dyn Write,
    claim: Option<&Claim>,
    timeline: &[Entry],
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    writeln!(
        out,
        "\nTimeline of {}:",
        claim.map_or("", |c| c.name.as_str())
    )?;
    grid(out, timeline.iter().map(TimelineLine::from))?;
    if let Some(e) = timeline
        .iter()
        .rev()
        .find(|e| e.operation.is_some() && e.detail.is_some())
    {
        writeln!(
            out,
            "\nOutput of the {} ({}):",
            e.operation.map_or("operation", |op| op.as_str()),
            relative(e.at, now)
        )?;
        // The script's words, shown as text (SPEC §7 S7).
        for line in crate::domain::text::escaped_lines(e.detail.as_deref().unwrap_or_default()) {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

impl From<&Entry> for TimelineLine {
    fn from(e: &Entry) -> Self {
        TimelineLine {
            at: clock(e.at),
            event: format!("{:?}", e.event).to_lowercase()
                + &e.operation
                    .map(|op| format!(" ({})", op.as_str()))
                    .unwrap_or_default(),
            phase: e.phase.to_string(),
            reason: e.reason.map_or("-".into(), |r| r.to_string()),
            took: e.duration_ms.map_or("-".into(), human_ms),
            detail: e
                .detail
                .as_deref()
                .and_then(|d| crate::domain::text::escaped_lines(d).last())
                .map(std::borrow::Cow::into_owned)
                .unwrap_or_default(),
        }
    }
}

/// How a claim's deadline was set (SPEC §3.5), in words: the request time plus the larger of the
/// attempt budget and the max node provision time in force when it was made. The claim keeps
/// the span it was given, not the budget: where the group's timings changed since, the span is
/// said as it was, and the budget as it is now.
fn explain_deadline(c: &Claim, group: &GroupName, world: &World) -> Option<String> {
    let deadline: DateTime<Utc> = c.deadline_at?;
    let span = (deadline - c.requested_at).to_std().ok()?;
    let budget = world
        .catalog
        .group(group)
        .map(|g| g.timings.attempt_budget());
    let provision = c.max_node_provision_time;
    let when = moment(Some(deadline), world.now);
    let d = |d: Duration| humantime::format_duration(d).to_string();
    Some(match budget {
        Some(budget) if budget.max(provision.unwrap_or_default()) == span => {
            let provision = provision
                .map(|p| format!(", max_node_provision_time {}", d(p)))
                .unwrap_or_default();
            format!(
                "{when} = requested + max(attempt budget {}{provision})",
                d(budget)
            )
        }
        Some(budget) => format!(
            "{when} = requested + {} (the attempt budget or max_node_provision_time when it was \
             made; the group's attempt budget is {} now)",
            d(span),
            d(budget)
        ),
        None => format!("{when} = requested + {}", d(span)),
    })
}

/// The BMC's reading in words: its state, how long ago it was read, and why it is unknown; `-`
/// without a BMC or a current reading (SPEC §4.10).
fn bmc_line(bmc: Option<&crate::views::BmcRow>, now: DateTime<Utc>) -> String {
    let Some(b) = bmc else {
        return "-".to_owned();
    };
    format!(
        "{}, read {}{}",
        b.state,
        relative(b.time, now),
        b.reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::claim::{OperationKind, Phase};
    use crate::domain::timeline::Event;

    // SPEC §7 S7: an operation's output is the script's words, shown as text: an escape or a bidi
    // control in it reaches the terminal as its `\u{…}` form, in the timeline and in the output.
    #[test]
    fn an_operations_output_reaches_the_terminal_as_text() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let entry = Entry {
            at: now,
            event: Event::Failed,
            phase: Phase::Failed,
            attempt: 1,
            reason: None,
            operation: Some(OperationKind::Startup),
            deadline_at: None,
            duration_ms: None,
            detail: Some("booting\n\u{1b}[2Jthe fleet is fine \u{202E}gnp".into()),
        };
        let mut out = Vec::new();
        write_timeline(&mut out, None, &[entry], now).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202E}'),
            "{text:?}"
        );
        assert!(
            text.contains("  \\u{1b}[2Jthe fleet is fine \\u{202e}gnp"),
            "{text}"
        );
        assert!(text.contains("  booting"), "{text}");
    }
}
