//! `fleet claims [--slot S] [-o table|wide|json]`: every claim, oldest first.

use std::io::Write;

use crate::domain::name::BenchName;

use super::output::grid;
use super::views::{World, claim_row};
use super::{Ctx, Error};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClaimsFormat {
    Table,
    Wide,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this slot's claims.
    #[arg(long)]
    pub slot: Option<BenchName>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ClaimsFormat::Table)]
    pub format: ClaimsFormat,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let world = World::read(ctx).await?;
        let mut claims: Vec<_> = world
            .claims
            .iter()
            .filter(|c| self.slot.as_ref().is_none_or(|s| &c.slot == s))
            .collect();
        claims.sort_by_key(|c| (c.requested_at, c.name.clone()));
        let rows: Vec<_> = claims.iter().map(|c| claim_row(c)).collect();
        if self.format == ClaimsFormat::Json {
            return Ok(super::output::json(out, &rows)?);
        }
        let wide = self.format == ClaimsFormat::Wide;
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let mut row = vec![
                    r.name.to_string(),
                    r.slot.to_string(),
                    r.phase.to_string(),
                    r.reason.map_or("-".to_owned(), |x| x.to_string()),
                    r.attempt.to_string(),
                    if r.marked_for_deletion { "yes" } else { "-" }.to_owned(),
                ];
                if wide {
                    row.extend([
                        r.group.to_string(),
                        r.shutdown_attempts.to_string(),
                        r.operation.clone().unwrap_or_else(|| "-".to_owned()),
                        r.requested_at.clone(),
                        r.deadline_at.clone().unwrap_or_else(|| "-".to_owned()),
                        r.finished_at.clone().unwrap_or_else(|| "-".to_owned()),
                    ]);
                }
                row
            })
            .collect();
        let mut header = vec!["CLAIM", "SLOT", "PHASE", "REASON", "ATTEMPT", "MARKED"];
        if wide {
            header.extend([
                "GROUP",
                "SHUTDOWNS",
                "OPERATION",
                "REQUESTED",
                "DEADLINE",
                "FINISHED",
            ]);
        }
        grid(out, &header, &cells)?;
        Ok(())
    }
}
