//! Lifecycle operations: how a slot's machine is powered on and off (SPEC §4.4).
//!
//! An operation is run by a `Runner`. The local runner (`Exec`) runs the group's command with the
//! slot's facts in its environment, in a process group of its own, and kills that whole group at
//! the timeout. Exit 0 is JobCompleted, any other exit JobFailed, past the timeout JobTimeout.
//! Kubernetes Jobs plug in behind the same trait.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::domain::claim::{OperationKind, OperationOutcome};
use crate::domain::name::{BenchName, ClaimName, GroupName};

/// The most bytes of an operation's output kept for its claim's timeline.
pub const TAIL_BYTES: usize = 2048;

/// One operation to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub kind: OperationKind,
    pub slot: BenchName,
    pub group: GroupName,
    /// The claim the operation serves; `None` for a shutdown of a machine no claim wants.
    pub claim: Option<ClaimName>,
    pub attempt: u32,
    pub provider_id: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub dir: Option<PathBuf>,
    pub timeout: Duration,
    /// The controller that runs it (its lease holder id), for the operation's own records.
    pub controller: String,
}

impl Request {
    /// The environment fleet gives every operation.
    pub fn fleet_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FLEET_SLOT", self.slot.to_string()),
            ("FLEET_GROUP", self.group.to_string()),
            (
                "FLEET_CLAIM",
                self.claim
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ),
            ("FLEET_ATTEMPT", self.attempt.to_string()),
            ("FLEET_PROVIDER_ID", self.provider_id.clone()),
            ("FLEET_CONTROLLER", self.controller.clone()),
            ("FLEET_OPERATION", self.kind.as_str().to_owned()),
        ]
    }
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub outcome: OperationOutcome,
    pub duration: Duration,
    /// The last `TAIL_BYTES` of its stdout and stderr, or why it could not start.
    pub tail: String,
}

/// Runs operations.
pub trait Runner: Send + Sync + 'static {
    fn run(&self, request: Request) -> impl Future<Output = Report> + Send;
}

/// Runs an operation as a local command.
#[derive(Clone, Debug, Default)]
pub struct Exec;

impl Runner for Exec {
    async fn run(&self, request: Request) -> Report {
        let start = Instant::now();
        let Some((program, args)) = request.command.split_first() else {
            return Report {
                outcome: OperationOutcome::Failed,
                duration: start.elapsed(),
                tail: "the operation has no command".to_owned(),
            };
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .envs(&request.env)
            .envs(request.fleet_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills everything it started.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &request.dir {
            cmd.current_dir(dir);
        }
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                return Report {
                    outcome: OperationOutcome::Failed,
                    duration: start.elapsed(),
                    tail: format!("cannot start {program:?}: {e}"),
                };
            }
        };
        let pid = child.id();
        let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
        let collect = async {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let read_out = async {
                if let Some(o) = out.as_mut() {
                    let _ = o.read_to_end(&mut a).await;
                }
            };
            let read_err = async {
                if let Some(e) = err.as_mut() {
                    let _ = e.read_to_end(&mut b).await;
                }
            };
            tokio::join!(read_out, read_err);
            a.extend_from_slice(&b);
            a
        };
        let waited = tokio::time::timeout(request.timeout, async {
            let (status, output) = tokio::join!(child.wait(), collect);
            (status, output)
        })
        .await;
        match waited {
            Ok((status, output)) => {
                let ok = status.as_ref().is_ok_and(|s| s.success());
                let mut tail = tail(&output);
                if let Ok(s) = &status
                    && !s.success()
                {
                    tail.push_str(&format!("\n[{s}]"));
                }
                Report {
                    outcome: if ok {
                        OperationOutcome::Completed
                    } else {
                        OperationOutcome::Failed
                    },
                    duration: start.elapsed(),
                    tail,
                }
            }
            Err(_) => {
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    // SAFETY: killpg only sends a signal to the process group this command
                    // leads; a stale id at worst fails with ESRCH.
                    unsafe {
                        libc::killpg(pid, libc::SIGKILL);
                    }
                }
                let _ = child.wait().await;
                Report {
                    outcome: OperationOutcome::TimedOut,
                    duration: start.elapsed(),
                    tail: format!(
                        "killed after {}",
                        humantime::format_duration(request.timeout)
                    ),
                }
            }
        }
    }
}

/// The last `TAIL_BYTES` of `output`, as text.
fn tail(output: &[u8]) -> String {
    let from = output.len().saturating_sub(TAIL_BYTES);
    String::from_utf8_lossy(&output[from..])
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: &[&str], timeout: Duration) -> Request {
        Request {
            kind: OperationKind::Startup,
            slot: BenchName::parse("bench-01").unwrap(),
            group: GroupName::parse("pool-a").unwrap(),
            claim: Some(ClaimName::parse("bench-01-1").unwrap()),
            attempt: 2,
            provider_id: "fleet://bench-01".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::from([("BMC".to_owned(), "10.0.0.9".to_owned())]),
            dir: None,
            timeout,
            controller: "ctl-1".into(),
        }
    }

    #[tokio::test]
    async fn exit_0_completes_and_the_slots_facts_are_in_the_environment() {
        let r = Exec
            .run(request(
                &["sh", "-c", "echo $FLEET_SLOT $FLEET_GROUP $FLEET_CLAIM $FLEET_ATTEMPT $FLEET_PROVIDER_ID $FLEET_OPERATION $BMC"],
                Duration::from_secs(10),
            ))
            .await;
        assert_eq!(r.outcome, OperationOutcome::Completed);
        assert_eq!(
            r.tail,
            "bench-01 pool-a bench-01-1 2 fleet://bench-01 startup 10.0.0.9"
        );
    }

    #[tokio::test]
    async fn a_non_zero_exit_fails_with_its_output() {
        let r = Exec
            .run(request(
                &["sh", "-c", "echo no power >&2; exit 3"],
                Duration::from_secs(10),
            ))
            .await;
        assert_eq!(r.outcome, OperationOutcome::Failed);
        assert!(r.tail.starts_with("no power"), "{}", r.tail);
        assert!(r.tail.contains("exit status: 3"), "{}", r.tail);
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_fails_saying_why() {
        let r = Exec
            .run(request(&["/nonexistent/power"], Duration::from_secs(10)))
            .await;
        assert_eq!(r.outcome, OperationOutcome::Failed);
        assert!(r.tail.contains("cannot start"), "{}", r.tail);
    }

    // Past the timeout the whole process group is killed: the child it started as well.
    #[tokio::test]
    async fn past_the_timeout_the_whole_process_group_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        // Long enough for sh to start its child and write the pid on a loaded machine.
        let r = Exec
            .run(request(&["sh", "-c", &script], Duration::from_secs(2)))
            .await;
        assert_eq!(r.outcome, OperationOutcome::TimedOut);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild is gone (or a zombie waiting for init). SIGKILL is delivered at once but
        // the process exits when it is next scheduled: allow a loaded machine a moment for that.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .map(|s| !s.contains("State:\tZ"))
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!alive(), "the operation's child survived its timeout");
    }

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let long = "x".repeat(5000) + "end";
        assert_eq!(tail(long.as_bytes()).len(), TAIL_BYTES);
        assert!(tail(long.as_bytes()).ends_with("end"));
    }
}
