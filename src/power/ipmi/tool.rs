//! One `ipmitool` call, and the turn that orders the calls to one BMC.
//!
//! A call writes the password to a fresh file of mode 0600 that only it names (`-f`), runs
//! ipmitool in a process group of its own with a cleared environment, and kills the whole group
//! past a hard timeout: ipmitool can hang on a BMC that half answers. The file is removed on
//! every way out (exit, timeout, a failed spawn, the caller dropping the call), because it is a
//! `NamedTempFile` owned by the call. It decides nothing about what ipmitool printed
//! (`words` does).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::target::IpmiTarget;

/// The most of ipmitool's output kept per stream: its answers are a few lines.
const MAX_OUTPUT: u64 = 64 * 1024;

/// A chassis power command, as ipmitool spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    Status,
    On,
    /// ACPI soft shutdown: the operating system is asked to power off.
    Soft,
    /// Hard power off, whatever the operating system is doing.
    Off,
}

impl Action {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Action::Status => "status",
            Action::On => "on",
            Action::Soft => "soft",
            Action::Off => "off",
        }
    }
}

/// How a call is made: which ipmitool, its own retransmissions, the hard limit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tool<'a> {
    pub program: &'a Path,
    pub retries: u8,
    pub timeout: Duration,
}

/// How a call ended.
#[derive(Debug)]
pub(super) enum Ran {
    /// ipmitool exited by itself; its stdout and stderr.
    Exited {
        success: bool,
        stdout: String,
        stderr: String,
    },
    /// ipmitool was still running at the hard timeout: its process group was killed.
    TimedOut,
    /// No ipmitool at the configured name or path.
    NotInstalled,
    /// The call could not be made (the password file, the spawn, the wait): what failed, with no
    /// secret in it.
    Failed(String),
}

/// One BMC's turn, held for the length of one call so that calls to a BMC never overlap, with
/// what the calls learned: when the last one ended (for the gap between commands) and the
/// cipher suite a fallback settled on.
#[derive(Debug, Default)]
pub(super) struct Turn {
    pub last_end: Option<Instant>,
    pub fallback: Option<u8>,
}

/// The turn of the BMC at `host:port`, shared by every `Ipmi` of the process: the lifecycle may
/// build one per operation, and the pacing is the BMC's, not the driver value's. One entry per
/// BMC ever driven, so as many as the configuration names.
pub(super) fn turn_of(host: &str, port: u16) -> Arc<tokio::sync::Mutex<Turn>> {
    type Turns = Mutex<HashMap<(String, u16), Arc<tokio::sync::Mutex<Turn>>>>;
    static TURNS: OnceLock<Turns> = OnceLock::new();
    let mut turns = TURNS
        .get_or_init(Turns::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    turns
        .entry((host.to_ascii_lowercase(), port))
        .or_default()
        .clone()
}

/// Runs `ipmitool … chassis power ACTION` once against `target` with cipher suite `suite`.
pub(super) async fn run(tool: Tool<'_>, target: &IpmiTarget, suite: u8, action: Action) -> Ran {
    let file = match password_file(target) {
        Ok(file) => file,
        Err(e) => {
            return Ran::Failed(format!(
                "writing the password file in {} failed ({e}): check that fleet may write there \
                 (TMPDIR)",
                std::env::temp_dir().display()
            ));
        }
    };
    let mut child = match command(tool, target, suite, action, file.path()).spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ran::NotInstalled,
        Err(e) => {
            return Ran::Failed(format!(
                "starting {} failed ({e}): check that it is an executable ipmitool",
                tool.program.display()
            ));
        }
    };
    let mut group = Group(child.id().and_then(|p| i32::try_from(p).ok()));
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let waited = tokio::time::timeout(tool.timeout, async {
        tokio::join!(child.wait(), read(stdout), read(stderr))
    })
    .await;
    let ran = match waited {
        Ok((Ok(status), stdout, stderr)) => {
            group.0 = None; // It exited: its id may be reused, never signal it again.
            Ran::Exited {
                success: status.success(),
                stdout,
                stderr,
            }
        }
        Ok((Err(e), _, _)) => Ran::Failed(format!("waiting for ipmitool failed ({e})")),
        Err(_) => {
            group.kill();
            let _ = child.wait().await;
            Ran::TimedOut
        }
    };
    drop(file);
    ran
}

/// The command line: every value but the password, which is in the file at `password`. The
/// environment is cleared (the password may sit in fleet's own, `password_env`), but for PATH
/// and a C locale so that ipmitool's words are the ones `words` reads.
fn command(
    tool: Tool<'_>,
    target: &IpmiTarget,
    suite: u8,
    action: Action,
    password: &Path,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(tool.program);
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.env("LC_ALL", "C")
        .args(["-I", "lanplus", "-H", &target.host])
        .args(["-p", &target.port.to_string()])
        .args(["-U", &target.username])
        .arg("-f")
        .arg(password)
        .args(["-C", &suite.to_string()])
        .args(["-R", &tool.retries.to_string()])
        // One -v: the reason a session failed (a refused password, a refused suite, no answer)
        // is printed only with it (`words`).
        .arg("-v")
        .args(["chassis", "power", action.as_str()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// A fresh file holding the password and nothing else, readable by fleet's user only, removed
/// when dropped.
fn password_file(target: &IpmiTarget) -> std::io::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new()
        .prefix("fleet-ipmi-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile()?;
    file.write_all(target.password.expose().as_bytes())?;
    file.flush()?;
    Ok(file)
}

/// All of a stream, up to `MAX_OUTPUT`, as text.
async fn read(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let mut bytes = Vec::new();
    if let Some(stream) = stream {
        let _ = stream.take(MAX_OUTPUT).read_to_end(&mut bytes).await;
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The process group ipmitool leads, killed with everything in it when the call ends without
/// ipmitool having exited: at the timeout, or when the caller drops the call.
struct Group(Option<i32>);

impl Group {
    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            // A group already gone fails with ESRCH, which is what was wanted.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::power::action::Secret;

    #[test]
    fn the_command_line_carries_no_password() {
        let target = IpmiTarget::new("10.0.0.31", "admin", Secret::new("hunter2-pass"));
        let tool = Tool {
            program: Path::new("ipmitool"),
            retries: 2,
            timeout: Duration::from_secs(1),
        };
        let cmd = command(tool, &target, 17, Action::Soft, Path::new("/tmp/pw"));
        let std = cmd.as_std();
        let args: Vec<String> = std
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args.join(" "),
            "-I lanplus -H 10.0.0.31 -p 623 -U admin -f /tmp/pw -C 17 -R 2 -v chassis power soft"
        );
        let envs: Vec<String> = std
            .get_envs()
            .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?)))
            .collect();
        assert!(envs.iter().all(|e| !e.contains("hunter2")), "{envs:?}");
        assert!(envs.contains(&"LC_ALL=C".to_owned()), "{envs:?}");
    }

    #[test]
    fn the_password_file_holds_the_password_alone_readable_by_its_owner_only() {
        let target = IpmiTarget::new("h", "u", Secret::new("hunter2-pass"));
        let file = password_file(&target).expect("a temp file");
        let path = file.path().to_owned();
        let mode = std::fs::metadata(&path)
            .expect("it exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "hunter2-pass"
        );
        drop(file);
        assert!(!path.exists(), "{} outlived its call", path.display());
    }

    #[test]
    fn one_bmc_has_one_turn_whatever_the_case_of_its_name() {
        let a = turn_of("BMC-1.rack", 623);
        let b = turn_of("bmc-1.rack", 623);
        let c = turn_of("bmc-1.rack", 624);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
