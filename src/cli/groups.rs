//! `fleet groups [-o table|json]`: every group with its size bounds, target and health.

use std::io::Write;

use super::output::grid;
use super::views::{World, group_rows};
use super::{Ctx, Error, ViewFormat};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ViewFormat::Table)]
    pub format: ViewFormat,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let world = World::read(ctx).await?;
        let rows = group_rows(&world);
        super::views::notice(out, &world, self.format == ViewFormat::Json)?;
        if self.format == ViewFormat::Json {
            return Ok(super::output::json(out, &rows)?);
        }
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.name.clone(),
                    format!("{}..{}", r.min_size, r.max_size),
                    r.target.to_string(),
                    r.status.slots.to_string(),
                    r.status.on.to_string(),
                    r.status.off.to_string(),
                    format!("{:?}", r.status.health).to_lowercase(),
                ]
            })
            .collect();
        grid(
            out,
            &["GROUP", "SIZE", "TARGET", "SLOTS", "ON", "OFF", "HEALTH"],
            &cells,
        )?;
        Ok(())
    }
}
