//! `fleet register NAME...`: register benches, so every reader lists them (DOWN until they beat)
//! (SPEC §2.3).
//!
//! A bench's own Redis user may not register itself: a user that may add one name to the
//! registry may add millions (SPEC §7). `fleet serve` registers its slots when it starts and at
//! each reload; this verb registers the others, with a user that may (the controller's).

use std::io::Write;

use crate::domain::name::BenchName;

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The benches to register.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<BenchName>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        let added = presence.register(&self.names).await?;
        for (name, new) in self.names.iter().zip(added) {
            if new {
                writeln!(out, "{name}: registered")?;
            } else {
                writeln!(out, "{name}: was registered")?;
            }
        }
        Ok(())
    }
}
