//! `fleet agent NAME [--interval DUR] [--ttl DUR] [--final-ttl DUR] [--final-hold REASON]
//! [--power-off-command CMD]`.

use std::io::Write;
use std::time::Duration;

use crate::agent::{Agent, Config};
use crate::domain::name::{BenchName, Reason};

use super::beat::check_ttl;
use super::{Ctx, Error, args};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bench this agent beats for (its RFC 1123 name).
    #[arg(value_name = "NAME")]
    pub name: BenchName,
    /// How often to beat (each wait jittered by up to a tenth).
    #[arg(long, env = "FLEET_AGENT_INTERVAL", default_value = "10s", value_parser = args::beat_interval, allow_hyphen_values = true)]
    pub interval: Duration,
    /// How long each beat counts (default: three intervals). At least two intervals.
    #[arg(long, env = "FLEET_AGENT_TTL", value_parser = args::positive_ttl, allow_hyphen_values = true)]
    pub ttl: Option<Duration>,
    /// The TTL of the beat written on SIGTERM/SIGINT; 0 reads DOWN at once.
    #[arg(long, env = "FLEET_AGENT_FINAL_TTL", default_value = "0", value_parser = args::ttl, allow_hyphen_values = true)]
    pub final_ttl: Duration,
    /// A hold carried by the final beat (for a planned sleep: --final-ttl 1h --final-hold sleeping).
    #[arg(long, env = "FLEET_AGENT_FINAL_HOLD")]
    pub final_hold: Option<Reason>,
    /// The command that powers this machine off when fleet asks (a slot whose driver has
    /// `off: agent`), run with `sh -c`, once per request: like "systemctl poweroff". Without
    /// it, the agent powers nothing off and refuses fleet's requests, saying why.
    #[arg(long, env = "FLEET_AGENT_POWER_OFF_COMMAND", value_parser = power_off_command)]
    pub power_off_command: Option<String>,
}

/// A command `sh -c` can run: not blank, no NUL (it could not cross exec).
fn power_off_command(text: &str) -> Result<String, String> {
    if text.trim().is_empty() || text.contains('\0') {
        return Err(
            "the power-off command is empty or holds a NUL: give the command that powers this \
             machine off, like \"systemctl poweroff\""
                .to_owned(),
        );
    }
    Ok(text.to_owned())
}

impl Args {
    pub fn config(&self) -> Result<Config, Error> {
        let ttl = self.ttl.unwrap_or(self.interval * 3);
        if ttl < self.interval * 2 {
            return Err(Error::usage(format!(
                "--ttl {} is shorter than two intervals ({}): one late beat would read the bench DOWN; \
                 use at least --ttl {}",
                humantime::format_duration(ttl),
                humantime::format_duration(self.interval),
                humantime::format_duration(self.interval * 2)
            )));
        }
        check_ttl("--ttl", ttl)?;
        check_ttl("--final-ttl", self.final_ttl)?;
        Ok(Config {
            name: self.name.clone(),
            interval: self.interval,
            ttl,
            final_ttl: self.final_ttl,
            final_hold: self.final_hold.clone(),
            power_off: self.power_off_command.clone(),
        })
    }

    pub async fn run(self, ctx: &Ctx, _out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let config = self.config()?;
        // The URL is checked before the loop: a typo is exit 2 now, not a retry forever.
        ctx.endpoint.check()?;
        match Agent::new(config, ctx.endpoint.clone(), ctx.keys.clone())
            .run(ctx.shutdown.clone())
            .await
        {
            crate::agent::Stopped::FinalBeatWritten => Ok(()),
            // A supervisor learns the bench may read UP until its TTL runs out.
            crate::agent::Stopped::FinalBeatFailed(why) => Err(Error::Runtime(anyhow::anyhow!(
                "the final beat did not land ({why}); the bench reads DOWN when its last key \
                 expires, within its TTL"
            ))),
        }
    }
}

/// The command line of `fleet-agent`, the agent alone as a binary of its own (SPEC §2.9): the
/// global flags and `fleet agent`'s, the same definitions, so `fleet-agent NAME ...` is `fleet
/// agent NAME ...` in a binary that links no other verb ("the agent is small").
#[derive(Debug, clap::Parser)]
#[command(name = "fleet-agent", version = super::VERSION, max_term_width = 100)]
pub struct Standalone {
    #[command(flatten)]
    pub global: super::Global,
    #[command(flatten)]
    pub agent: Args,
}
