//! `fleet live [NAME...]`: the names whose key still counts (UP or HELD), one per line, sorted.

use std::io::Write;

use crate::domain::name::BenchName;
use crate::domain::state;

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Benches to ask about (default: every registered bench).
    pub names: Vec<BenchName>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        let snapshot = presence.read(&self.names).await?;
        // The snapshot is sorted by name, and `live` keeps the order given.
        for name in state::live(&snapshot.benches, snapshot.now) {
            writeln!(out, "{name}")?;
        }
        Ok(())
    }
}
