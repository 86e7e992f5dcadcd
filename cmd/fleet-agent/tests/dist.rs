//! `make dist`'s agent artifact (scripts/dist.sh), installed into a scratch root and run from
//! there: the archive carries the binary where its unit looks for it, and the installed agent
//! beats UP and stops as `fleet agent` does.

use std::path::{Path, PathBuf};
use std::process::Command;

const AGENT: &str = env!("CARGO_BIN_EXE_fleet-agent");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn the_agent_artifact_installs_into_a_root_and_beats_from_there() {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(repo().join("scripts/dist.sh"))
        .args(["--agent-only", "--agent", AGENT, "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let archives: Vec<PathBuf> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .collect();
    assert_eq!(archives.len(), 1, "{archives:?}");
    let name = archives[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with("fleet-agent-0."), "{name}");
    let sums = std::fs::read_to_string(out.path().join("SHA256SUMS")).unwrap();
    assert!(sums.contains(&name), "{sums}");

    let root = tempfile::tempdir().unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archives[0])
        .arg("-C")
        .arg(root.path())
        .status()
        .unwrap();
    assert!(untar.success());
    let unit = std::fs::read_to_string(root.path().join("etc/systemd/system/fleet-agent@.service"))
        .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit's ExecStart");
    let binary = exec.split_whitespace().next().unwrap();
    assert_eq!(binary, "/usr/local/bin/fleet-agent");
    let installed = root.path().join(binary.trim_start_matches('/'));
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(AGENT).unwrap(),
        "the archive carries the binary built"
    );
    assert!(
        root.path()
            .join("usr/local/share/fleet/agent.env.example")
            .is_file()
    );
    fleet_testing::agent::beats_up_then_stops_on_sigterm(installed.to_str().unwrap(), &[]).await;
}
