//! The `fleet-agent` binary: `fleet agent` alone (SPEC §2.9), for the machines that only beat.
//!
//! It parses the same flags as `fleet agent` and runs the library's agent through the same verb,
//! so it behaves as `fleet agent` does (Sentinel and Cluster URLs, TLS, the power-off command,
//! the final beat, the exit codes). Linking that verb alone keeps the binary small: fewer pages
//! of code to load and fewer relocations to apply, so a smaller RSS.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli: fleet::cli::agent::Standalone = fleet::cli::parse_or_exit();
    // Before any other thread exists: it changes the environment (SPEC §7.2 S6).
    fleet::cli::secrets::keep_with(&[]);
    fleet::cli::init_telemetry(cli.global.log_format);
    // One thread: the agent does one thing at a time (a beat, then a wait).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let fleet::cli::agent::Standalone { global, agent } = cli;
    let verb = async |ctx: &fleet::cli::Ctx, out: &mut (dyn std::io::Write + Send)| {
        agent.run(ctx, out).await
    };
    ExitCode::from(runtime.block_on(fleet::cli::run_verb(&global, verb)))
}
