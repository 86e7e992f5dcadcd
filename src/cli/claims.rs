//! `fleet claims [--slot S] [-o table|wide|json] [--watch]`: every claim still kept, oldest
//! first, the ended ones too.

use std::io::Write;

use crate::domain::name::BenchName;

use super::output::{Format, WIDE_JSON};
use super::output::{grid, moment};
use super::{Ctx, Error};
use crate::views::{World, claim_row};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this slot's claims (the live one and those still kept after they ended).
    #[arg(long, value_name = "SLOT")]
    pub slot: Option<BenchName>,
    /// Only the live claims and those that ended within this long (like 1m).
    #[arg(long, value_name = "DUR", value_parser = super::args::hold_for, allow_hyphen_values = true)]
    pub since: Option<std::time::Duration>,
    /// Output format: a table, a wider table with times and operations, or JSON.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = Format::offered(WIDE_JSON))]
    pub format: Format,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

#[derive(tabled::Tabled)]
struct Line {
    #[tabled(rename = "CLAIM")]
    name: String,
    #[tabled(rename = "SLOT")]
    slot: String,
    #[tabled(rename = "PHASE")]
    phase: String,
    #[tabled(rename = "REASON")]
    reason: String,
    #[tabled(rename = "ATTEMPT")]
    attempt: u32,
    #[tabled(rename = "MARKED")]
    marked: String,
}

#[derive(tabled::Tabled)]
struct WideLine {
    #[tabled(inline)]
    line: Line,
    #[tabled(rename = "GROUP")]
    group: String,
    #[tabled(rename = "SHUTDOWNS")]
    shutdowns: u32,
    #[tabled(rename = "OPERATION")]
    operation: String,
    #[tabled(rename = "REQUESTED")]
    requested: String,
    #[tabled(rename = "DEADLINE")]
    deadline: String,
    #[tabled(rename = "FINISHED")]
    finished: String,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let watch = self.watch.clone();
        watch
            .run(ctx, out, self.format.is_json(), async |out| {
                let world = World::read(ctx).await?;
                self.frame(&world, out)
            })
            .await
    }

    fn frame(&self, world: &World, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        if let Some(slot) = &self.slot
            && world.catalog.group_of(slot).is_none()
        {
            return Err(Error::usage(format!(
                "no slot {slot}: list them with `fleet slots`"
            )));
        }
        let recent = |c: &&crate::domain::claim::Claim| match (self.since, c.finished_at) {
            (Some(since), Some(ended)) => crate::domain::claim::add(ended, since) >= world.now,
            _ => true,
        };
        let mut claims: Vec<_> = world
            .claims
            .iter()
            .filter(|c| self.slot.as_ref().is_none_or(|s| &c.slot == s))
            .filter(recent)
            .collect();
        claims.sort_by_key(|c| (c.requested_at, c.name.clone()));
        let rows: Vec<_> = claims.iter().map(|c| claim_row(c, world)).collect();
        if self.format.is_json() {
            return Ok(super::output::json_rows(
                out,
                "claims",
                &rows,
                self.watch.watch,
            )?);
        }
        let now = world.now;
        let lines = claims.iter().zip(&rows).map(|(c, r)| {
            let line = Line {
                name: r.name.to_string(),
                slot: r.slot.to_string(),
                phase: r.phase.to_string(),
                reason: match (&r.reason, &r.waiting_local) {
                    (Some(reason), _) => reason.to_string(),
                    (None, Some(waiting)) => format!("waiting: {waiting}"),
                    (None, None) => "-".to_owned(),
                },
                attempt: r.attempt,
                marked: if r.marked_for_deletion { "yes" } else { "-" }.to_owned(),
            };
            (line, c)
        });
        if self.format == Format::Wide {
            grid(
                out,
                lines.zip(&rows).map(|((line, c), r)| WideLine {
                    line,
                    group: r.group.to_string(),
                    shutdowns: r.shutdown_attempts,
                    operation: r.operation.clone().unwrap_or_else(|| "-".to_owned()),
                    requested: moment(Some(c.requested_at), now),
                    deadline: moment(c.deadline_at, now),
                    finished: moment(c.finished_at, now),
                }),
            )?;
        } else {
            grid(out, lines.map(|(line, _)| line))?;
        }
        Ok(())
    }
}
