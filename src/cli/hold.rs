//! `fleet hold NAME --reason TEXT [--for DUR]`: ask a bench to hold (SPEC §2.4).

use std::io::Write;
use std::time::Duration;

use crate::domain::name::{BenchName, Reason};

use super::{Ctx, Error, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bench to hold.
    #[arg(value_name = "NAME")]
    pub name: BenchName,
    /// Why the bench should hold (one printable line).
    #[arg(long)]
    pub reason: Reason,
    /// Ask a bench that never beat too (it is registered, and shows in `fleet state`).
    #[arg(long)]
    pub register: bool,
    /// Let the request lapse by itself after this long.
    #[arg(long = "for", value_parser = args::hold_for, allow_hyphen_values = true)]
    pub for_: Option<Duration>,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let presence = ctx.presence().await?;
        if self.register {
            presence
                .request_hold(&self.name, &self.reason, self.for_)
                .await?;
        } else if !presence
            .request_hold_known(&self.name, &self.reason, self.for_)
            .await?
        {
            return Err(Error::usage(format!(
                "bench {} never beat (it is not registered): check the name with `fleet state`, \
                 or ask anyway with --register",
                self.name
            )));
        }
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
