//! `fleet slots [GROUP] [-o table|json] [--watch]`: one row per slot, its phase, power (the
//! heartbeat's), its BMC's reading beside it (`-` without a BMC or a current reading, SPEC
//! §4.10) and history.

use std::io::Write;

use crate::domain::name::GroupName;

use super::output::{Format, TABLE_JSON};
use super::output::{grid, relative};
use super::{Ctx, Error};
use crate::views::{World, slot_rows};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this group's slots.
    #[arg(value_name = "GROUP")]
    pub group: Option<GroupName>,
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = Format::offered(TABLE_JSON))]
    pub format: Format,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

#[derive(tabled::Tabled)]
struct Line {
    #[tabled(rename = "SLOT")]
    name: String,
    #[tabled(rename = "GROUP")]
    group: String,
    #[tabled(rename = "PHASE")]
    phase: String,
    #[tabled(rename = "POWER")]
    power: String,
    #[tabled(rename = "BMC")]
    bmc: String,
    #[tabled(rename = "USABLE")]
    usable: String,
    #[tabled(rename = "CLAIM")]
    claim: String,
    #[tabled(rename = "ATTEMPT")]
    attempt: String,
    #[tabled(rename = "BOOTS 24H/ALL")]
    boots: String,
    #[tabled(rename = "SINCE")]
    since: String,
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
        if let Some(g) = &self.group
            && world.catalog.group(g).is_none()
        {
            return Err(Error::usage(format!(
                "no group {g}: list them with `fleet groups`"
            )));
        }
        let rows: Vec<_> = slot_rows(world)
            .into_iter()
            .filter(|r| self.group.as_ref().is_none_or(|g| r.group == g.as_str()))
            .collect();
        crate::views::notice(out, world, self.format.is_json())?;
        if self.format.is_json() {
            return Ok(super::output::json_rows(
                out,
                "slots",
                &rows,
                self.watch.watch,
            )?);
        }
        grid(
            out,
            rows.iter().map(|r| Line {
                name: r.name.clone(),
                group: r.group.clone(),
                phase: match (&r.phase, &r.held) {
                    (Some(p), Some(hold)) => format!("{p}, held ({hold})"),
                    (Some(p), None) => p.to_string(),
                    (None, _) => "-".to_owned(),
                },
                power: r.power.to_owned(),
                bmc: r.bmc.as_ref().map_or("-", |b| b.state).to_owned(),
                usable: yes_no(r.usable).to_owned(),
                claim: r.claim.clone().unwrap_or_else(|| "-".to_owned()),
                attempt: r.attempt.map_or("-".to_owned(), |a| a.to_string()),
                boots: format!("{}/{}", r.activations_24h, r.activations_total),
                since: r.since.map_or("-".to_owned(), |at| relative(at, world.now)),
            }),
        )?;
        Ok(())
    }
}

/// A usability as the tables say it: unknown while the controller is blind to the slot.
pub(super) fn yes_no(usable: Option<bool>) -> &'static str {
    match usable {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}
