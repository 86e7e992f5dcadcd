//! `fleet describe SLOT [-o table|json]`: a slot's status, history ring, last-claim digest, and
//! its live claim with the claim's timeline.

use std::io::Write;

use serde::Serialize;

use crate::domain::name::BenchName;
use crate::store::claims::Entry;

use super::output::{grid, time};
use super::views::{ClaimRow, SlotRow, World, claim_row, slot_rows};
use super::{Ctx, Error, ViewFormat};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub slot: BenchName,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ViewFormat::Table)]
    pub format: ViewFormat,
}

#[derive(Serialize)]
struct Description {
    slot: SlotRow,
    recent_transitions: Vec<crate::domain::history::Transition>,
    claim: Option<ClaimRow>,
    timeline: Vec<Entry>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let world = World::read(ctx).await?;
        let Some(row) = slot_rows(&world)
            .into_iter()
            .find(|r| r.name == self.slot.as_str())
        else {
            return Err(Error::usage(format!(
                "no slot {}: list them with `fleet slots`",
                self.slot
            )));
        };
        let (group, _, status, _) = world
            .slots
            .iter()
            .find(|(_, s, ..)| s == &self.slot)
            .cloned()
            .expect("the row came from this slot");
        let ring = status
            .map(|s| s.history.recent_transitions().cloned().collect())
            .unwrap_or_default();
        let live = world.live_claim(&self.slot).cloned();
        let timeline = match &live {
            Some(c) => world
                .store
                .timeline(&group, &c.name)
                .await
                .map_err(|e| Error::Runtime(e.into()))?,
            None => Vec::new(),
        };
        let d = Description {
            slot: row,
            recent_transitions: ring,
            claim: live.as_ref().map(claim_row),
            timeline,
        };
        if self.format == ViewFormat::Json {
            return Ok(super::output::json(out, &d)?);
        }
        let s = &d.slot;
        writeln!(out, "Slot:        {} (group {})", s.name, s.group)?;
        writeln!(
            out,
            "Phase:       {} (previously {})",
            opt(s.phase),
            opt(s.previous_phase)
        )?;
        writeln!(
            out,
            "Since:       {}",
            s.last_transition_time.clone().unwrap_or_else(|| "-".into())
        )?;
        writeln!(
            out,
            "Power:       {}, usable: {}",
            s.power,
            if s.usable { "yes" } else { "no" }
        )?;
        writeln!(
            out,
            "Boots:       {} in 24h, {} in all",
            s.activations_24h, s.activations_total
        )?;
        match &s.last_claim {
            Some(l) => writeln!(
                out,
                "Last claim:  {} {} attempt {}{} finished {}",
                l.name,
                l.phase,
                l.attempt,
                l.reason.map(|r| format!(" ({r})")).unwrap_or_default(),
                time(l.finished_at)
            )?,
            None => writeln!(out, "Last claim:  -")?,
        }
        match &d.claim {
            Some(c) => writeln!(
                out,
                "Live claim:  {} {} attempt {}",
                c.name, c.phase, c.attempt
            )?,
            None => writeln!(out, "Live claim:  -")?,
        }
        writeln!(out, "\nHistory:")?;
        let ring: Vec<Vec<String>> = d
            .recent_transitions
            .iter()
            .map(|t| vec![time(Some(t.at)), opt(t.from), t.to.to_string()])
            .collect();
        grid(out, &["AT", "FROM", "TO"], &ring)?;
        if !d.timeline.is_empty() {
            writeln!(
                out,
                "\nTimeline of {}:",
                d.claim.as_ref().map_or("", |c| c.name.as_str())
            )?;
            let rows: Vec<Vec<String>> = d
                .timeline
                .iter()
                .map(|e| {
                    vec![
                        time(Some(e.at)),
                        format!("{:?}", e.event).to_lowercase(),
                        e.phase.to_string(),
                        e.reason.map_or("-".into(), |r| r.to_string()),
                        e.duration_ms.map_or("-".into(), super::output::human_ms),
                        e.detail.clone().unwrap_or_default().replace('\n', " | "),
                    ]
                })
                .collect();
            grid(
                out,
                &["AT", "EVENT", "PHASE", "REASON", "TOOK", "DETAIL"],
                &rows,
            )?;
        }
        Ok(())
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}
