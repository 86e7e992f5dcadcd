//! The `fleet` command line: global flags, the verbs (one file each), output, exit codes
//! (SPEC §2.6).
//!
//! Verbs are library functions `run(self, ctx, out)`, so tests call them with a `Vec<u8>` writer.
//! Every flag a deployment sets also reads an environment variable (`FLEET_...`). Exit codes:
//! 0 ok, 1 runtime failure, 2 usage or invalid input.
//!
//! - Presence: [`beat`], [`agent`], [`state`], [`live`], [`hold`], [`release`], [`forget`],
//!   [`register`].
//! - The controller and its claims: [`serve`] (and [`reload`], its SIGHUP), [`groups`],
//!   [`slots`], [`claims`], [`describe`], [`energy`], [`claim`], [`cancel`], [`reset`],
//!   [`reset_attempts`], and [`operation`], the wrapper `fleet serve` runs each operation in.
//! - cluster-autoscaler's calls from the command line: [`autoscaler`].
//! - The deployment's: [`acl`] (the Redis ACL file), [`schema`] (the `-o json` contracts),
//!   [`completions`].
//! - Shared: [`args`] (flags read from text), [`output`] (tables, JSON, TSV), [`watch`]
//!   (`--watch` redraws), [`secrets`] (what a process keeps to itself from its start).

pub mod acl;
pub mod agent;
pub mod args;
#[cfg(feature = "provider")]
pub mod autoscaler;
pub mod beat;
pub mod cancel;
pub mod claim;
pub mod claims;
pub mod completions;
pub mod describe;
pub mod energy;
pub mod forget;
pub mod groups;
pub mod hold;
pub mod live;
pub mod operation;
pub mod output;
pub mod register;
pub mod release;
#[cfg(feature = "serve")]
pub mod reload;
pub mod reset;
pub mod reset_attempts;
pub mod schema;
pub mod secrets;
#[cfg(feature = "serve")]
pub mod serve;
pub mod slots;
pub mod state;
pub mod watch;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::store::keys::Keys;
use fleet_redis::connect::{DEFAULT_URL, Endpoint};

pub use crate::views::{Ctx, Error, request_error};

/// fleet's version and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("FLEET_GIT_COMMIT"),
    ")"
);

/// fleet: bench presence from heartbeat keys in Redis.
#[derive(Debug, Parser)]
#[command(name = "fleet", version = VERSION, about, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every verb takes.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss://... (TLS),
    /// redis+unix:///path/to/redis.sock, redis+sentinel://[user:password@]host:port[,...]/MASTER
    /// or redis+cluster://[user:password@]host:port[,...].
    // The URL may hold a password: help shows the variable's name, never its value.
    #[arg(long = "redis", env = "FLEET_REDIS_URL", default_value = DEFAULT_URL, global = true,
          hide_env_values = true)]
    pub redis: String,
    /// PEM file of the CA that signed the Redis server's certificate (for rediss://).
    #[arg(long, env = "FLEET_REDIS_CA", global = true)]
    pub redis_ca: Option<PathBuf>,
    /// For redis+sentinel://: a file holding the sentinels' own password (one line), when it is
    /// not the primary's. Without it a sentinel is asked without a password, and with the URL's
    /// if it asks for one.
    // Read once, when the flags are parsed (exit 2 if it cannot be); the password is never
    // shown, in help, messages or logs.
    #[arg(long, env = "FLEET_SENTINEL_PASSWORD_FILE", global = true, value_name = "PATH",
          value_parser = args::password_file)]
    pub sentinel_password_file: Option<fleet_redis::connect::Password>,
    /// The sentinels' ACL user, with --sentinel-password-file (default: their default user).
    #[arg(
        long,
        env = "FLEET_SENTINEL_USER",
        global = true,
        value_name = "USER",
        requires = "sentinel_password_file"
    )]
    pub sentinel_user: Option<String>,
    /// Prefix of every key fleet reads and writes.
    #[arg(long, env = "FLEET_PREFIX", default_value = crate::store::keys::DEFAULT_PREFIX,
          value_parser = args::prefix, global = true)]
    pub prefix: Keys,
    /// Bound on connecting to Redis and on every call (like 2s, 1500ms).
    #[arg(long, env = "FLEET_TIMEOUT", default_value = "2s", value_parser = args::call_timeout, allow_hyphen_values = true,
          global = true)]
    pub timeout: Duration,
    /// Log format on stderr.
    #[arg(long, env = "FLEET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain, global = true)]
    pub log_format: LogFormat,
}

impl Global {
    /// What a verb runs with, from these flags.
    pub fn ctx(&self, shutdown: CancellationToken, tty: bool) -> Ctx {
        let mut endpoint = Endpoint::new(self.redis.clone(), self.timeout);
        endpoint.ca_file = self.redis_ca.clone();
        endpoint.sentinel_auth = self.sentinel_password_file.clone().map(|password| {
            fleet_redis::connect::SentinelAuth {
                user: self.sentinel_user.clone(),
                password,
            }
        });
        Ctx {
            endpoint,
            keys: self.prefix.clone(),
            shutdown,
            tty,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write one heartbeat for a bench (for scripts, and the beat before a planned sleep).
    Beat(beat::Args),
    /// Beat for a bench every interval until stopped; a final beat on SIGTERM or SIGINT.
    Agent(agent::Args),
    /// One row per bench: UP, HELD or DOWN, with its hold, load and TTL.
    State(state::Args),
    /// The benches that are there (UP or HELD), one per line.
    Live(live::Args),
    /// Ask a bench to hold; the bench carries the hold on its next beat.
    Hold(hold::Args),
    /// Withdraw a hold request; the bench drops the hold on its next beat.
    Release(release::Args),
    /// Remove benches from the registry.
    Forget(forget::Args),
    /// Register benches, so every reader lists them (fleet serve registers its slots itself).
    Register(register::Args),
    /// Run the lifecycle controller and the cluster-autoscaler provider.
    #[cfg(feature = "serve")]
    Serve(Box<serve::Args>),
    /// The groups: size bounds, target, health.
    Groups(groups::Args),
    /// The slots: phase, power, claim, history.
    Slots(slots::Args),
    /// The claims.
    Claims(claims::Args),
    /// Hours on and off, kWh, and what powering off saved, per slot and group.
    Energy(energy::Args),
    /// A slot or a claim in full: status, history, the last claim's timeline and operation output.
    Describe(describe::Args),
    /// Ask for a machine on a slot (a hand-made claim).
    Claim(claim::Args),
    /// Cancel a claim: a pending one is deleted, a booting or ready one reversed.
    Cancel(cancel::Args),
    /// Reset a claim's shutdown attempts, so the shutdown fires on the next pass.
    ResetShutdownAttempts(reset::Args),
    /// Reset a slot's failure streak, so a slot that spent its attempts is offered again.
    ResetAttempts(reset_attempts::Args),
    /// Call the cluster-autoscaler provider over gRPC, exactly as cluster-autoscaler does.
    #[cfg(feature = "provider")]
    Autoscaler(autoscaler::Args),
    /// Print the Redis ACL file of fleet's users: the controller, the viewer, one per slot.
    Acl(acl::Args),
    /// The operation wrapper `fleet serve` runs each lifecycle operation in (job on stdin).
    #[command(hide = true)]
    Operation(operation::Args),
    /// Print the shell completion script (bash, zsh, fish, ...).
    Completions(completions::Args),
    /// Print the JSON Schema of a view's `-o json` output, or list the views.
    Schema(schema::Args),
    /// Print fleet's version and the git commit it was built from.
    Version,
}

impl Command {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        match self {
            Command::Beat(args) => args.run(ctx, out).await,
            Command::Agent(args) => args.run(ctx, out).await,
            Command::State(args) => args.run(ctx, out).await,
            Command::Live(args) => args.run(ctx, out).await,
            Command::Hold(args) => args.run(ctx, out).await,
            Command::Release(args) => args.run(ctx, out).await,
            Command::Forget(args) => args.run(ctx, out).await,
            Command::Register(args) => args.run(ctx, out).await,
            #[cfg(feature = "serve")]
            Command::Serve(args) => args.run(ctx, out).await,
            Command::Groups(args) => args.run(ctx, out).await,
            Command::Energy(args) => args.run(ctx, out).await,
            Command::Slots(args) => args.run(ctx, out).await,
            Command::Claims(args) => args.run(ctx, out).await,
            Command::Describe(args) => args.run(ctx, out).await,
            Command::Claim(args) => args.run(ctx, out).await,
            Command::Cancel(args) => args.run(ctx, out).await,
            Command::ResetShutdownAttempts(args) => args.run(ctx, out).await,
            Command::ResetAttempts(args) => args.run(ctx, out).await,
            #[cfg(feature = "provider")]
            Command::Autoscaler(args) => args.run(out).await,
            Command::Acl(args) => args.run(ctx, out).await,
            Command::Operation(args) => args.run(out).await,
            Command::Completions(args) => args.run(out),
            Command::Schema(args) => args.run(out),
            Command::Version => {
                writeln!(out, "fleet {VERSION}")?;
                Ok(())
            }
        }
    }
}

/// Runs a parsed command line to its exit code: the binary's whole body after parsing.
/// The command line parsed, or the process ended as clap ends it (exit 2 for a usage error, 0 for
/// `--help`), with one difference: a usage error echoes the value it refused, which may hold a
/// control or bidirectional character (a reason refused for one, say), so the error is shown
/// with every such character written as `\u{…}`, never as what the terminal would make of it
/// (SPEC §7 S7).
pub fn parse_or_exit<P: clap::Parser>() -> P {
    match P::try_parse() {
        Ok(parsed) => parsed,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.render().to_string();
            let shown: String = text
                .split('\n')
                .map(|line| crate::domain::text::escaped(line).into_owned())
                .collect::<Vec<_>>()
                .join("\n");
            eprint!("{shown}");
            std::process::exit(e.exit_code());
        }
    }
}

pub async fn main(cli: Cli) -> u8 {
    let Cli { global, command } = cli;
    run_verb(&global, async |ctx, out| command.run(ctx, out).await).await
}

/// Runs one verb with the context the global flags make, the shutdown signal armed, on stdout,
/// to its exit code. `fleet-agent` calls it with the agent verb alone, so that binary links no
/// other verb.
pub async fn run_verb(
    global: &Global,
    verb: impl AsyncFnOnce(&Ctx, &mut (dyn Write + Send)) -> Result<(), Error>,
) -> u8 {
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let ctx = global.ctx(shutdown, tty);
    // Buffered: stdout alone writes a line at a time, a dozen system calls a bench for `fleet
    // state -o json`. A verb that waits between its lines (`--watch`, `claim --wait`) flushes
    // before it waits.
    let mut out = std::io::BufWriter::with_capacity(OUT_BUFFER, std::io::stdout());
    let ran = verb(&ctx, &mut out).await;
    let flushed = out.flush().map_err(Error::from);
    match ran.and(flushed) {
        Ok(()) => 0,
        // A reader that went away (`fleet completions bash | head`) wanted no more: not a failure.
        Err(e) if e.is_broken_pipe() => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// The buffer of a verb's stdout: a `fleet state -o json` of 100 000 benches is about 24 MB, written
/// in pieces of this size.
const OUT_BUFFER: usize = 64 * 1024;

/// Cancels `shutdown` on the first SIGINT or SIGTERM.
async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("installing the signal handlers failed; stop with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    shutdown.cancel();
}

/// Sets up `tracing` on stderr: `FLEET_LOG` (an env-filter, default `info`), plain or JSON.
pub fn init_telemetry(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("FLEET_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
