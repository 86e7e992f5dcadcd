//! `make dist`'s archives (scripts/dist.sh) as the tests make and install them: packed from
//! binaries a test build made, then unpacked into a scratch root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One archive made by `scripts/dist.sh ARGS` (of the repository at `repo`) and unpacked into a
/// scratch root: the directory it was written to, the archive, and the root.
pub struct Installed {
    pub out: tempfile::TempDir,
    pub archive: PathBuf,
    pub root: tempfile::TempDir,
}

impl Installed {
    /// Runs `scripts/dist.sh` with `args` and `--out`, expects exactly one archive, and unpacks
    /// it with `tar -xzf` into a fresh root.
    pub fn make(repo: &Path, args: &[&str]) -> Installed {
        let out = tempfile::tempdir().expect("a directory for the archive");
        let o = Command::new(repo.join("scripts/dist.sh"))
            .args(args)
            .arg("--out")
            .arg(out.path())
            .output()
            .expect("running scripts/dist.sh");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let archives: Vec<PathBuf> = std::fs::read_dir(out.path())
            .expect("the archive's directory")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
            .collect();
        assert_eq!(archives.len(), 1, "{archives:?}");
        let root = tempfile::tempdir().expect("a scratch root");
        let untar = Command::new("tar")
            .arg("-xzf")
            .arg(&archives[0])
            .arg("-C")
            .arg(root.path())
            .status()
            .expect("running tar");
        assert!(untar.success(), "tar -xzf {:?}", archives[0]);
        Installed {
            out,
            archive: archives[0].clone(),
            root,
        }
    }

    /// A path inside the root, given as an absolute path of the installed system.
    pub fn path(&self, installed: &str) -> PathBuf {
        self.root.path().join(installed.trim_start_matches('/'))
    }
}
