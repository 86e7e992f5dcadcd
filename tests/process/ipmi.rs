//! The IPMI driver (SPEC §4.10) against a real BMC: OpenIPMI's `ipmi_sim` on a loopback UDP
//! port, one per test, reached by the real `ipmitool` over RMCP+ (LAN+). The simulated machine
//! is the test's own `chassis_control` script: it answers `get power` from a state file and
//! writes `set power` / `set shutdown` into it, and each test decides how the machine behaves
//! (a soft off that lands later, one that never lands, a machine that never turns on).
//!
//! ipmitool runs through a wrapper that records what the process received (its argv, as the
//! kernel shows it in /proc, its environment, the password file's mode) before it execs the real
//! one, so the password's absence is checked on what ipmitool got. What a simulator cannot do (a
//! hung ipmitool, the pacing of concurrent calls, a BMC refusing the soft off) is shown with a
//! fake ipmitool that writes what it did.
//!
//! ipmi_sim offers cipher suite 3 and not 17, so the tests configure suite 3, except the two that
//! show 17 refused (configured: a precise error; the default: the logged fallback to 3).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet::power::ipmi::{Ipmi, IpmiOptions, IpmiTarget};
use fleet::power::{Audit, Bmc, Intent, PowerError, PowerState, SOFT_SHARE, Secret};

const USER: &str = "admin";
const PASSWORD: &str = "pw-Zq7-never-shown";

/// Bounds every await: a hang fails the test instead of blocking it.
async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Polls `done` every 10 ms until it holds, for at most `limit`.
fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A program on PATH, or a failure that says how to install it (never a skip).
fn installed(program: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{program} is not installed: run scripts/ensure-deps.sh (Debian: apt-get install \
                 ipmitool openipmi)"
            )
        })
}

fn script(path: &Path, text: &str) {
    let mut file = std::fs::File::create(path).expect("create script");
    file.write_all(text.as_bytes()).expect("write script");
    drop(file);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A UDP port on loopback that nothing listens on (bound, read, released).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

/// Whether a UDP socket is bound to 127.0.0.1:`port` (ipmi_sim listening).
fn listening(port: u16) -> bool {
    let local = format!("0100007F:{port:04X} ");
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| t.contains(&local))
}

/// How the simulated machine answers a soft off and a power on.
#[derive(Clone, Copy)]
enum Shutdown {
    /// Off at once.
    Lands,
    /// Off 300 ms later, in the background (ipmi_sim runs the script through popen and waits
    /// for its output to end).
    LandsLater,
    /// Never: the operating system ignores ACPI.
    Ignored,
}

/// One `ipmi_sim` with its own directory, port, users and machine; killed on drop.
struct Sim {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl Sim {
    fn start(on: bool, shutdown: Shutdown) -> Sim {
        Sim::start_with(on, shutdown, true)
    }

    fn start_with(on: bool, shutdown: Shutdown, turns_on: bool) -> Sim {
        let ipmi_sim = installed("ipmi_sim");
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path().display().to_string();
        let port = free_udp_port();
        std::fs::write(dir.path().join("power"), if on { "1\n" } else { "0\n" }).expect("power");
        std::fs::write(dir.path().join("calls"), "").expect("calls");
        let soft = match shutdown {
            Shutdown::Lands => format!("echo 0 > {d}/power"),
            Shutdown::LandsLater => {
                format!("( sleep 0.3; echo 0 > {d}/power ) </dev/null >/dev/null 2>&1 &")
            }
            Shutdown::Ignored => ":".to_owned(),
        };
        let set_power = if turns_on {
            format!("echo \"$4\" > {d}/power")
        } else {
            format!("[ \"$4\" = 1 ] || echo \"$4\" > {d}/power")
        };
        script(
            &dir.path().join("chassis"),
            &format!(
                "#!/bin/sh\n# ipmi_sim's chassis_control: $1 is the MC, then get|set NAME [VALUE].\n\
                 echo \"$2 $3 $4\" >> {d}/calls\n\
                 case \"$2 $3\" in\n\
                 'get power') echo \"power:$(cat {d}/power)\" ;;\n\
                 'set power') {set_power} ;;\n\
                 'set shutdown') {soft} ;;\n\
                 esac\n"
            ),
        );
        std::fs::write(
            dir.path().join("lan.conf"),
            format!(
                "name \"fleet\"\nset_working_mc 0x20\n  startlan 1\n    addr 127.0.0.1 {port}\n\
                 \x20   priv_limit admin\n    guid a123456789abcdefa123456789abcdef\n  endlan\n\
                 \x20 chassis_control \"{d}/chassis 0x20\"\n\
                 \x20 user 2 true \"{USER}\" \"{PASSWORD}\" admin 10 none md2 md5 straight\n"
            ),
        )
        .expect("lan.conf");
        // `mc_enable` starts the MC's LAN interface: without it ipmi_sim binds no socket.
        std::fs::write(
            dir.path().join("sim.emu"),
            "mc_setbmc 0x20\n\
             mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n\
             mc_enable 0x20\n",
        )
        .expect("sim.emu");
        std::fs::create_dir(dir.path().join("state")).expect("state dir");
        let log = std::fs::File::create(dir.path().join("sim.log")).expect("sim.log");
        let child = Command::new(ipmi_sim)
            .current_dir(dir.path())
            .args(["-c", "lan.conf", "-f", "sim.emu", "-s", "state", "-n"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start ipmi_sim");
        let sim = Sim { dir, port, child };
        sim.wrapper();
        sim.ready();
        sim
    }

    /// Waits, with a bound, for the socket and then for a `chassis power status` that answers.
    fn ready(&self) {
        wait_for("ipmi_sim's UDP socket", Duration::from_secs(10), || {
            listening(self.port)
        });
        let status = || {
            Command::new(installed("ipmitool"))
                .args([
                    "-I",
                    "lanplus",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                ])
                .args(["-U", USER, "-f"])
                .arg(self.path("sim-password"))
                .args(["-C", "3", "-R", "1", "chassis", "power", "status"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        std::fs::write(self.path("sim-password"), PASSWORD).expect("password file");
        wait_for("ipmi_sim answering", Duration::from_secs(10), status);
        std::fs::write(self.path("calls"), "").expect("calls");
    }

    /// The ipmitool wrapper: writes what the process got, then becomes the real ipmitool.
    fn wrapper(&self) {
        let d = self.dir.path().display();
        let real = installed("ipmitool");
        script(
            &self.path("ipmitool"),
            &format!(
                "#!/bin/sh\n\
                 printf 'cmdline %s\\n' \"$(tr '\\000' ' ' < /proc/$$/cmdline)\" >> {d}/ipmitool.log\n\
                 prev=\n\
                 for a in \"$@\"; do\n\
                 \x20 [ \"$prev\" = -f ] && printf 'passfile %s %s\\n' \"$a\" \"$(stat -c %a \"$a\")\" >> {d}/ipmitool.log\n\
                 \x20 prev=$a\n\
                 done\n\
                 printf 'env %s\\n' \"$(env | tr '\\n' ' ')\" >> {d}/ipmitool.log\n\
                 exec {} \"$@\"\n",
                real.display()
            ),
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// The machine's power as its state file holds it.
    fn power(&self) -> String {
        self.text("power").trim().to_owned()
    }

    fn set_power(&self, on: bool) {
        std::fs::write(self.path("power"), if on { "1\n" } else { "0\n" }).expect("power");
    }

    /// The `set` commands ipmi_sim passed to the machine, in order.
    fn sets(&self) -> Vec<String> {
        self.text("calls")
            .lines()
            .filter(|l| l.starts_with("set "))
            .map(|l| l.trim().to_owned())
            .collect()
    }

    /// What each ipmitool process received, one `cmdline` line per call.
    fn ipmitool_calls(&self) -> Vec<String> {
        self.text("ipmitool.log")
            .lines()
            .filter_map(|l| l.strip_prefix("cmdline "))
            .map(str::to_owned)
            .collect()
    }

    fn target(&self) -> IpmiTarget {
        IpmiTarget {
            host: "127.0.0.1".into(),
            port: self.port,
            username: USER.into(),
            password: Secret::new(PASSWORD),
            cipher_suite: Some(3),
        }
    }

    fn ipmi(&self, target: IpmiTarget) -> Ipmi {
        Ipmi::new(target, options(self.path("ipmitool"))).expect("a valid target")
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Short times for tests: ipmi_sim answers in milliseconds.
fn options(ipmitool: PathBuf) -> IpmiOptions {
    IpmiOptions {
        ipmitool,
        gap: Duration::from_millis(100),
        call_timeout: Duration::from_secs(5),
        retries: 1,
    }
}

fn values(audit: &Audit) -> Vec<&str> {
    audit.sent.iter().map(|s| s.value.as_str()).collect()
}

fn answers(audit: &Audit) -> Vec<&str> {
    audit.sent.iter().map(|s| s.answer.as_str()).collect()
}

#[tokio::test]
async fn power_on_turns_the_machine_on_and_the_audit_verifies_it() {
    let sim = Sim::start(false, Shutdown::Lands);
    let ipmi = sim.ipmi(sim.target());
    let audit = bounded("on", ipmi.power(Intent::On, Duration::from_secs(10)))
        .await
        .expect("powered on");
    assert_eq!(sim.power(), "1");
    assert_eq!(sim.sets(), ["set power 1"]);
    assert_eq!(audit.driver, "ipmi");
    assert_eq!(audit.verified, Some(PowerState::On));
    assert_eq!((audit.attempts, audit.escalated), (1, false));
    assert_eq!(
        values(&audit),
        [
            "chassis power status (cipher suite 3)",
            "chassis power on (cipher suite 3)",
            "chassis power status (cipher suite 3)",
        ]
    );
    assert_eq!(
        answers(&audit),
        [
            "Chassis Power is off",
            "Chassis Power Control: Up/On",
            "Chassis Power is on"
        ]
    );
    assert!(
        audit.render().contains("verified on, no escalation"),
        "{}",
        audit.render()
    );
}

#[tokio::test]
async fn a_machine_already_on_is_sent_nothing() {
    let sim = Sim::start(true, Shutdown::Lands);
    let ipmi = sim.ipmi(sim.target());
    let audit = bounded("on", ipmi.power(Intent::On, Duration::from_secs(10)))
        .await
        .expect("already on");
    assert_eq!(sim.sets(), Vec::<String>::new());
    assert_eq!((audit.attempts, audit.verified), (0, Some(PowerState::On)));
    assert_eq!(values(&audit), ["chassis power status (cipher suite 3)"]);
}

#[tokio::test]
async fn a_soft_off_that_lands_is_not_escalated() {
    let sim = Sim::start(true, Shutdown::LandsLater);
    let ipmi = sim.ipmi(sim.target());
    let audit = bounded("off", ipmi.power(Intent::Off, Duration::from_secs(10)))
        .await
        .expect("powered off");
    assert_eq!(sim.power(), "0");
    assert_eq!(sim.sets(), ["set shutdown 1"]);
    assert_eq!(audit.verified, Some(PowerState::Off));
    assert_eq!((audit.attempts, audit.escalated), (1, false));
    assert_eq!(values(&audit)[1], "chassis power soft (cipher suite 3)");
    assert_eq!(answers(&audit)[1], "Chassis Power Control: Soft");
    assert_eq!(answers(&audit).last(), Some(&"Chassis Power is off"));
}

#[tokio::test]
async fn a_soft_off_that_does_not_land_is_followed_by_a_hard_off_recorded_as_escalated() {
    let sim = Sim::start(true, Shutdown::Ignored);
    let ipmi = sim.ipmi(sim.target());
    let timeout = Duration::from_secs(3);
    let audit = bounded("off", ipmi.power(Intent::Off, timeout))
        .await
        .expect("powered off");
    assert_eq!(sim.power(), "0");
    assert_eq!(sim.sets(), ["set shutdown 1", "set power 0"]);
    assert_eq!(audit.verified, Some(PowerState::Off));
    assert_eq!((audit.attempts, audit.escalated), (2, true));
    let sent = values(&audit);
    let soft = sent
        .iter()
        .position(|v| v.starts_with("chassis power soft"));
    let hard = sent.iter().position(|v| v.starts_with("chassis power off"));
    assert!(soft < hard && soft.is_some(), "{sent:?}");
    // The hard off waited for the soft one's share of the time, and no longer.
    let hard_at = audit.sent[hard.expect("a hard off")].at_ms;
    let share = timeout.mul_f64(SOFT_SHARE).as_millis() as u64;
    assert!(
        (share..share + 2_000).contains(&hard_at),
        "hard off at {hard_at} ms, soft share {share} ms"
    );
    assert!(
        audit.render().contains("escalated soft to hard"),
        "{}",
        audit.render()
    );
}

#[tokio::test]
async fn state_reads_what_the_chassis_says() {
    let sim = Sim::start(true, Shutdown::Lands);
    let ipmi = sim.ipmi(sim.target());
    assert_eq!(bounded("state", ipmi.state()).await, Ok(PowerState::On));
    sim.set_power(false);
    assert_eq!(bounded("state", ipmi.state()).await, Ok(PowerState::Off));
    assert_eq!(sim.sets(), Vec::<String>::new(), "a reading sends nothing");
}

#[tokio::test]
async fn a_machine_that_never_turns_on_is_not_reached_by_the_timeout() {
    let sim = Sim::start_with(false, Shutdown::Lands, false);
    let ipmi = sim.ipmi(sim.target());
    let timeout = Duration::from_secs(1);
    let start = Instant::now();
    let got = bounded("on", ipmi.power(Intent::On, timeout)).await;
    assert_eq!(
        got,
        Err(PowerError::NotReached {
            bmc: format!("ipmi 127.0.0.1:{}", sim.port),
            intent: Intent::On,
            waited: timeout,
        })
    );
    assert!(start.elapsed() >= timeout, "{:?}", start.elapsed());
    assert!(start.elapsed() < timeout + Duration::from_secs(3));
    assert_eq!(sim.sets(), ["set power 1"], "sent once, never re-sent");
}

#[tokio::test]
async fn a_wrong_password_or_user_is_refused_as_auth_after_exactly_one_call() {
    let sim = Sim::start(false, Shutdown::Lands);
    for (target, words) in [
        (
            IpmiTarget {
                password: Secret::new("wrong-password"),
                ..sim.target()
            },
            "RAKP 2 HMAC is invalid",
        ),
        (
            IpmiTarget {
                username: "nobody".into(),
                ..sim.target()
            },
            "unauthorized name",
        ),
    ] {
        let before = sim.ipmitool_calls().len();
        let ipmi = sim.ipmi(target);
        let got = bounded("on", ipmi.power(Intent::On, Duration::from_secs(10))).await;
        match &got {
            Err(PowerError::Auth { bmc, detail }) => {
                assert_eq!(bmc, &format!("ipmi 127.0.0.1:{}", sim.port));
                assert!(detail.contains(words), "{detail}");
            }
            other => panic!("want Auth with {words:?}, got {other:?}"),
        }
        let message = got.expect_err("refused").to_string();
        assert!(
            message.contains("check the username and the password file"),
            "{message}"
        );
        assert_eq!(sim.ipmitool_calls().len(), before + 1, "never retried");
    }
    assert_eq!(sim.sets(), Vec::<String>::new());
    assert_eq!(sim.power(), "0");
}

#[tokio::test]
async fn suite_17_configured_against_a_bmc_without_it_is_a_precise_error() {
    let sim = Sim::start(false, Shutdown::Lands);
    let ipmi = sim.ipmi(IpmiTarget {
        cipher_suite: Some(17),
        ..sim.target()
    });
    let got = bounded("state", ipmi.state()).await;
    let Err(PowerError::Protocol { detail, .. }) = &got else {
        panic!("want Protocol, got {got:?}");
    };
    assert!(
        detail.starts_with("the BMC refused cipher suite 17 (")
            && detail.contains("invalid authentication algorithm")
            && detail.contains("configure cipher_suite: 3"),
        "{detail}"
    );
    assert_eq!(
        sim.ipmitool_calls().len(),
        1,
        "no fallback when 17 is configured"
    );
}

#[tokio::test]
async fn without_a_configured_suite_a_refused_17_falls_back_to_3_and_the_audit_says_so() {
    let sim = Sim::start(false, Shutdown::Lands);
    let ipmi = sim.ipmi(IpmiTarget {
        cipher_suite: None,
        ..sim.target()
    });
    let audit = bounded("on", ipmi.power(Intent::On, Duration::from_secs(10)))
        .await
        .expect("on through the fallback");
    assert_eq!(audit.verified, Some(PowerState::On));
    assert_eq!(
        values(&audit),
        [
            "chassis power status (cipher suite 17)",
            "chassis power status (cipher suite 3, a fallback)",
            "chassis power on (cipher suite 3, a fallback)",
            "chassis power status (cipher suite 3, a fallback)",
        ]
    );
    let refused = answers(&audit)[0];
    assert!(
        refused.contains("invalid authentication algorithm")
            && refused.ends_with("falling back to cipher suite 3"),
        "{refused}"
    );
    // The BMC's turn remembers: another driver value for it goes to 3 at once.
    let again = sim.ipmi(IpmiTarget {
        cipher_suite: None,
        ..sim.target()
    });
    assert_eq!(bounded("state", again.state()).await, Ok(PowerState::On));
    let calls = sim.ipmitool_calls();
    assert!(calls[0].contains(" -C 17 "), "{}", calls[0]);
    let last = calls.last().expect("calls");
    assert!(last.contains(" -C 3 "), "{last}");
    assert_eq!(calls.len(), 5);
}

#[tokio::test]
async fn an_unreachable_bmc_is_unreachable_once_for_a_reading_and_at_the_timeout_for_an_action() {
    let sim = Sim::start(false, Shutdown::Lands);
    let closed = free_udp_port();
    let ipmi = sim.ipmi(IpmiTarget {
        port: closed,
        ..sim.target()
    });
    let unreachable = |got: Result<(), PowerError>| {
        match &got {
            Err(PowerError::Unreachable { bmc, detail }) => {
                assert_eq!(bmc, &format!("ipmi 127.0.0.1:{closed}"));
                assert!(
                    detail.contains("Get Channel Authentication Capabilities"),
                    "{detail}"
                );
            }
            other => panic!("want Unreachable, got {other:?}"),
        }
        let message = got.expect_err("unreachable").to_string();
        assert!(
            message.contains("check its address, port and network"),
            "{message}"
        );
    };
    // A reading asks once: ipmitool gives up by itself (-R 1: about 2 s), before the hard limit.
    let start = Instant::now();
    unreachable(bounded("state", ipmi.state()).await.map(|_| ()));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(sim.ipmitool_calls().len(), 1);
    // An action asks again until its timeout, and fails with the BMC's silence after it.
    let timeout = Duration::from_secs(3);
    let start = Instant::now();
    let got = bounded("on", ipmi.power(Intent::On, timeout)).await;
    let elapsed = start.elapsed();
    unreachable(got.map(|_| ()));
    assert!(
        (timeout..timeout + Duration::from_secs(5)).contains(&elapsed),
        "{elapsed:?}"
    );
    assert!(
        sim.ipmitool_calls().len() >= 3,
        "{:?}",
        sim.ipmitool_calls()
    );
    assert_eq!(sim.sets(), Vec::<String>::new());
}

#[tokio::test]
async fn the_password_is_in_no_argument_no_environment_and_no_file_after_the_call() {
    let sim = Sim::start(false, Shutdown::Ignored);
    let ipmi = sim.ipmi(sim.target());
    bounded("on", ipmi.power(Intent::On, Duration::from_secs(10)))
        .await
        .expect("on");
    let off = bounded("off", ipmi.power(Intent::Off, Duration::from_millis(600)))
        .await
        .expect("off, escalated");
    assert!(off.escalated);
    let log = sim.text("ipmitool.log");
    assert!(
        !log.contains(PASSWORD),
        "the password reached ipmitool:\n{log}"
    );
    let calls = sim.ipmitool_calls();
    assert!(calls.len() >= 6, "{calls:?}");
    let files: Vec<(&str, &str)> = log
        .lines()
        .filter_map(|l| l.strip_prefix("passfile "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert_eq!(files.len(), calls.len(), "every call had a password file");
    for (path, mode) in &files {
        assert_eq!(*mode, "600", "{path}");
        assert!(!Path::new(path).exists(), "{path} outlived its call");
    }
    for env in log.lines().filter_map(|l| l.strip_prefix("env ")) {
        assert!(env.contains("LC_ALL=C"), "{env}");
        assert!(!env.contains("CARGO"), "fleet's environment leaked: {env}");
    }
    for (call, (path, _)) in calls.iter().zip(&files) {
        assert!(call.contains(&format!(" -f {path} ")), "{call}");
    }
    // Nor in the audit, nor in an error.
    assert!(!format!("{off:?}").contains(PASSWORD));
}

/// A fake ipmitool: `body` runs with `$action` (on, soft, off, status) and `$d`, the test's
/// directory, after it has written `start <ns>` and the password file's path.
fn fake(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("ipmitool");
    script(
        &path,
        &format!(
            "#!/bin/sh\nd={}\nfor a in \"$@\"; do action=$a; done\nprev=\n\
             for a in \"$@\"; do [ \"$prev\" = -f ] && echo \"passfile $a\" >> $d/log; prev=$a; done\n\
             echo \"start $(date +%s%N) $action\" >> $d/log\n{body}\n",
            dir.display()
        ),
    );
    path
}

fn fake_target(host: &str) -> IpmiTarget {
    IpmiTarget {
        cipher_suite: Some(3),
        ..IpmiTarget::new(host, USER, Secret::new(PASSWORD))
    }
}

/// Whether process `pid` is gone (or a zombie, which runs nothing).
fn dead(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn a_hung_ipmitool_is_killed_with_its_process_group_at_the_call_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let program = fake(
        dir.path(),
        "sleep 1000 &\necho \"pids $$ $!\" >> $d/log\nwait",
    );
    let ipmi = Ipmi::new(
        fake_target("hung.invalid"),
        IpmiOptions {
            call_timeout: Duration::from_millis(500),
            ..options(program)
        },
    )
    .expect("target");
    let start = Instant::now();
    let got = bounded("state", ipmi.state()).await;
    let elapsed = start.elapsed();
    let Err(PowerError::Unreachable { detail, .. }) = &got else {
        panic!("want Unreachable, got {got:?}");
    };
    assert_eq!(
        detail,
        "no answer to chassis power status within 500ms with cipher suite 3; ipmitool was killed"
    );
    assert!(
        (Duration::from_millis(500)..Duration::from_secs(3)).contains(&elapsed),
        "{elapsed:?}"
    );
    let log = std::fs::read_to_string(dir.path().join("log")).expect("log");
    let pids: Vec<&str> = log
        .lines()
        .find_map(|l| l.strip_prefix("pids "))
        .expect("the fake ran")
        .split(' ')
        .collect();
    for pid in &pids {
        wait_for(
            &format!("process {pid} to die"),
            Duration::from_secs(5),
            || dead(pid),
        );
    }
    let passfile = log
        .lines()
        .find_map(|l| l.strip_prefix("passfile "))
        .expect("a password file");
    assert!(
        !Path::new(passfile).exists(),
        "{passfile} outlived the kill"
    );
}

#[tokio::test]
async fn calls_to_one_bmc_never_overlap_and_keep_the_gap_across_driver_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let program = fake(
        dir.path(),
        "sleep 0.05\necho \"end $(date +%s%N)\" >> $d/log\necho 'Chassis Power is on'",
    );
    let gap = Duration::from_millis(300);
    let make = || {
        Ipmi::new(
            fake_target("paced.invalid"),
            IpmiOptions {
                gap,
                ..options(program.clone())
            },
        )
        .expect("target")
    };
    let (a, b) = (make(), make());
    let (ra, rb) = bounded("reads", async {
        tokio::join!(
            async {
                let mut got = Vec::new();
                for _ in 0..3 {
                    got.push(a.state().await);
                }
                got
            },
            async {
                let mut got = Vec::new();
                for _ in 0..3 {
                    got.push(b.state().await);
                }
                got
            }
        )
    })
    .await;
    assert!(
        ra.iter().chain(&rb).all(|r| r == &Ok(PowerState::On)),
        "{ra:?} {rb:?}"
    );
    let log = std::fs::read_to_string(dir.path().join("log")).expect("log");
    let stamp = |prefix: &str| -> Vec<u128> {
        log.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let (starts, ends) = (stamp("start "), stamp("end "));
    assert_eq!((starts.len(), ends.len()), (6, 6));
    for i in 1..6 {
        let apart = starts[i].saturating_sub(ends[i - 1]);
        assert!(
            starts[i] > ends[i - 1] && apart >= gap.as_nanos(),
            "call {i} started {apart} ns after call {} ended",
            i - 1
        );
    }
}

#[tokio::test]
async fn a_bmc_that_refuses_the_soft_off_is_sent_the_hard_one_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("power"), "1").expect("power");
    let program = fake(
        dir.path(),
        "case $action in\n\
         status) [ \"$(cat $d/power)\" = 1 ] && echo 'Chassis Power is on' || echo 'Chassis Power is off' ;;\n\
         soft) echo 'Set Chassis Power Control to Soft failed: Invalid command' >&2; exit 1 ;;\n\
         off) echo 0 > $d/power; echo 'Chassis Power Control: Down/Off' ;;\n\
         esac",
    );
    let ipmi = Ipmi::new(fake_target("nosoft.invalid"), options(program)).expect("target");
    let timeout = Duration::from_secs(30);
    let audit = bounded("off", ipmi.power(Intent::Off, timeout))
        .await
        .expect("off");
    assert_eq!((audit.escalated, audit.attempts), (true, 2));
    assert_eq!(audit.verified, Some(PowerState::Off));
    assert!(
        audit.duration < Duration::from_secs(5),
        "{:?}",
        audit.duration
    );
    assert!(
        answers(&audit)[1].contains("Set Chassis Power Control to Soft failed: Invalid command"),
        "{:?}",
        answers(&audit)
    );
}

#[tokio::test]
async fn without_ipmitool_the_error_says_to_install_it() {
    let ipmi = Ipmi::new(
        fake_target("absent.invalid"),
        options(PathBuf::from("/nonexistent/ipmitool")),
    )
    .expect("target");
    let got = bounded("state", ipmi.state()).await;
    let message = got.expect_err("no ipmitool").to_string();
    assert_eq!(
        message,
        "ipmi absent.invalid:623: ipmitool is not installed (/nonexistent/ipmitool was not \
         found): install it (Debian and Ubuntu: apt-get install ipmitool; Fedora and RHEL: dnf \
         install ipmitool)"
    );
}

#[test]
fn a_target_ipmitool_would_misread_is_refused_before_any_call() {
    let err = Ipmi::new(
        IpmiTarget::new("-H", USER, Secret::new(PASSWORD)),
        IpmiOptions::default(),
    )
    .expect_err("refused");
    assert!(err.to_string().contains("is not a host name"), "{err}");
}
