//! Running one operation's command (SPEC §4.2): what the operation wrapper (`fleet operation`)
//! does, in the wrapper's process.
//!
//! The command runs in a process group of its own with stdin closed. Its outcome is its exit
//! status: a command that exits 0 has succeeded, even when it left a background child holding its
//! output open (`nohup`, `ssh -f`, `(sleep 30) &`). Its output is read as it arrives and only the
//! last `TAIL_BYTES` are kept, so a command that prints gigabytes costs the wrapper a few
//! kilobytes. Past its timeout the whole process group is killed.

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Report, Request, TAIL_BYTES};
use crate::domain::claim::OperationOutcome;

/// How long output already written is read after the command exits. Output written just before
/// the exit may still be in the pipe; a background child that keeps the pipe open gets no more
/// than this.
const DRAIN: Duration = Duration::from_millis(200);

/// The last bytes of a stream of output: bounded whatever the stream's length.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        // Trim in batches, so the copy is amortised: never more than twice the tail is held.
        if self.bytes.len() > 2 * TAIL_BYTES {
            let cut = self.bytes.len() - TAIL_BYTES;
            self.bytes.drain(..cut);
        }
    }

    fn text(&self) -> String {
        tail(&self.bytes)
    }
}

/// The last `TAIL_BYTES` of `output`, as text.
pub(crate) fn tail(output: &[u8]) -> String {
    let from = output.len().saturating_sub(TAIL_BYTES);
    String::from_utf8_lossy(&output[from..])
        .trim_end()
        .to_owned()
}

/// Reads `stream` into `tail` chunk by chunk until it ends.
async fn collect(mut stream: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

/// Runs the request's command to its outcome.
pub async fn run(request: &Request) -> Report {
    let start = Instant::now();
    let Some((program, args)) = request.command.split_first() else {
        return Report {
            outcome: OperationOutcome::Failed,
            duration: start.elapsed(),
            tail: "the operation has no command".to_owned(),
        };
    };
    let mut child = match command(request, program, args).spawn() {
        Ok(child) => child,
        Err(e) => {
            return Report {
                outcome: OperationOutcome::Failed,
                duration: start.elapsed(),
                tail: format!("cannot start {program:?}: {e}"),
            };
        }
    };
    let output = Arc::new(Mutex::new(Tail::default()));
    let mut readers = tokio::task::JoinSet::new();
    if let Some(out) = child.stdout.take() {
        readers.spawn(collect(out, output.clone()));
    }
    if let Some(err) = child.stderr.take() {
        readers.spawn(collect(err, output.clone()));
    }
    let status = wait_or_kill(&mut child, request.timeout).await;
    drain(readers).await;
    let text = output.lock().unwrap_or_else(|e| e.into_inner()).text();
    report(status, text, request.timeout, start.elapsed())
}

/// The command, ready to spawn: stdin closed, its output piped to the wrapper, in a process
/// group of its own so a timeout kills everything it started.
fn command(request: &Request, program: &str, args: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    // The command gets fleet's own variables and the group's, never the ones the controller runs
    // with (FLEET_REDIS_URL may hold a password, SPEC §2.7), nor any variable fleet reads a
    // secret from (a BMC's `password_env`, SPEC §4.2): a script that prints its environment
    // would put it in the timeline and on the page.
    for (name, _) in std::env::vars_os() {
        if request.kept_from_command(&name.to_string_lossy()) {
            cmd.env_remove(name);
        }
    }
    cmd.args(args)
        .envs(&request.env)
        .envs(request.fleet_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &request.dir {
        cmd.current_dir(dir);
    }
    cmd
}

/// Waits for the command's exit status; past `timeout`, kills its whole process group (what it
/// left behind goes with it) and reaps it, and the status is `None`.
///
/// The outcome is the exit status, never the end of the output: a background child may hold
/// the pipes open long after the command itself has exited.
async fn wait_or_kill(
    child: &mut tokio::process::Child,
    timeout: Duration,
) -> Option<std::io::Result<ExitStatus>> {
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => Some(status),
        Err(_) => {
            super::kill_group(pid);
            let _ = child.wait().await;
            None
        }
    }
}

/// Reads, for at most `DRAIN`, the output still in the pipes, then stops the readers.
async fn drain(mut readers: tokio::task::JoinSet<()>) {
    let _ = tokio::time::timeout(DRAIN, async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    readers.abort_all();
}

/// The outcome from the exit status (`None`: killed at its timeout), with the output's tail and
/// the reason it failed on a line of its own.
fn report(
    status: Option<std::io::Result<ExitStatus>>,
    text: String,
    timeout: Duration,
    duration: Duration,
) -> Report {
    let (outcome, why) = match status {
        Some(Ok(s)) if s.success() => {
            return Report {
                outcome: OperationOutcome::Completed,
                duration,
                tail: text,
            };
        }
        Some(Ok(s)) => (OperationOutcome::Failed, format!("[{s}]")),
        Some(Err(e)) => (
            OperationOutcome::Failed,
            format!("[waiting for it failed: {e}]"),
        ),
        None => (
            OperationOutcome::TimedOut,
            format!("[killed after {}]", humantime::format_duration(timeout)),
        ),
    };
    Report {
        outcome,
        duration,
        tail: if text.is_empty() {
            why
        } else {
            format!("{text}\n{why}")
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::domain::claim::OperationKind;
    use crate::domain::name::{BenchName, ClaimName, GroupName};

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
            started_at: chrono::DateTime::from_timestamp_millis(1_800_000_000_000).unwrap(),
            job: None,
            fence: None,
            driver: None,
            secret_env: Vec::new(),
        }
    }

    #[tokio::test]
    async fn exit_0_completes_and_the_slots_facts_are_in_the_environment() {
        let r = run(&request(
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

    // SPEC §4.2: a variable fleet reads a secret from (a BMC's `password_env`) is
    // not in the command's environment, even though the wrapper's own holds it. Played with a
    // variable the test process surely has (cargo sets it for every test run).
    #[tokio::test]
    async fn a_variable_fleet_reads_a_secret_from_never_reaches_the_command() {
        let secret = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it for tests");
        assert!(!secret.is_empty());
        let print = "echo \"[$CARGO_MANIFEST_DIR]\" \"$BMC\" \"$FLEET_SLOT\"";
        let mut r = request(&["sh", "-c", print], Duration::from_secs(10));
        r.secret_env = vec!["CARGO_MANIFEST_DIR".into()];
        let withheld = run(&r).await;
        assert_eq!(withheld.outcome, OperationOutcome::Completed);
        assert_eq!(withheld.tail, "[] 10.0.0.9 bench-01");
        // The control: without the name, the command inherits it.
        r.secret_env.clear();
        assert_eq!(run(&r).await.tail, format!("[{secret}] 10.0.0.9 bench-01"));
    }

    #[tokio::test]
    async fn a_non_zero_exit_fails_with_its_output() {
        let r = run(&request(
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
        let r = run(&request(&["/nonexistent/power"], Duration::from_secs(10))).await;
        assert_eq!(r.outcome, OperationOutcome::Failed);
        assert!(r.tail.contains("cannot start"), "{}", r.tail);
    }

    // A command that exits 0 and leaves a background child holding its output
    // (as `nohup` or `ssh -f` do) has succeeded; its outcome is its exit status, not the end of
    // its output. The old runner waited for end-of-file and recorded TimedOut.
    #[tokio::test]
    async fn exit_0_with_a_background_child_holding_the_output_completes() {
        let r = run(&request(
            &["sh", "-c", "echo powering on; (sleep 30) & exit 0"],
            Duration::from_secs(5),
        ))
        .await;
        assert_eq!(r.outcome, OperationOutcome::Completed, "{}", r.tail);
        assert_eq!(r.tail, "powering on");
        assert!(
            r.duration < Duration::from_secs(5),
            "it did not wait for the child: {:?}",
            r.duration
        );
    }

    // Past the timeout the whole process group is killed: the child it started as well.
    #[tokio::test]
    async fn past_the_timeout_the_whole_process_group_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        // Long enough for sh to start its child and write the pid on a loaded machine.
        let r = run(&request(&["sh", "-c", &script], Duration::from_secs(2))).await;
        assert_eq!(r.outcome, OperationOutcome::TimedOut);
        assert!(r.tail.contains("killed after 2s"), "{}", r.tail);
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

    // Output is read and discarded as it arrives; only the tail is kept.
    #[test]
    fn the_tail_holds_at_most_twice_its_size_whatever_is_pushed() {
        let mut t = Tail::default();
        for i in 0..10_000u32 {
            t.push(format!("line {i}\n").as_bytes());
            assert!(t.bytes.len() <= 2 * TAIL_BYTES + 16);
        }
        assert!(t.text().ends_with("line 9999"), "{}", t.text());
        assert!(t.text().len() <= TAIL_BYTES);
    }

    #[tokio::test]
    async fn a_command_printing_megabytes_keeps_only_its_tail() {
        let r = run(&request(
            &[
                "sh",
                "-c",
                "head -c 20000000 /dev/zero | tr '\\0' x; echo; echo the end",
            ],
            Duration::from_secs(30),
        ))
        .await;
        assert_eq!(r.outcome, OperationOutcome::Completed);
        assert!(r.tail.len() <= TAIL_BYTES, "{}", r.tail.len());
        assert!(
            r.tail.ends_with("x\nthe end"),
            "{:?}",
            &r.tail[r.tail.len() - 20..]
        );
    }

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let long = "x".repeat(5000) + "end";
        assert_eq!(tail(long.as_bytes()).len(), TAIL_BYTES);
        assert!(tail(long.as_bytes()).ends_with("end"));
    }
}
