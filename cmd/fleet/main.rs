//! The `fleet` binary: parse, set up logs, run the verb, exit with its code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = fleet::cli::Cli::parse();
    fleet::cli::init_telemetry(cli.global.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(fleet::cli::main(cli)))
}
