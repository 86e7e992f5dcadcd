//! `fleet state [NAME...] [-o table|json|tsv] [--watch]`: one row per bench, sorted by name.

use std::io::Write;
use std::time::Duration;

use crate::domain::name::BenchName;
use crate::domain::state::Row;

use super::output::{self, Format};
use super::{Ctx, Error, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benches to show (default: every registered bench). A named bench that never beat is a
    /// DOWN row.
    pub names: Vec<BenchName>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Redraw every interval until interrupted.
    #[arg(short, long)]
    pub watch: bool,
    /// How often `--watch` redraws.
    #[arg(long, default_value = "1s", value_parser = args::watch_interval)]
    pub interval: Duration,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        loop {
            let snapshot = presence.read(&self.names).await?;
            for member in &snapshot.foreign {
                tracing::warn!(
                    member,
                    "registry member is not a bench name; remove it with SREM"
                );
            }
            let rows: Vec<Row> = snapshot
                .benches
                .iter()
                .map(|b| b.row(snapshot.now))
                .collect();
            if self.watch && ctx.tty && self.format == Format::Table {
                // Redraw in place: home the cursor and clear the screen.
                write!(out, "\x1b[H\x1b[2J")?;
            }
            output::rows(out, self.format, &rows, self.watch)?;
            if self.watch && self.format != Format::Json {
                writeln!(out)?;
            }
            out.flush()?;
            if !self.watch {
                return Ok(());
            }
            tokio::select! {
                _ = ctx.shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}
