//! The `fleet` binary: parse, set up logs, run the verb, exit with its code.

use std::process::ExitCode;

// mimalloc, not glibc's malloc: a 100 000-slot pass frees and allocates some hundred thousand
// strings of a few hundred bytes (claims, keys, replies), and glibc spent about a seventh of the
// pass consolidating and unlinking its free chunks (perf, SPEC §5.7). `fleet-agent`, which beats
// and allocates next to nothing, keeps the system allocator and its smaller footprint.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (v2 and v3 alike; the crate names the
/// options on either side of it, 14 and 16, but not this one).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // A controller pass frees nearly all it allocates (at 100 000 slots some 200 MB of reads,
    // claims and replies), and mimalloc keeps freed pages for its purge delay before it gives
    // them back; a pass every second reuses them first, so `fleet serve` held its passes'
    // high-water mark for good: 536 MB at 100 000 slots where 240 MB were in use
    // (docs/measurements.md). Freed pages go back at once; the page faults cost a pass no more
    // than its noise. Before any other thread exists: the option is not thread-safe to set.
    // An operator's own `MIMALLOC_PURGE_DELAY` stands: mimalloc reads it at start.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options on the only thread; any value is valid for it.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
    let cli: fleet::cli::Cli = fleet::cli::parse_or_exit();
    // Before any other thread exists: it changes the environment (SPEC §7.2 S6).
    fleet::cli::secrets::keep(&cli);
    fleet::cli::init_telemetry(cli.global.log_format);
    // The agent runs on every machine of the fleet and does one thing at a time (a beat, then a
    // wait), so it runs on this thread alone: no worker threads, their stacks and their
    // allocator arenas ("the agent is small"). Every other verb gets the multi-thread
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
