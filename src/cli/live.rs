//! `fleet live [NAME...] [--up] [-o names|json] [--watch]`: the benches whose key still counts
//! (UP or HELD; UP alone with `--up`), sorted: one name a line, or JSON rows that say each one's
//! state and hold.

use std::io::Write;

use crate::domain::name::BenchName;
use crate::domain::state;
use crate::store::presence::Presence;
use fleet_redis::conn::Conn;

use super::output::Format;
use super::{Ctx, Error};
use crate::views::rows::LiveRow;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benches to ask about (default: every registered bench).
    #[arg(value_name = "NAME")]
    pub names: Vec<BenchName>,
    /// Only the benches that are UP: those that may take work. Without it, HELD benches are
    /// listed too (they are there, and say they take no work).
    #[arg(long)]
    pub up: bool,
    /// Output: one name a line, or JSON rows (`fleet schema live`).
    #[arg(short = 'o', long = "output", default_value = "names",
          value_parser = Format::offered(&[Format::Names, Format::Json]))]
    pub format: Format,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let mut presence: Option<Presence<Conn>> = None;
        let watch = self.watch.clone();
        let json = self.format == Format::Json;
        watch
            .run(ctx, out, json, async |out| {
                let p = match presence.take() {
                    Some(p) => p,
                    None => ctx.presence().await?,
                };
                let snapshot = p.read(&self.names).await?;
                presence = Some(p);
                // What the read left out (a foreign hold-request key, a legacy join set past its
                // bound, SPEC §2.5), said where a person looks, never among the names a script
                // reads.
                for problem in &snapshot.problems {
                    eprintln!("warning: {problem}");
                }
                // The snapshot is sorted by name, and `there` keeps the order given: present
                // (UP or HELD), or with `--up` the narrower question of who may take work.
                let rows: Vec<LiveRow<'_>> = state::there(&snapshot.benches, snapshot.now, self.up)
                    .map(|(b, verdict)| LiveRow {
                        name: &b.name,
                        state: verdict.state,
                        hold: verdict.hold.as_ref().map(|r| r.as_str().to_owned()),
                    })
                    .collect();
                if json {
                    return Ok(super::output::json_rows(
                        out,
                        "live",
                        &rows,
                        self.watch.watch,
                    )?);
                }
                for row in &rows {
                    writeln!(out, "{}", row.name)?;
                }
                Ok(())
            })
            .await
    }
}
