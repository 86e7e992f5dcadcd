//! `fleet state [NAME...] [-o table|json|tsv] [--watch]`: one row per bench, sorted by name.

use std::collections::HashMap;
use std::io::Write;

use crate::domain::name::BenchName;
use crate::domain::state::{Row, State};
use crate::store::presence::Presence;

use super::output::{self, Format};
use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benches to show (default: every registered bench). A named bench that never beat is a
    /// DOWN row.
    #[arg(value_name = "NAME")]
    pub names: Vec<BenchName>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        // One connection, made again after a failure: a watch outlives a Redis restart.
        let mut presence: Option<Presence<redis::aio::MultiplexedConnection>> = None;
        let watch = self.watch.clone();
        watch
            .run(ctx, out, self.format == Format::Json, async |out| {
                let p = match presence.take() {
                    Some(p) => p,
                    None => ctx.presence().await?,
                };
                let drawn = self.frame(&p, out).await;
                if drawn.is_ok() {
                    presence = Some(p);
                }
                drawn
            })
            .await
    }

    async fn frame(
        &self,
        presence: &Presence<redis::aio::MultiplexedConnection>,
        out: &mut (dyn Write + Send),
    ) -> Result<(), Error> {
        let snapshot = presence.read(&self.names).await?;
        for member in &snapshot.foreign {
            tracing::warn!(
                member,
                "registry member is not a bench name; remove it with SREM"
            );
        }
        for problem in &snapshot.problems {
            eprintln!("warning: {problem}");
        }
        let rows: Vec<Row> = snapshot
            .benches
            .iter()
            .map(|b| b.row(snapshot.now))
            .collect();
        if self.format != Format::Table {
            return Ok(output::rows(out, self.format, &rows, self.watch.watch)?);
        }
        // A DOWN bench's last beat, where the store still knows (a second round trip, for the
        // table only).
        let down: Vec<BenchName> = snapshot
            .benches
            .iter()
            .filter(|b| b.verdict(snapshot.now).state == State::Down)
            .map(|b| b.name.clone())
            .collect();
        let seen: HashMap<String, chrono::DateTime<chrono::Utc>> = down
            .iter()
            .zip(presence.last_seen(&down).await?)
            .filter_map(|(name, at)| Some((name.to_string(), at?)))
            .collect();
        Ok(output::state_table(out, &rows, snapshot.now, &seen)?)
    }
}
