//! `make dist`'s fleet artifact (scripts/dist.sh), installed into a scratch root and run from
//! there: the binary where the serve unit looks for it, the schemas beside it, and the installed
//! binary's agent beating UP. (The agent's own artifact: cmd/fleet-agent/tests/dist.rs.)

use std::path::Path;
use std::process::Command;

use fleet_testing::dist::Installed;

#[tokio::test]
async fn the_fleet_artifact_installs_into_a_root_and_runs_from_there() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dist = Installed::make(
        repo,
        &["--fleet-only", "--fleet", env!("CARGO_BIN_EXE_fleet")],
    );
    let unit =
        std::fs::read_to_string(dist.path("/etc/systemd/system/fleet-serve.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/fleet serve"),
        "{unit}"
    );
    let installed = dist.path("/usr/local/bin/fleet");
    let version = Command::new(&installed).arg("version").output().unwrap();
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("fleet 0."));
    assert_eq!(
        std::fs::read_to_string(dist.path("/usr/local/share/fleet/schemas/v1.json")).unwrap(),
        fleet::cli::schema::SCHEMAS_V1
    );
    fleet_testing::agent::beats_up_then_stops_on_sigterm(installed.to_str().unwrap(), &["agent"])
        .await;
}
