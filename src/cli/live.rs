//! `fleet live [NAME...] [--watch]`: the names whose key still counts (UP or HELD), one per line,
//! sorted.

use std::io::Write;

use crate::domain::name::BenchName;
use crate::domain::state;
use crate::store::conn::Conn;
use crate::store::presence::Presence;

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benches to ask about (default: every registered bench).
    #[arg(value_name = "NAME")]
    pub names: Vec<BenchName>,
    #[command(flatten)]
    pub watch: super::watch::Watch,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let mut presence: Option<Presence<Conn>> = None;
        let watch = self.watch.clone();
        watch
            .run(ctx, out, false, async |out| {
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
                // The snapshot is sorted by name, and `live` keeps the order given.
                for name in state::live(&snapshot.benches, snapshot.now) {
                    writeln!(out, "{name}")?;
                }
                Ok(())
            })
            .await
    }
}
