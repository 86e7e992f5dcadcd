//! Lifecycle operations: how a slot's machine is powered on and off (SPEC §4.2).
//!
//! An operation is run by a `Runner`. The local runner (`Exec`) runs the group's command through
//! the operation wrapper, `fleet operation`: a process of its own (its own process group, never
//! killed when the controller stops or dies) that runs the command with the slot's facts in its
//! environment, kills the command's whole process group at the timeout, keeps only the tail of
//! its output, and reports the outcome to the store as well as to the controller that waits for
//! it. So a controller that stops, is killed or is replaced never takes a power operation down
//! with it, and its successor reads the operation's real outcome (SPEC §5.4). Exit 0 is
//! JobCompleted, any other exit JobFailed, past the timeout JobTimeout. Kubernetes Jobs plug in
//! behind the same trait (`kubernetes::jobs`); `Dispatch` sends each request to the runner of
//! its kind.

pub mod command;
pub mod wrapper;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::config::JobTemplate;
use crate::domain::claim::{OperationKind, OperationOutcome};
use crate::domain::name::{BenchName, ClaimName, GroupName};
use crate::power::Driver;

/// The most bytes of an operation's output kept for its claim's timeline.
pub const TAIL_BYTES: usize = 2048;

/// How much longer than an operation's own timeout the controller waits for the wrapper's
/// report; defined in the domain, where the configuration's check reads it too.
pub use crate::domain::operation::REPORT_SLACK;

/// The verb of the `fleet` binary that is the operation wrapper.
pub const WRAPPER_VERB: &str = "operation";

/// One operation to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// When the operation was recorded as started (server time): its identity in the slot's
    /// operation record, which its outcome must match.
    pub started_at: DateTime<Utc>,
    /// The Kubernetes Job to run instead of `command` (then empty). Absent from a request an
    /// older fleet wrote, which is a command.
    #[serde(default)]
    pub job: Option<JobTemplate>,
    /// The fencing token of the leadership that fired it (SPEC §5.1), recorded with the
    /// operation where it runs (a Job's annotations) so an operator can tell which leader did.
    #[serde(default)]
    pub fence: Option<String>,
    /// The slot's own power driver, run by the wrapper instead of a command (SPEC §4.10); then
    /// `command` is empty and `job` unset. It names where the BMC's password is, never the
    /// password, which the wrapper reads when it runs. Absent from an older fleet's request.
    #[serde(default)]
    pub driver: Option<Driver>,
    /// The names of the environment variables fleet reads a secret from (every `password_env`
    /// of the configuration, `Config::secret_env`), never their values: the command never gets
    /// them, and the wrapper only the one its own driver reads (SPEC §4.2). Absent from an older
    /// fleet's request.
    #[serde(default)]
    pub secret_env: Vec<String>,
}

impl Request {
    /// Whether the controller's variable `name` is kept from the operation's wrapper (SPEC
    /// §4.2): fleet's own `FLEET_` variables (`FLEET_REDIS_URL` may hold a password; the job
    /// brings the wrapper what it needs), but the log settings; and every variable fleet reads
    /// a secret from, but the one this operation's own driver reads.
    pub fn kept_from_wrapper(&self, name: &str) -> bool {
        let own = self.driver.as_ref().and_then(Driver::password);
        let fleets = name.starts_with(crate::domain::name::RESERVED_ENV_PREFIX)
            && name != "FLEET_LOG"
            && name != "FLEET_LOG_FORMAT";
        let secret = self.secret_env.iter().any(|s| s == name)
            && !matches!(own, Some(crate::power::SecretSource::Env(n)) if n == name);
        fleets || secret
    }

    /// Whether the wrapper's variable `name` is kept from the operation's command (SPEC §4.2):
    /// every `FLEET_` variable but those fleet sets for it, and every variable fleet reads a
    /// secret from, its own driver's too (the command is the user's, not the driver).
    pub fn kept_from_command(&self, name: &str) -> bool {
        name.starts_with(crate::domain::name::RESERVED_ENV_PREFIX)
            || self.secret_env.iter().any(|s| s == name)
    }

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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

/// Runs a request with a job through `jobs`, and one with a command or a driver through
/// `commands` (the wrapper runs both, SPEC §4.10), so the controller keeps one runner whatever
/// its groups' operations are (`fleet serve --kubernetes` gives it `Dispatch { commands: Exec,
/// jobs: kubernetes::jobs::JobRunner }`). Generic, because this layer knows no Kubernetes.
#[derive(Clone, Debug)]
pub struct Dispatch<C, J> {
    pub commands: C,
    pub jobs: J,
}

impl<C: Runner, J: Runner> Runner for Dispatch<C, J> {
    async fn run(&self, request: Request) -> Report {
        // A slot's driver wins over its group's Job: the driver is the slot's own word.
        if request.job.is_some() && request.driver.is_none() {
            self.jobs.run(request).await
        } else {
            self.commands.run(request).await
        }
    }
}

/// Where the wrapper reports an operation's outcome, so a controller that did not start it (a
/// successor, or the same one restarted) reads it from the store. Its `Debug` never shows the URL,
/// which may hold a password.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportTo {
    /// The Redis URL (with its credentials: the job travels on the wrapper's stdin, never in its
    /// arguments or environment).
    pub url: String,
    pub ca_file: Option<PathBuf>,
    /// The sentinels' own credentials, for a Sentinel URL whose sentinels do not take the
    /// primary's (travelling as the URL does).
    #[serde(default)]
    pub sentinel_auth: Option<fleet_redis::connect::SentinelAuth>,
    pub timeout: Duration,
    pub prefix: String,
}

impl std::fmt::Debug for ReportTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportTo")
            .field("url", &"<redacted>")
            .field("ca_file", &self.ca_file)
            .field("sentinel_auth", &self.sentinel_auth)
            .field("timeout", &self.timeout)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// What the controller hands the wrapper on its stdin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub request: Request,
    pub report_to: Option<ReportTo>,
    /// The one secret the request's own driver reads from a variable (`password_env`), when
    /// fleet took it out of its environment at start (`power::secrets`): the wrapper inherits
    /// none of it, so it travels here, as the Redis URL does. Absent from an older fleet's job.
    #[serde(default)]
    pub secret: Option<(String, fleet_redis::connect::Password)>,
}

impl Job {
    /// The job of `request`, reporting to `report_to`, with its driver's secret if fleet holds it.
    pub fn new(request: Request, report_to: Option<ReportTo>) -> Job {
        let secret = match request.driver.as_ref().and_then(Driver::password) {
            Some(crate::power::SecretSource::Env(name)) => crate::power::secrets::held_value(name)
                .map(|s| {
                    (
                        name.clone(),
                        fleet_redis::connect::Password::new(s.expose()),
                    )
                }),
            _ => None,
        };
        Job {
            request,
            report_to,
            secret,
        }
    }
}

/// Runs an operation's command through the operation wrapper, a process of its own.
#[derive(Clone, Debug)]
pub struct Exec {
    /// The `fleet` binary that serves as the wrapper.
    program: PathBuf,
    report_to: Option<ReportTo>,
}

impl Exec {
    /// Runs operations through `program` (the `fleet` binary). `fleet serve` passes
    /// `/proc/self/exe`, which still starts the running binary after a package upgrade replaced
    /// the file.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Exec {
            program: program.into(),
            report_to: None,
        }
    }

    /// The wrapper also reports each outcome to this store.
    pub fn reporting_to(mut self, report_to: ReportTo) -> Self {
        self.report_to = Some(report_to);
        self
    }

    fn failed(why: String, duration: Duration) -> Report {
        Report {
            outcome: OperationOutcome::Failed,
            duration,
            tail: why,
        }
    }
}

impl Runner for Exec {
    async fn run(&self, request: Request) -> Report {
        let start = std::time::Instant::now();
        // The wrapper runs commands and drivers only: a Job given here would run nothing and
        // say so less clearly than this.
        if request.job.is_some() && request.driver.is_none() {
            return Self::failed(
                "this operation is a Kubernetes Job, and this fleet serve runs commands only: \
                 run it with --kubernetes"
                    .to_owned(),
                start.elapsed(),
            );
        }
        let bound = request.timeout + REPORT_SLACK;
        let mut wrapper = self.wrapper(&request);
        let job = Job::new(request, self.report_to.clone());
        let bytes = match serde_json::to_vec(&job) {
            Ok(b) => b,
            Err(e) => return Self::failed(format!("encoding the operation: {e}"), start.elapsed()),
        };
        let mut child = match wrapper.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Self::failed(
                    format!(
                        "cannot start the operation wrapper {}: {e}",
                        self.program.display()
                    ),
                    start.elapsed(),
                );
            }
        };
        let pid = child.id();
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&bytes).await;
        }
        let stdout = child.stdout.take();
        match tokio::time::timeout(bound, first_report(stdout, &mut child)).await {
            Ok(Ok(report)) => {
                // Reaped when it is done reporting, so it never lingers as a zombie.
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
                report
            }
            Ok(Err(status)) => Self::failed(
                format!(
                    "the operation wrapper gave no report ({})",
                    status.map_or_else(|e| e.to_string(), |s| s.to_string())
                ),
                start.elapsed(),
            ),
            Err(_) => {
                kill_group(pid);
                Report {
                    outcome: OperationOutcome::TimedOut,
                    duration: start.elapsed(),
                    tail: format!(
                        "the operation wrapper did not report within {}",
                        humantime::format_duration(bound)
                    ),
                }
            }
        }
    }
}

impl Exec {
    /// The wrapper of `request`, ready to spawn: its own process group, and no kill on drop, so
    /// the operation outlives the controller. It keeps the log settings and none of the
    /// controller's other `FLEET_` variables (FLEET_REDIS_URL may hold a password: the job
    /// brings the wrapper what it needs), and none of the variables fleet reads a secret from
    /// but its own driver's (`Request::kept_from_wrapper`, SPEC §4.2).
    fn wrapper(&self, request: &Request) -> tokio::process::Command {
        let mut wrapper = tokio::process::Command::new(&self.program);
        for (name, _) in std::env::vars_os() {
            if request.kept_from_wrapper(&name.to_string_lossy()) {
                wrapper.env_remove(name);
            }
        }
        wrapper
            .arg(WRAPPER_VERB)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        wrapper
    }
}

/// The wrapper's report: its first line, written as soon as the command ended; the wrapper then
/// reports to the store, which this process need not wait for. Without a report, the wrapper's
/// exit status says why.
async fn first_report(
    stdout: Option<tokio::process::ChildStdout>,
    child: &mut tokio::process::Child,
) -> Result<Report, std::io::Result<std::process::ExitStatus>> {
    let mut line = Vec::new();
    if let Some(o) = stdout {
        let mut o = tokio::io::BufReader::new(o.take(1 << 20));
        let _ = o.read_until(b'\n', &mut line).await;
    }
    match serde_json::from_slice::<Report>(&line) {
        Ok(report) => Ok(report),
        Err(_) => Err(child.wait().await),
    }
}

/// Kills the process group that `pid` leads, with everything in it. A stale id at worst fails
/// with ESRCH.
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::config::JobTemplate;

    fn request(job: Option<JobTemplate>) -> Request {
        Request {
            kind: OperationKind::Startup,
            slot: BenchName::parse("bench-01").unwrap(),
            group: GroupName::parse("pool-a").unwrap(),
            claim: None,
            attempt: 1,
            provider_id: "fleet://bench-01".into(),
            command: vec!["on".into()],
            env: BTreeMap::new(),
            dir: None,
            timeout: Duration::from_secs(5),
            controller: "ctl".into(),
            started_at: DateTime::from_timestamp_millis(1_800_000_000_000).unwrap(),
            job,
            fence: None,
            driver: None,
            secret_env: Vec::new(),
        }
    }

    fn template() -> JobTemplate {
        JobTemplate {
            image: "power:1".into(),
            command: vec![],
            args: vec![],
            service_account_name: None,
            node_selector: BTreeMap::new(),
            tolerations: vec![],
            ttl_after_finished: Duration::from_secs(60),
        }
    }

    /// A runner that remembers what it was given and answers with its own name.
    #[derive(Default)]
    struct Named {
        name: &'static str,
        given: Mutex<Vec<Request>>,
    }

    impl Runner for Named {
        async fn run(&self, request: Request) -> Report {
            self.given.lock().unwrap().push(request);
            Report {
                outcome: OperationOutcome::Completed,
                duration: Duration::ZERO,
                tail: self.name.to_owned(),
            }
        }
    }

    #[tokio::test]
    async fn dispatch_sends_a_job_to_the_job_runner_and_a_command_to_the_command_runner() {
        let d = Dispatch {
            commands: Named {
                name: "commands",
                ..Named::default()
            },
            jobs: Named {
                name: "jobs",
                ..Named::default()
            },
        };
        assert_eq!(d.run(request(None)).await.tail, "commands");
        assert_eq!(d.run(request(Some(template()))).await.tail, "jobs");
        assert_eq!(d.commands.given.lock().unwrap().as_slice(), [request(None)]);
        assert_eq!(
            d.jobs.given.lock().unwrap().as_slice(),
            [request(Some(template()))]
        );
    }

    // A slot's driver runs through the wrapper even when its group's operation is a Job
    // (SPEC §4.10): the driver is the slot's own word.
    #[tokio::test]
    async fn dispatch_sends_a_request_with_a_driver_to_the_wrapper_whatever_its_job() {
        let d = Dispatch {
            commands: Named {
                name: "commands",
                ..Named::default()
            },
            jobs: Named {
                name: "jobs",
                ..Named::default()
            },
        };
        let driver = crate::power::Driver {
            kind: crate::power::DriverKind::Wol(crate::power::wol::config::WolDriver {
                mac: "52:54:00:12:34:56".parse().unwrap(),
                broadcast: "10.0.0.255:9".parse().unwrap(),
            }),
            off: crate::power::OffBy::Agent,
        };
        let with = |job| Request {
            driver: Some(driver.clone()),
            ..request(job)
        };
        assert_eq!(d.run(with(None)).await.tail, "commands");
        assert_eq!(d.run(with(Some(template()))).await.tail, "commands");
        assert!(d.jobs.given.lock().unwrap().is_empty());
        // It travels to the wrapper whole, and reads back the same.
        let back: Request =
            serde_json::from_str(&serde_json::to_string(&with(None)).unwrap()).unwrap();
        assert_eq!(back, with(None));
    }

    #[tokio::test]
    async fn the_wrapper_runner_refuses_a_job_saying_what_to_do() {
        let r = Exec::new("/nonexistent/fleet")
            .run(request(Some(template())))
            .await;
        assert_eq!(r.outcome, OperationOutcome::Failed);
        assert!(r.tail.contains("run it with --kubernetes"), "{}", r.tail);
    }

    // SPEC §4.2: every variable fleet reads a secret from is kept from the command,
    // and from the wrapper but for the one its own driver reads; fleet's own variables are kept
    // from both, the wrapper's log settings excepted; anything else passes.
    #[test]
    fn the_secrets_fleet_read_reach_no_command_and_only_their_own_drivers_wrapper() {
        let ipmi = |password| crate::power::Driver {
            kind: crate::power::DriverKind::Ipmi(crate::power::ipmi::config::IpmiDriver {
                host: "10.0.0.9".into(),
                port: 623,
                username: "admin".into(),
                password,
                cipher_suite: None,
            }),
            off: crate::power::OffBy::Driver,
        };
        let command = Request {
            secret_env: vec!["BMC_A".into(), "BMC_B".into()],
            ..request(None)
        };
        let driven = Request {
            driver: Some(ipmi(crate::power::SecretSource::Env("BMC_A".into()))),
            command: Vec::new(),
            ..command.clone()
        };
        let from_file = Request {
            driver: Some(ipmi(crate::power::SecretSource::File(
                "/etc/fleet/bmc".into(),
            ))),
            ..driven.clone()
        };
        // (variable, kept from a command's wrapper, from the BMC_A driver's wrapper, from a
        // file-password driver's wrapper, from the command)
        for (name, wrapper, own, file, cmd) in [
            ("BMC_A", true, false, true, true),
            ("BMC_B", true, true, true, true),
            ("FLEET_REDIS_URL", true, true, true, true),
            ("FLEET_SENTINEL_PASSWORD_FILE", true, true, true, true),
            ("FLEET_UI_TOKEN_FILE", true, true, true, true),
            ("FLEET_LOG", false, false, false, true),
            ("FLEET_LOG_FORMAT", false, false, false, true),
            ("PATH", false, false, false, false),
            ("HOME", false, false, false, false),
            ("BMC_A_OTHER", false, false, false, false),
        ] {
            assert_eq!(
                command.kept_from_wrapper(name),
                wrapper,
                "{name}: command's wrapper"
            );
            assert_eq!(
                driven.kept_from_wrapper(name),
                own,
                "{name}: driver's wrapper"
            );
            assert_eq!(
                from_file.kept_from_wrapper(name),
                file,
                "{name}: file driver"
            );
            for r in [&command, &driven, &from_file] {
                assert_eq!(r.kept_from_command(name), cmd, "{name}: command");
            }
        }
        // The names travel to the wrapper with the job, and a request without them (an older
        // fleet's) reads as one that withholds none.
        let back: Request =
            serde_json::from_str(&serde_json::to_string(&command).unwrap()).unwrap();
        assert_eq!(back.secret_env, ["BMC_A", "BMC_B"]);
        let mut old = serde_json::to_value(&command).unwrap();
        old.as_object_mut().unwrap().remove("secret_env");
        let back: Request = serde_json::from_value(old).unwrap();
        assert!(back.secret_env.is_empty());
    }

    // A request an older fleet wrote (no job, no fence, no driver) still reads, as a command.
    #[test]
    fn a_request_without_job_or_fence_reads_as_a_command() {
        let mut value = serde_json::to_value(request(None)).unwrap();
        let object = value.as_object_mut().unwrap();
        object.remove("job");
        object.remove("fence");
        object.remove("driver");
        let back: Request = serde_json::from_value(value).unwrap();
        assert_eq!(back, request(None));
        // A template without the fields a later fleet added takes their defaults.
        let mut with_job = serde_json::to_value(request(Some(template()))).unwrap();
        let job = with_job["job"].as_object_mut().unwrap();
        job.retain(|k, _| k == "image");
        let back: Request = serde_json::from_value(with_job).unwrap();
        assert_eq!(
            back.job.map(|j| j.ttl_after_finished),
            Some(crate::domain::claim::Timings::default().ttl_after_finished)
        );
    }
}
