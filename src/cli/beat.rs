//! `fleet beat NAME [--ttl DUR] [--hold REASON] [--load F] [--cores N]`: one beat.

use std::io::Write;
use std::time::Duration;

use crate::domain::name::{BenchName, Reason};
use crate::store::presence::{Beat, MAX_TTL};

use super::{Ctx, Error, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bench (an RFC 1123 name, like a Kubernetes node name).
    /// The bench that beats (its RFC 1123 name).
    #[arg(value_name = "NAME")]
    pub name: BenchName,
    /// How long this beat counts; 0 reads DOWN at once.
    #[arg(long, default_value = "30s", value_parser = args::ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Hold: the bench is there and takes no work, until the key expires.
    #[arg(long)]
    pub hold: Option<Reason>,
    /// The bench's load average, shown beside the state (never a say in it).
    #[arg(long, value_parser = args::load, allow_hyphen_values = true)]
    pub load: Option<f64>,
    /// The bench's core count, shown beside the state.
    #[arg(long, value_parser = args::cores)]
    pub cores: Option<u32>,
}

/// Refuses a TTL past the store's bound, saying what is valid.
pub fn check_ttl(flag: &str, ttl: Duration) -> Result<(), Error> {
    if ttl > MAX_TTL {
        return Err(Error::usage(format!(
            "{flag} {} is longer than the longest promise a beat may make ({})",
            humantime::format_duration(ttl),
            humantime::format_duration(MAX_TTL)
        )));
    }
    Ok(())
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        check_ttl("--ttl", self.ttl)?;
        let presence = ctx.presence().await?;
        let beat = Beat {
            name: self.name,
            ttl: self.ttl,
            hold: self.hold,
            load: self.load,
            cores: self.cores,
        };
        let receipt = presence.beat(&beat).await?;
        let ttl = humantime::format_duration(beat.ttl);
        match receipt.hold {
            Some(hold) => writeln!(
                out,
                "{}: beat written, ttl {ttl}, holding ({hold})",
                beat.name
            )?,
            None => writeln!(out, "{}: beat written, ttl {ttl}", beat.name)?,
        }
        if let Some(problem) = receipt.problem {
            eprintln!("warning: {problem}");
        }
        if let Some(why) = receipt.refused_request {
            eprintln!(
                "warning: the hold request for {name} was not carried: {why}; withdraw it with \
                 `fleet release {name}` and ask again with `fleet hold`",
                name = beat.name
            );
        }
        Ok(())
    }
}
