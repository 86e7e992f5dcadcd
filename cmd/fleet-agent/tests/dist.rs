//! `make dist`'s agent artifact (scripts/dist.sh), installed into a scratch root and run from
//! there: the archive carries the binary where its unit looks for it, and the installed agent
//! beats UP and stops as `fleet agent` does.

use std::path::Path;

use fleet_testing::dist::Installed;

const AGENT: &str = env!("CARGO_BIN_EXE_fleet-agent");

#[tokio::test]
async fn the_agent_artifact_installs_into_a_root_and_beats_from_there() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dist = Installed::make(&repo, &["--agent-only", "--agent", AGENT]);
    let name = dist
        .archive
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("fleet-agent-0."), "{name}");
    let sums = std::fs::read_to_string(dist.out.path().join("SHA256SUMS")).unwrap();
    assert!(sums.contains(&name), "{sums}");
    let unit =
        std::fs::read_to_string(dist.path("/etc/systemd/system/fleet-agent@.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit's ExecStart");
    let binary = exec.split_whitespace().next().unwrap();
    assert_eq!(binary, "/usr/local/bin/fleet-agent");
    let installed = dist.path(binary);
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(AGENT).unwrap(),
        "the archive carries the binary built"
    );
    assert!(
        dist.path("/usr/local/share/fleet/agent.env.example")
            .is_file()
    );
    fleet_testing::agent::beats_up_then_stops_on_sigterm(installed.to_str().unwrap(), &[]).await;
}
