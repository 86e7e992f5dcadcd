//! `fleet groups [-o table|wide|json] [--watch]`: every group with its size bounds, target and
//! health.

use std::io::Write;

use super::output::{Format, WIDE_JSON};
use super::output::{clock, grid, relative};
use super::{Ctx, Error};
use crate::views::{World, group_rows};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format: a table, a wider table with the last scaling call, or JSON.
    #[arg(short = 'o', long = "output", default_value = "table", value_parser = Format::offered(WIDE_JSON))]
    pub format: Format,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

#[derive(tabled::Tabled)]
struct Line {
    #[tabled(rename = "GROUP")]
    name: String,
    #[tabled(rename = "SIZE")]
    size: String,
    #[tabled(rename = "TARGET")]
    target: u32,
    #[tabled(rename = "SLOTS")]
    slots: u32,
    #[tabled(rename = "ON")]
    on: u32,
    #[tabled(rename = "OFF")]
    off: u32,
    #[tabled(rename = "HEALTH")]
    health: String,
}

#[derive(tabled::Tabled)]
struct WideLine {
    #[tabled(inline)]
    line: Line,
    #[tabled(rename = "LAST SCALE")]
    last_scale: String,
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
        let rows = group_rows(world);
        crate::views::notice(out, world, self.format.is_json())?;
        if self.format.is_json() {
            return Ok(super::output::json_rows(
                out,
                "groups",
                &rows,
                self.watch.watch,
            )?);
        }
        let lines = rows.iter().map(|r| Line {
            name: r.name.clone(),
            size: format!("{}..{}", r.min_size, r.max_size),
            target: r.target,
            slots: r.status.slots,
            on: r.status.on,
            off: r.status.off,
            health: format!("{:?}", r.status.health).to_lowercase(),
        });
        if self.format == Format::Wide {
            let wide = lines.zip(&rows).map(|(line, r)| WideLine {
                line,
                last_scale: match (r.status.last_scale_at, r.status.last_scale_action) {
                    (Some(at), Some((action, n))) => format!(
                        "{} {n}, {} ({})",
                        format!("{action:?}").to_lowercase(),
                        clock(at),
                        relative(at, world.now)
                    ),
                    _ => "-".to_owned(),
                },
            });
            grid(out, wide)?;
        } else {
            grid(out, lines)?;
        }
        Ok(())
    }
}
