//! `fleet hold NAME --reason TEXT [--for DUR]`: ask a bench to hold (SPEC §2.4).

use std::io::Write;
use std::time::Duration;

use crate::domain::name::{BenchName, Reason};

use super::{Ctx, Error, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub name: BenchName,
    /// Why the bench should hold (one printable line).
    #[arg(long)]
    pub reason: Reason,
    /// Let the request lapse by itself after this long.
    #[arg(long = "for", value_parser = args::hold_for)]
    pub for_: Option<Duration>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        presence
            .request_hold(&self.name, &self.reason, self.for_)
            .await?;
        let lapse = self
            .for_
            .map(|d| format!(" for {}", humantime::format_duration(d)))
            .unwrap_or_default();
        writeln!(
            out,
            "{}: hold requested{lapse} ({}); the bench carries it on its next beat",
            self.name, self.reason
        )?;
        Ok(())
    }
}
