//! The `fleet` binary: parse, set up logs, run the verb, exit with its code.

use std::process::ExitCode;

// mimalloc, not glibc's malloc: a 100 000-slot pass frees and allocates some hundred thousand
// strings of a few hundred bytes (claims, keys, replies), and glibc spent about a seventh of the
// pass consolidating and unlinking its free chunks (perf, SPEC §5.7). `fleet-agent`, which beats
// and allocates next to nothing, keeps the system allocator and its smaller footprint.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli: fleet::cli::Cli = fleet::cli::parse_or_exit();
    fleet::cli::init_telemetry(cli.global.log_format);
    // The agent runs on every machine of the fleet and does one thing at a time (a beat, then a
    // wait), so it runs on this thread alone: no worker threads, their stacks and their
    // allocator arenas (issue 15, "the agent is small"). Every other verb gets the multi-thread
    // runtime (`fleet serve` needs it).
    let runtime = match cli.command {
        fleet::cli::Command::Agent(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(fleet::cli::main(cli)))
}
