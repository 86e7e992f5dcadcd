//! The `fleet-agent` binary, built as machines build it (fleet's library without its features),
//! against a real redis-server: it beats, stops as `fleet agent` does, and takes the same flags.

use clap::CommandFactory;

const AGENT: &str = env!("CARGO_BIN_EXE_fleet-agent");

// `fleet-agent` is `fleet agent` alone, a small binary of its own over the same library
// code: its beat reads UP through the library, and it stops as `fleet agent` does (a final beat,
// exit 0).
#[tokio::test]
async fn the_small_agent_binary_beats_up_and_stops_on_sigterm_with_a_final_beat() {
    fleet_testing::agent::beats_up_then_stops_on_sigterm(AGENT, &[]).await;
}

/// The `--flags` of a help text.
fn flags(help: &str) -> std::collections::BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '(' || c == ')')
        .filter(|w| w.starts_with("--"))
        .map(str::to_owned)
        .collect()
}

// The same flags as `fleet agent`, as the library's command line defines that verb (this package
// builds no `fleet` binary to ask).
#[test]
fn the_small_agent_binary_takes_the_same_flags_as_fleet_agent() {
    let o = std::process::Command::new(AGENT)
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success(), "{AGENT} --help");
    let mut small = flags(&String::from_utf8(o.stdout).unwrap());
    let mut cli = fleet::cli::Cli::command();
    cli.build();
    let verb = cli.find_subcommand_mut("agent").expect("fleet agent");
    let fleet = flags(&verb.render_long_help().to_string());
    // A top-level command has --version, a verb does not.
    assert!(small.remove("--version"), "{small:?}");
    assert!(fleet.contains("--power-off-command") && fleet.contains("--redis"));
    assert_eq!(small, fleet);
}
