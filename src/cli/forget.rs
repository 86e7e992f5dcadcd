//! `fleet forget NAME...`: remove benches from the registry, with their hold requests.

use std::io::Write;

use crate::domain::name::BenchName;

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(required = true)]
    /// The benches to remove from the registry (with their hold requests).
    #[arg(value_name = "NAME")]
    pub names: Vec<BenchName>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        let removed = presence.forget(&self.names).await?;
        for (name, was) in self.names.iter().zip(removed) {
            if was {
                writeln!(out, "{name}: forgotten")?;
            } else {
                writeln!(out, "{name}: was not registered")?;
            }
        }
        Ok(())
    }
}
