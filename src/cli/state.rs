//! `fleet state [NAME...] [-o table|json|tsv] [--watch]`: one row per bench, sorted by name.

use std::collections::HashMap;
use std::io::Write;

use crate::domain::name::BenchName;
use crate::domain::state::{Row, State};
use crate::store::presence::Presence;
use fleet_redis::conn::Conn;

use super::output::{self, Format};
use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benches to show (default: every registered bench). A named bench that never beat is a
    /// DOWN row.
    #[arg(value_name = "NAME")]
    pub names: Vec<BenchName>,
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "table",
          value_parser = Format::offered(&[Format::Table, Format::Json, Format::Tsv]))]
    pub format: Format,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        // One connection, made again after a failure: a watch outlives a Redis restart.
        let mut presence: Option<Presence<Conn>> = None;
        let watch = self.watch.clone();
        watch
            .run(ctx, out, self.format == Format::Json, async |out| {
                let p = match presence.take() {
                    Some(p) => p,
                    None => ctx.presence().await?,
                };
                let mut drawn = self.frame(&p, out).await;
                // A read that met a lost connection or a primary that is one no more (a Redis
                // failover, SPEC §2.7) is tried once more on a new connection: a read repeats
                // nothing. The frame writes nothing until its reads are done. When no new
                // connection can be made, the read's own error is the one said.
                let p = match drawn {
                    Err(ref e) if lost_connection(e) => match ctx.presence().await {
                        Ok(again) => {
                            drawn = self.frame(&again, out).await;
                            again
                        }
                        Err(_) => return drawn,
                    },
                    _ => p,
                };
                if drawn.is_ok() {
                    presence = Some(p);
                }
                drawn
            })
            .await
    }

    async fn frame(
        &self,
        presence: &Presence<Conn>,
        out: &mut (dyn Write + Send),
    ) -> Result<(), Error> {
        let snapshot = presence.read(&self.names).await?;
        for member in &snapshot.foreign {
            let member = crate::domain::text::escaped(member);
            tracing::warn!(
                member = %member,
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
        // A key of another type costs only its own times, said as the read's problems are.
        let last = presence.last_seen(&down).await?;
        for problem in &last.problems {
            eprintln!("warning: {problem}");
        }
        let seen: HashMap<String, chrono::DateTime<chrono::Utc>> = down
            .iter()
            .zip(last.at)
            .filter_map(|(name, at)| Some((name.to_string(), at?)))
            .collect();
        Ok(output::state_table(out, &rows, snapshot.now, &seen)?)
    }
}

/// Whether a verb's failure is Redis's connection failing or its primary failing over.
fn lost_connection(e: &Error) -> bool {
    let (Error::Usage(e) | Error::Runtime(e)) = e;
    e.chain().any(|cause| {
        cause
            .downcast_ref::<redis::RedisError>()
            .is_some_and(fleet_redis::conn::is_failover)
    })
}
