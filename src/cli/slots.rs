//! `fleet slots [GROUP] [-o table|json]`: one row per slot, its phase, power and history.

use std::io::Write;

use crate::domain::name::GroupName;

use super::output::grid;
use super::views::{World, slot_rows};
use super::{Ctx, Error, ViewFormat};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this group's slots.
    pub group: Option<GroupName>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ViewFormat::Table)]
    pub format: ViewFormat,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let world = World::read(ctx).await?;
        if let Some(g) = &self.group
            && world.catalog.group(g).is_none()
        {
            return Err(Error::usage(format!(
                "no group {g}: list them with `fleet groups`"
            )));
        }
        let rows: Vec<_> = slot_rows(&world)
            .into_iter()
            .filter(|r| self.group.as_ref().is_none_or(|g| r.group == g.as_str()))
            .collect();
        super::views::notice(out, &world, self.format == ViewFormat::Json)?;
        if self.format == ViewFormat::Json {
            return Ok(super::output::json(out, &rows)?);
        }
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.name.clone(),
                    r.group.clone(),
                    r.phase.map_or("-".to_owned(), |p| p.to_string()),
                    r.power.to_owned(),
                    if r.usable { "yes" } else { "no" }.to_owned(),
                    r.claim.clone().unwrap_or_else(|| "-".to_owned()),
                    r.attempt.map_or("-".to_owned(), |a| a.to_string()),
                    format!("{}/{}", r.activations_24h, r.activations_total),
                    r.last_transition_time
                        .clone()
                        .unwrap_or_else(|| "-".to_owned()),
                ]
            })
            .collect();
        grid(
            out,
            &[
                "SLOT",
                "GROUP",
                "PHASE",
                "POWER",
                "USABLE",
                "CLAIM",
                "ATTEMPT",
                "BOOTS 24H/ALL",
                "SINCE",
            ],
            &cells,
        )?;
        Ok(())
    }
}
