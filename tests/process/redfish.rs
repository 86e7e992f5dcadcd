//! The Redfish driver against a real Redfish service: sushy-tools' emulator, the one OpenStack's
//! CI drives Ironic with. Each test starts its own `sushy-emulator --fake` on a
//! free loopback port with its own configuration and state directory, killed on drop.
//!
//! The emulator's fake driver serves one system, applies a new power state 1 to 11 s after a
//! Reset (so every action here polls for real), and reads its settings from a Python
//! configuration file (`--config`), not from the environment: `SUSHY_EMULATOR_STATE_DIR`,
//! `SUSHY_EMULATOR_AUTH_FILE`, `SUSHY_EMULATOR_DISABLE_POWER_OFF` and
//! `SUSHY_EMULATOR_FAKE_SYSTEMS` (which lets a test start the system On) are written there. A
//! graceful off that does not land is made by the same file wrapping the fake driver so that
//! it accepts `GracefulShutdown` (204) and does nothing, as an OS that ignores the ACPI button.
//!
//! Over TLS the emulator presents a certificate signed by the test's own CA, or a self-signed one
//! made by `openssl req -x509` with its defaults (CA:TRUE), as a BMC presents its own: the
//! latter is pinned in `ca_file` or by `tls_fingerprint`.
//!
//! What the emulator cannot be made to do (a 409 to On, a 400 meaning "already off", a BMC that
//! lists PushPowerButton or no off at all, a 503, garbage, a BMC that never answers) is played by
//! a scripted BMC on loopback in `mod scripted`, which also sees the headers and that requests
//! never overlap. Neither proves a real BMC's timing, its TLS stack or its session limits (fleet
//! opens no session).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet::power::redfish::config::TlsFingerprint;
use fleet::power::redfish::{Redfish, RedfishTarget};
use fleet::power::{Audit, Bmc, Intent, PowerError, PowerState, Secret};
use fleet_testing::Fixture;
use fleet_testing::fixture::{Driver, Group, Slot};

/// The fake system's identity, so tests can name its path.
const UUID: &str = "27946b59-9e44-4fa7-8e91-f3527a1ef094";
const SYSTEM: &str = "/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094";
const PASSWORD: &str = "right-horse-battery";

/// How a test's emulator is set up.
#[derive(Default)]
struct Setup {
    /// The fake system starts On (the emulator's default is Off).
    start_on: bool,
    /// Only `admin` with [`PASSWORD`] is let in (a bcrypt htpasswd file).
    auth: bool,
    /// `SUSHY_EMULATOR_DISABLE_POWER_OFF`: GracefulShutdown and ForceOff answer 400.
    disable_power_off: bool,
    /// GracefulShutdown is accepted and never lands.
    ignore_graceful: bool,
    /// Served over TLS, and with which certificate.
    tls: Tls,
}

/// The certificate the emulator presents, in its directory as `server.pem` (key `server.key`).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Tls {
    /// Plain http.
    #[default]
    None,
    /// A certificate for 127.0.0.1 signed by the test's own CA (`ca.pem`).
    CaSigned,
    /// A self-signed certificate for 127.0.0.1 as `openssl req -x509` makes it by default
    /// (basicConstraints CA:TRUE), as a BMC presents its own; beside it `other.pem`, another one
    /// made the same way with the same name and another key, which the emulator never presents.
    SelfSigned,
}

/// A running `sushy-emulator`, killed on drop.
struct Emulator {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    tls: bool,
}

impl Emulator {
    fn start(setup: Setup) -> Emulator {
        let mut dir = tempfile::tempdir().expect("a temp dir");
        match setup.tls {
            Tls::None => {}
            Tls::CaSigned => certificates(dir.path()),
            Tls::SelfSigned => self_signed(dir.path()),
        }
        std::fs::write(dir.path().join("sushy.conf"), config(dir.path(), &setup))
            .expect("the emulator's configuration is written");
        // A free port, and a fresh one if another process took it between the pick and the bind.
        for _ in 0..5 {
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("emulator.log")).expect("a log");
            let mut command = Command::new("sushy-emulator");
            command
                .arg("--fake")
                .arg("--config")
                .arg(dir.path().join("sushy.conf"))
                .args(["--interface", "127.0.0.1", "--port", &port.to_string()]);
            if setup.tls != Tls::None {
                command
                    .arg("--ssl-certificate")
                    .arg(dir.path().join("server.pem"))
                    .arg("--ssl-key")
                    .arg(dir.path().join("server.key"));
            }
            let child = command
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("a log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "sushy-emulator cannot be started ({e}): run scripts/ensure-deps.sh, \
                         which installs it with pip install sushy-tools"
                    )
                });
            let mut emulator = Emulator {
                child,
                dir,
                port,
                tls: setup.tls != Tls::None,
            };
            if emulator.wait_ready() {
                return emulator;
            }
            dir = emulator.stop();
        }
        panic!("sushy-emulator did not start on any of 5 ports");
    }

    /// Polls until the service root answers (within 30 s); false when the emulator exited
    /// (its port was taken), panics with its log when it never answers.
    fn wait_ready(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if self.answers() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("sushy-emulator did not answer in 30 s:\n{}", self.log());
    }

    /// Whether the emulator serves: its service root answers 200 (without credentials: the
    /// emulator leaves the root open), or, over TLS, its port takes a connection.
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        if self.tls {
            return true;
        }
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream
            .write_all(b"GET /redfish/v1/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .is_err()
        {
            return false;
        }
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
    }

    /// Kills the emulator and hands its directory back for another try.
    fn stop(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().expect("a temp dir");
        std::mem::replace(&mut self.dir, dir)
    }

    fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A target for this emulator over plain http (insecure, as a test BMC).
    fn target(&self, password: &str) -> RedfishTarget {
        RedfishTarget {
            endpoint: self.endpoint(),
            system: None,
            username: "admin".to_string(),
            password: Secret::new(password),
            ca_file: None,
            tls_fingerprint: None,
            insecure: !self.tls,
        }
    }

    fn redfish(&self) -> Redfish {
        Redfish::new(self.target(PASSWORD)).expect("a good target")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("emulator.log")).unwrap_or_default()
    }

    /// The requests the emulator logged under `/redfish/v1/Systems` (its access log), waiting
    /// up to 5 s for at least `at_least` of them: the log is written by another process.
    fn system_requests(&self, at_least: usize) -> Vec<String> {
        let start = Instant::now();
        loop {
            let lines: Vec<String> = self
                .log()
                .lines()
                .filter(|l| l.contains("/redfish/v1/Systems"))
                .map(str::to_string)
                .collect();
            if lines.len() >= at_least || start.elapsed() > Duration::from_secs(5) {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The emulator's configuration: a Python file it executes at start.
fn config(dir: &Path, setup: &Setup) -> String {
    let path = |name: &str| dir.join(name).display().to_string();
    let mut config = format!(
        "SUSHY_EMULATOR_STATE_DIR = {state:?}\n\
         SUSHY_EMULATOR_FAKE_SYSTEMS = [{{'uuid': {UUID:?}, 'name': 'fake', \
         'power_state': {power:?}, 'external_notifier': False, \
         'nics': [{{'mac': '00:5c:52:31:3a:9c', 'ip': '172.22.0.100'}}]}}]\n",
        state = path("state"),
        power = if setup.start_on { "On" } else { "Off" },
    );
    if setup.auth {
        // The htpasswd file is made with the bcrypt module sushy-tools brings, by the
        // emulator's own interpreter, before it reads the file.
        config.push_str(&format!(
            "import bcrypt as _bcrypt\n\
             with open({htpasswd:?}, 'w') as _f:\n    \
             _f.write('admin:' + _bcrypt.hashpw({PASSWORD:?}.encode(), _bcrypt.gensalt(4)).decode() + '\\n')\n\
             SUSHY_EMULATOR_AUTH_FILE = {htpasswd:?}\n",
            htpasswd = path("htpasswd"),
        ));
    }
    if setup.disable_power_off {
        config.push_str("SUSHY_EMULATOR_DISABLE_POWER_OFF = True\n");
    }
    if setup.ignore_graceful {
        config.push_str(
            "from sushy_tools.emulator.resources.systems import fakedriver as _fake\n\
             _set_power_state = _fake.FakeDriver.set_power_state\n\
             def _ignoring_graceful(self, identity, state):\n    \
             if state == 'GracefulShutdown':\n        \
             return\n    \
             return _set_power_state(self, identity, state)\n\
             _fake.FakeDriver.set_power_state = _ignoring_graceful\n",
        );
    }
    config
}

/// A CA, and a server certificate for 127.0.0.1 signed by it (`ca.pem`, `server.pem`,
/// `server.key`).
fn certificates(dir: &Path) {
    for script in [
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=fleet-test-ca",
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && openssl x509 -req -in server.csr \
         -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile san.ext",
    ] {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .expect("sh runs (openssl comes from scripts/ensure-deps.sh)");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A self-signed certificate for 127.0.0.1 made as `openssl req -x509` makes it by default
/// (RSA, basicConstraints CA:TRUE), as the emulator's (`server.pem`, `server.key`), and another
/// made the same way with the same name (`other.pem`).
fn self_signed(dir: &Path) {
    for name in ["server", "other"] {
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            dir,
        );
    }
}

/// Runs openssl in `dir`; its stdout.
fn openssl(args: &[&str], dir: &Path) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (scripts/ensure-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A certificate's SHA-256 as openssl prints it, written as `tls_fingerprint` takes it:
/// `sha256:6D:40:…:15`.
fn openssl_fingerprint(pem: &Path) -> String {
    let dir = pem.parent().expect("a file in a directory");
    let pem = pem.display().to_string();
    let printed = openssl(
        &["x509", "-in", &pem, "-noout", "-fingerprint", "-sha256"],
        dir,
    );
    let hex = printed
        .trim()
        .strip_prefix("sha256 Fingerprint=")
        .unwrap_or_else(|| panic!("openssl printed {printed:?}"));
    format!("sha256:{hex}")
}

/// A certificate's SHA-256 as fleet shows it (`sha256:` and 64 lowercase hex digits), from
/// openssl's print.
fn fingerprint(pem: &Path) -> TlsFingerprint {
    openssl_fingerprint(pem).parse().expect("openssl's form")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// Awaits a driver call, failing the test if it outlives its own bound by more than 5 s.
async fn bounded<T>(bound: Duration, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(bound + Duration::from_secs(5), call)
        .await
        .expect("the call ended within its bound")
}

/// The requests of an audit, as `value -> answer`.
fn lines(audit: &Audit) -> Vec<String> {
    audit
        .sent
        .iter()
        .map(|s| format!("{} -> {}", s.value, s.answer))
        .collect()
}

#[tokio::test]
async fn power_on_is_read_first_sent_once_and_verified_on() {
    let emulator = Emulator::start(Setup::default());
    let bmc = emulator.redfish();
    assert_eq!(
        bounded(Duration::from_secs(20), bmc.state()).await,
        Ok(PowerState::Off)
    );

    let timeout = Duration::from_secs(20);
    let audit = bounded(timeout, bmc.power(Intent::On, timeout))
        .await
        .expect("powered on");
    let sent = lines(&audit);
    assert_eq!(audit.driver, "redfish");
    assert_eq!(audit.verified, Some(PowerState::On));
    assert_eq!((audit.attempts, audit.escalated), (1, false));
    assert!(audit.duration < timeout, "{:?}", audit.duration);
    // The system was discovered by state(); the action reads it, resets, and polls until On.
    assert_eq!(
        sent[0],
        format!("GET {SYSTEM} -> 200 PowerState=Off"),
        "{sent:#?}"
    );
    assert_eq!(sent[1], "ResetType=On -> 204 No Content", "{sent:#?}");
    assert_eq!(
        sent.last().map(String::as_str),
        Some(format!("GET {SYSTEM} -> 200 PowerState=On").as_str()),
        "{sent:#?}"
    );
    for poll in &sent[2..sent.len() - 1] {
        assert_eq!(
            poll,
            &format!("GET {SYSTEM} -> 200 PowerState=Off"),
            "{sent:#?}"
        );
    }
    assert!(
        audit.sent.windows(2).all(|w| w[0].at_ms <= w[1].at_ms),
        "{sent:#?}"
    );
    assert!(!audit.render().contains(PASSWORD));

    // Already on: read, nothing sent.
    let again = bounded(timeout, bmc.power(Intent::On, timeout))
        .await
        .expect("already on");
    assert_eq!(
        lines(&again),
        [format!("GET {SYSTEM} -> 200 PowerState=On")]
    );
    assert_eq!((again.attempts, again.verified), (0, Some(PowerState::On)));
    assert_eq!(
        bounded(Duration::from_secs(20), bmc.state()).await,
        Ok(PowerState::On)
    );
}

#[tokio::test]
async fn a_first_action_discovers_the_only_system() {
    let emulator = Emulator::start(Setup {
        start_on: true,
        ..Setup::default()
    });
    let bmc = emulator.redfish();
    let timeout = Duration::from_secs(20);
    let audit = bounded(timeout, bmc.power(Intent::On, timeout))
        .await
        .expect("already on");
    assert_eq!(
        lines(&audit),
        [
            format!("GET /redfish/v1/Systems -> 200 {SYSTEM}"),
            format!("GET {SYSTEM} -> 200 PowerState=On"),
        ]
    );
    assert_eq!((audit.attempts, audit.verified), (0, Some(PowerState::On)));
}

#[tokio::test]
async fn graceful_off_lands_without_escalation() {
    let emulator = Emulator::start(Setup {
        start_on: true,
        ..Setup::default()
    });
    let bmc = emulator.redfish();
    // The emulator lands a state up to 11 s after the request, and the soft off has
    // SOFT_SHARE (2/3) of the timeout: 18 s.
    let timeout = Duration::from_secs(27);
    let audit = bounded(timeout, bmc.power(Intent::Off, timeout))
        .await
        .expect("powered off");
    let sent = lines(&audit);
    assert_eq!(audit.verified, Some(PowerState::Off));
    assert_eq!((audit.attempts, audit.escalated), (1, false), "{sent:#?}");
    assert_eq!(
        sent.iter()
            .filter(|s| s.starts_with("ResetType="))
            .collect::<Vec<_>>(),
        ["ResetType=GracefulShutdown -> 204 No Content"]
    );
    assert_eq!(
        sent.last().map(String::as_str),
        Some(format!("GET {SYSTEM} -> 200 PowerState=Off").as_str())
    );
    assert_eq!(
        bounded(Duration::from_secs(20), bmc.state()).await,
        Ok(PowerState::Off)
    );
}

#[tokio::test]
async fn a_graceful_off_that_does_not_land_is_forced_after_its_share() {
    let emulator = Emulator::start(Setup {
        start_on: true,
        ignore_graceful: true,
        ..Setup::default()
    });
    let bmc = emulator.redfish();
    // 28 s for the soft off (SOFT_SHARE), 14 s for ForceOff to land (at most 11 s here) and be
    // read (the last read is READ_RESERVE, 1 s, before the deadline).
    let timeout = Duration::from_secs(42);
    let audit = bounded(timeout, bmc.power(Intent::Off, timeout))
        .await
        .expect("forced off");
    let sent = lines(&audit);
    assert_eq!(audit.verified, Some(PowerState::Off), "{sent:#?}");
    assert_eq!((audit.attempts, audit.escalated), (2, true), "{sent:#?}");
    let resets: Vec<_> = audit
        .sent
        .iter()
        .filter(|s| s.value.starts_with("ResetType="))
        .collect();
    assert_eq!(
        resets
            .iter()
            .map(|s| format!("{} -> {}", s.value, s.answer))
            .collect::<Vec<_>>(),
        [
            "ResetType=GracefulShutdown -> 204 No Content",
            "ResetType=ForceOff -> 204 No Content"
        ]
    );
    // ForceOff went out once the soft off's share was spent, not before.
    assert!(resets[1].at_ms >= 28_000, "{sent:#?}");
    assert!(audit.duration <= timeout, "{:?}", audit.duration);
    let rendered = audit.render();
    assert!(rendered.contains("escalated soft to hard"), "{rendered}");
}

#[tokio::test]
async fn when_every_off_is_refused_the_error_names_both_refusals() {
    let emulator = Emulator::start(Setup {
        start_on: true,
        disable_power_off: true,
        ..Setup::default()
    });
    let bmc = emulator.redfish();
    let timeout = Duration::from_secs(20);
    let started = Instant::now();
    let error = bounded(timeout, bmc.power(Intent::Off, timeout))
        .await
        .expect_err("off is disabled");
    // Refused outright: no waiting out the soft share, no polling to the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let PowerError::Protocol { bmc: name, detail } = &error else {
        panic!("not a protocol error: {error:?}");
    };
    assert_eq!(name, &emulator.endpoint());
    let refusal = "400 Bad Request: Can not request power off transition. It is disabled via \
                   the SUSHY_EMULATOR_DISABLE_POWER_OFF configurationoption.; the state read \
                   after it did not show it done";
    assert_eq!(
        detail,
        &format!(
            "ResetType=ForceOff was refused: {refusal} (after the soft off: \
             ResetType=GracefulShutdown was refused: {refusal})"
        )
    );
    assert_eq!(
        bounded(Duration::from_secs(20), bmc.state()).await,
        Ok(PowerState::On)
    );
}

#[tokio::test]
async fn refused_credentials_are_an_auth_error_asked_once() {
    let emulator = Emulator::start(Setup {
        auth: true,
        ..Setup::default()
    });
    let wrong = Redfish::new(emulator.target("wrong-password")).expect("a good target");
    let timeout = Duration::from_secs(20);
    let started = Instant::now();
    let error = bounded(timeout, wrong.power(Intent::On, timeout))
        .await
        .expect_err("refused");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        error,
        PowerError::Auth {
            bmc: emulator.endpoint(),
            detail: "GET /redfish/v1/Systems answered 401".to_string(),
        }
    );
    assert!(!format!("{error} {error:?} {wrong:?}").contains("wrong-password"));
    // Never retried: the emulator saw exactly one request past its open service root.
    let requests = emulator.system_requests(1);
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert!(
        requests[0].contains("\"GET /redfish/v1/Systems HTTP/1.1\" 401"),
        "{requests:#?}"
    );

    // The right password is let in: the refusal above was the credentials, nothing else.
    assert_eq!(
        bounded(Duration::from_secs(20), emulator.redfish().state()).await,
        Ok(PowerState::Off)
    );
}

#[tokio::test]
async fn an_unreachable_bmc_is_unreachable_at_the_timeout_and_a_reading_fails_at_once() {
    let port = free_port();
    let bmc = Redfish::new(RedfishTarget {
        endpoint: format!("http://127.0.0.1:{port}"),
        system: None,
        username: "admin".to_string(),
        password: Secret::new(PASSWORD),
        ca_file: None,
        tls_fingerprint: None,
        insecure: true,
    })
    .expect("a good target");

    let started = Instant::now();
    let reading = bounded(Duration::from_secs(20), bmc.state()).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let Err(PowerError::Unreachable { bmc: name, detail }) = reading else {
        panic!("not unreachable: {reading:?}");
    };
    assert_eq!(name, format!("http://127.0.0.1:{port}"));
    assert!(
        detail.starts_with("connect: Connection refused (os error 111), for 0."),
        "{detail}"
    );

    // An action keeps trying until its timeout (a BMC may be rebooting), and no longer.
    let timeout = Duration::from_secs(3);
    let started = Instant::now();
    let error = bounded(timeout, bmc.power(Intent::On, timeout))
        .await
        .expect_err("unreachable");
    let took = started.elapsed();
    assert!(
        (timeout..timeout + Duration::from_secs(1)).contains(&took),
        "{took:?}"
    );
    let PowerError::Unreachable { detail, .. } = &error else {
        panic!("not unreachable: {error:?}");
    };
    assert!(
        detail.starts_with("connect: Connection refused (os error 111), for 3."),
        "{detail}"
    );
    assert!(
        error
            .to_string()
            .ends_with("check its address, port and network")
    );
}

#[tokio::test]
async fn a_configured_system_is_read_and_a_wrong_one_is_named() {
    let emulator = Emulator::start(Setup {
        start_on: true,
        ..Setup::default()
    });
    let at = |system: &str| {
        Redfish::new(RedfishTarget {
            system: Some(system.to_string()),
            ..emulator.target(PASSWORD)
        })
        .expect("a good target")
    };
    let bound = Duration::from_secs(20);
    assert_eq!(bounded(bound, at(SYSTEM).state()).await, Ok(PowerState::On));
    // Only the configured path was asked: no discovery.
    let requests = emulator.system_requests(1);
    assert_eq!(requests.len(), 1, "{requests:#?}");

    let missing = bounded(bound, at("/redfish/v1/Systems/nope").state()).await;
    let Err(PowerError::Protocol { detail, .. }) = missing else {
        panic!("not a protocol error: {missing:?}");
    };
    assert!(
        detail.starts_with("GET /redfish/v1/Systems/nope answered 404 Not Found")
            && detail.ends_with("; check system"),
        "{detail}"
    );
    // The emulator's name for the system redirects to its identity: fleet names it.
    let alias = bounded(bound, at("/redfish/v1/Systems/fake").state()).await;
    let Err(PowerError::Protocol { detail, .. }) = alias else {
        panic!("not a protocol error: {alias:?}");
    };
    assert_eq!(
        detail,
        format!(
            "GET /redfish/v1/Systems/fake answered 307 Temporary Redirect; set system to {SYSTEM}"
        )
    );
}

#[tokio::test]
async fn tls_is_verified_against_the_ca_file_and_refused_without_it() {
    let emulator = Emulator::start(Setup {
        tls: Tls::CaSigned,
        ..Setup::default()
    });
    let bound = Duration::from_secs(20);
    let ca_file = emulator.dir.path().join("ca.pem");
    let verified = Redfish::new(RedfishTarget {
        ca_file: Some(ca_file.clone()),
        ..emulator.target(PASSWORD)
    })
    .expect("a good target");
    assert_eq!(bounded(bound, verified.state()).await, Ok(PowerState::Off));

    // The system's roots do not know the test's CA.
    let unverified = Redfish::new(emulator.target(PASSWORD)).expect("a good target");
    let refused = bounded(bound, unverified.state()).await;
    let Err(PowerError::Protocol { detail, .. }) = refused else {
        panic!("not a protocol error: {refused:?}");
    };
    // It says what was presented, and how to pin it or what CA to give.
    let presented = fingerprint(&emulator.dir.path().join("server.pem"));
    assert_eq!(
        detail,
        format!(
            "its TLS certificate was refused (invalid peer certificate: UnknownIssuer); it \
             presented {presented}: if that is the BMC's own certificate (compare it on the \
             BMC), pin it with tls_fingerprint: {presented} or put the certificate in ca_file; \
             else give the CA that signed it in ca_file"
        )
    );

    let insecure = Redfish::new(RedfishTarget {
        insecure: true,
        ..emulator.target(PASSWORD)
    })
    .expect("a good target");
    assert_eq!(bounded(bound, insecure.state()).await, Ok(PowerState::Off));

    let unreadable: PathBuf = emulator.dir.path().join("absent.pem");
    let error = Redfish::new(RedfishTarget {
        ca_file: Some(unreadable.clone()),
        ..emulator.target(PASSWORD)
    })
    .expect_err("no such file");
    assert_eq!(
        error.to_string(),
        format!(
            "redfish ca_file {}: cannot be read; check the path and its permissions",
            unreadable.display()
        )
    );
}

// SPEC §4.10: the certificate a BMC presents itself, self-signed and CA:TRUE as
// `openssl req -x509` makes it, is pinned by putting it in ca_file: trusted as itself (a chain
// refuses it as CaUsedAsEndEntity), for the endpoint's host. Another certificate of the same
// name is refused, saying what was presented and how to pin it.
#[tokio::test]
async fn a_self_signed_certificate_in_ca_file_is_pinned_and_another_of_its_name_is_refused() {
    let emulator = Emulator::start(Setup {
        tls: Tls::SelfSigned,
        ..Setup::default()
    });
    let dir = emulator.dir.path();
    let bound = Duration::from_secs(20);
    for pem in ["server.pem", "other.pem"] {
        let text = openssl(
            &[
                "x509",
                "-in",
                pem,
                "-noout",
                "-ext",
                "basicConstraints,subjectAltName",
                "-subject",
            ],
            dir,
        );
        assert!(
            text.contains("CA:TRUE")
                && text.contains("IP Address:127.0.0.1")
                && text.contains("CN = 127.0.0.1"),
            "{pem}: {text}"
        );
    }
    let pinned = Redfish::new(RedfishTarget {
        ca_file: Some(dir.join("server.pem")),
        ..emulator.target(PASSWORD)
    })
    .expect("a good target");
    assert_eq!(bounded(bound, pinned.state()).await, Ok(PowerState::Off));

    let presented = fingerprint(&dir.join("server.pem"));
    let other = Redfish::new(RedfishTarget {
        ca_file: Some(dir.join("other.pem")),
        ..emulator.target(PASSWORD)
    })
    .expect("a good target");
    let refused = bounded(bound, other.state()).await;
    assert_eq!(
        refused,
        Err(PowerError::Protocol {
            bmc: emulator.endpoint(),
            detail: format!(
                "its TLS certificate was refused (invalid peer certificate: CaUsedAsEndEntity); \
                 it presented {presented}: if that is the BMC's own certificate (compare it on \
                 the BMC), pin it with tls_fingerprint: {presented} or put the certificate in \
                 ca_file; else give the CA that signed it in ca_file"
            ),
        })
    );

    // The pin is for the endpoint's host: the same BMC reached by a name its certificate does
    // not carry is refused, and told of the pin that checks no name.
    let by_name = Redfish::new(RedfishTarget {
        endpoint: format!("https://localhost:{}", emulator.port),
        ca_file: Some(dir.join("server.pem")),
        ..emulator.target(PASSWORD)
    })
    .expect("a good target");
    let refused = bounded(bound, by_name.state()).await;
    let Err(PowerError::Protocol { detail, .. }) = &refused else {
        panic!("not a protocol error: {refused:?}");
    };
    assert!(
        detail.starts_with(
            "its TLS certificate is the one pinned in ca_file, and it is not for this endpoint's \
             host (certificate not valid for name \"localhost\""
        ) && detail.ends_with(&format!(
            "pin it with tls_fingerprint: {presented} instead, which checks no name, or give the \
             BMC a certificate for its host"
        )),
        "{detail}"
    );
}

// SPEC §4.10: `tls_fingerprint` accepts exactly the certificate with that SHA-256,
// written as openssl prints it, whatever name the endpoint uses; another certificate of the same
// name, or a wrong fingerprint, is refused saying what was presented.
#[tokio::test]
async fn a_tls_fingerprint_accepts_exactly_its_certificate() {
    let emulator = Emulator::start(Setup {
        tls: Tls::SelfSigned,
        ..Setup::default()
    });
    let dir = emulator.dir.path();
    let bound = Duration::from_secs(20);
    let pinned_at = |endpoint: String, fingerprint: TlsFingerprint| {
        Redfish::new(RedfishTarget {
            endpoint,
            tls_fingerprint: Some(fingerprint),
            ..emulator.target(PASSWORD)
        })
        .expect("a good target")
    };
    // As `openssl x509 -noout -fingerprint -sha256` prints it: upper case, colons.
    let printed = openssl_fingerprint(&dir.join("server.pem"));
    assert!(
        printed.starts_with("sha256:") && printed.len() == 7 + 95,
        "{printed}"
    );
    let presented: TlsFingerprint = printed.parse().expect("openssl's form");
    for endpoint in [
        emulator.endpoint(),
        format!("https://localhost:{}", emulator.port),
    ] {
        let bmc = pinned_at(endpoint.clone(), presented);
        assert_eq!(
            bounded(bound, bmc.state()).await,
            Ok(PowerState::Off),
            "{endpoint}"
        );
    }

    let other: TlsFingerprint = openssl_fingerprint(&dir.join("other.pem"))
        .parse()
        .expect("openssl's form");
    let mut wrong = presented;
    wrong.0[31] ^= 1;
    for want in [other, wrong] {
        let refused = bounded(bound, pinned_at(emulator.endpoint(), want).state()).await;
        assert_eq!(
            refused,
            Err(PowerError::Protocol {
                bmc: emulator.endpoint(),
                detail: format!(
                    "its TLS certificate was refused: it presented {presented}, and \
                     tls_fingerprint is {want}; if the BMC's certificate was replaced (compare \
                     it on the BMC), set tls_fingerprint: {presented}"
                ),
            })
        );
    }
}

// SPEC §4.10: `tls_fingerprint` in the file reaches the driver (`power::drive`) and pins the BMC;
// a malformed one, or one beside insecure: true, is refused at load: `fleet serve` exits 2 naming
// the slot and the field.
#[tokio::test]
async fn a_tls_fingerprint_in_the_file_pins_the_bmc_and_a_malformed_one_is_exit_2() {
    let emulator = Emulator::start(Setup {
        tls: Tls::SelfSigned,
        ..Setup::default()
    });
    let dir = emulator.dir.path();
    let password = dir.join("bmc-password");
    std::fs::write(&password, format!("{PASSWORD}\n")).expect("the password file");
    let printed = openssl_fingerprint(&dir.join("server.pem"));
    // Two slots of the emulator's BMC, each with its own fields over the group's driver.
    let file = |n1: Driver, n2: Driver| {
        let bmc = Driver::redfish(&emulator.endpoint())
            .username("admin")
            .password_file(&password);
        Fixture::new()
            .group(Group::new("rack").max(2).driver(bmc))
            .slot(Slot::new("n1", "rack").driver(n1))
            .slot(Slot::new("n2", "rack").driver(n2))
    };
    let pinned = || Driver::overrides().tls_fingerprint(&printed);
    let config = fleet::config::parse(&file(pinned(), pinned()).yaml(), Path::new("fleet.yaml"))
        .expect("a valid configuration");
    for slot in config.slots.values() {
        let driver = slot.driver.as_ref().expect("a driver");
        assert_eq!(
            bounded(
                Duration::from_secs(20),
                fleet::power::drive::read_state(driver)
            )
            .await,
            Some(Ok(PowerState::Off)),
            "{}",
            slot.name
        );
    }

    let server = fleet_testing::RedisServer::start().expect("redis-server starts");
    let malformed = Driver::overrides().tls_fingerprint("sha256:6D:40:AE");
    let path = file(malformed, pinned().insecure(true)).write(dir);
    let out = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["--redis", &server.url(), "serve", "--config"])
        .arg(&path)
        .output()
        .expect("fleet runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let at = path.display();
    for want in [
        format!("{at}: invalid configuration, 2 problems:"),
        format!(
            "{at}: slots[0] (n1).driver.tls_fingerprint: invalid tls_fingerprint \
             \"sha256:6D:40:AE\": it is not 64 hex digits (with or without ':' between pairs); \
             write sha256: and the SHA-256 of the certificate the BMC presents"
        ),
        format!(
            "{at}: slots[1] (n2).driver: both tls_fingerprint and insecure: true: insecure \
             accepts any certificate, so the fingerprint is never checked; keep tls_fingerprint"
        ),
    ] {
        assert!(stderr.contains(&want), "{want}\n---\n{stderr}");
    }
}

/// What the emulator cannot be made to do, against a scripted BMC on loopback: a 409 to On, a
/// 400 that means "already off", a BMC whose soft off is PushPowerButton or that lists no off at
/// all, a 503, garbage, a BMC that never answers, and the headers and the one-at-a-time rule
/// as the BMC sees them.
mod scripted {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, Method, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};
    use fleet::power::redfish::{Redfish, RedfishTarget};
    use fleet::power::{Bmc, Intent, PowerError, PowerState, Secret};
    use serde_json::json;

    use super::{bounded, lines};

    const PATH: &str = "/redfish/v1/Systems/1";

    /// One scripted answer: status, body, and how long the BMC takes to give it.
    #[derive(Clone)]
    struct Answer(u16, String, Duration);

    fn system(state: &str, allowable: &[&str]) -> Answer {
        let body = json!({
            "PowerState": state,
            "Actions": {"#ComputerSystem.Reset": {
                "target": format!("{PATH}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": allowable,
            }}
        });
        Answer(200, body.to_string(), Duration::ZERO)
    }

    fn status(code: u16, message: &str) -> Answer {
        let body = json!({"error": {"code": "Base.1.0.GeneralError", "message": message}});
        Answer(code, body.to_string(), Duration::ZERO)
    }

    const ALL: &[&str] = &["On", "ForceOff", "GracefulShutdown", "ForceOn"];

    /// The BMC's script (GET and POST answers in order, the last one repeated) and what it saw.
    #[derive(Default)]
    struct Script {
        gets: Mutex<VecDeque<Answer>>,
        posts: Mutex<VecDeque<Answer>>,
        seen: Mutex<Vec<String>>,
        headers: Mutex<Vec<HeaderMap>>,
        in_flight: Mutex<(usize, usize)>,
    }

    fn next(queue: &Mutex<VecDeque<Answer>>) -> Answer {
        let mut queue = queue.lock().unwrap();
        match queue.len() {
            0 => status(500, "the script is empty"),
            1 => queue[0].clone(),
            _ => queue.pop_front().unwrap(),
        }
    }

    async fn serve(
        State(script): State<Arc<Script>>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        {
            let mut flight = script.in_flight.lock().unwrap();
            flight.0 += 1;
            flight.1 = flight.1.max(flight.0);
        }
        script.seen.lock().unwrap().push(
            format!("{method} {uri} {}", String::from_utf8_lossy(&body))
                .trim_end()
                .to_string(),
        );
        script.headers.lock().unwrap().push(headers);
        let Answer(code, body, delay) = match method {
            Method::POST => next(&script.posts),
            _ => next(&script.gets),
        };
        tokio::time::sleep(delay).await;
        script.in_flight.lock().unwrap().0 -= 1;
        let code = StatusCode::from_u16(code).unwrap();
        (code, [("content-type", "application/json")], body).into_response()
    }

    /// A scripted BMC on a loopback port, stopped on drop.
    struct Peer {
        script: Arc<Script>,
        endpoint: String,
        server: tokio::task::JoinHandle<()>,
    }

    impl Drop for Peer {
        fn drop(&mut self) {
            self.server.abort();
        }
    }

    async fn scripted_bmc(gets: Vec<Answer>, posts: Vec<Answer>) -> Peer {
        let script = Arc::new(Script {
            gets: Mutex::new(gets.into()),
            posts: Mutex::new(posts.into()),
            ..Script::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(script.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Peer {
            script,
            endpoint,
            server,
        }
    }

    impl Peer {
        fn redfish(&self) -> Redfish {
            Redfish::new(RedfishTarget {
                endpoint: self.endpoint.clone(),
                system: Some(PATH.to_string()),
                username: "admin".to_string(),
                password: Secret::new("pw"),
                ca_file: None,
                tls_fingerprint: None,
                insecure: true,
            })
            .unwrap()
        }

        fn seen(&self) -> Vec<String> {
            self.script.seen.lock().unwrap().clone()
        }
    }

    const RESET: &str = "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset";

    #[tokio::test]
    async fn a_409_to_on_is_sent_again_until_accepted() {
        let peer = scripted_bmc(
            // The read before, the fresh read after each 409, a poll before each retry.
            vec![
                system("Off", ALL),
                system("Off", ALL),
                system("Off", ALL),
                system("Off", ALL),
                system("Off", ALL),
                system("On", ALL),
            ],
            vec![
                status(409, "not yet"),
                status(409, "not yet"),
                Answer(204, String::new(), Duration::ZERO),
            ],
        )
        .await;
        let timeout = Duration::from_secs(20);
        let audit = bounded(timeout, peer.redfish().power(Intent::On, timeout))
            .await
            .expect("on after two refusals");
        assert_eq!((audit.attempts, audit.verified), (3, Some(PowerState::On)));
        let posts: Vec<_> = lines(&audit)
            .into_iter()
            .filter(|l| l.starts_with("ResetType"))
            .collect();
        assert_eq!(
            posts,
            [
                "ResetType=On -> 409 Conflict: not yet",
                "ResetType=On -> 409 Conflict: not yet",
                "ResetType=On -> 204 No Content"
            ]
        );
    }

    #[tokio::test]
    async fn a_400_is_already_off_once_a_fresh_read_shows_it() {
        let peer = scripted_bmc(
            vec![system("On", ALL), system("Off", ALL)],
            vec![status(400, "already powered off")],
        )
        .await;
        let timeout = Duration::from_secs(20);
        let audit = bounded(timeout, peer.redfish().power(Intent::Off, timeout))
            .await
            .expect("off");
        assert_eq!(
            lines(&audit),
            [
                format!("GET {PATH} -> 200 PowerState=On"),
                "ResetType=GracefulShutdown -> 400 Bad Request: already powered off".to_string(),
                format!("GET {PATH} -> 200 PowerState=Off"),
            ]
        );
        assert_eq!(
            (audit.escalated, audit.verified),
            (false, Some(PowerState::Off))
        );
    }

    #[tokio::test]
    async fn a_bmc_without_graceful_shutdown_gets_its_power_button() {
        let listed = &["On", "PushPowerButton", "ForceOff"];
        let peer = scripted_bmc(
            vec![system("On", listed), system("Off", listed)],
            vec![Answer(204, String::new(), Duration::ZERO)],
        )
        .await;
        let timeout = Duration::from_secs(20);
        let audit = bounded(timeout, peer.redfish().power(Intent::Off, timeout))
            .await
            .expect("off");
        assert_eq!(audit.verified, Some(PowerState::Off));
        assert_eq!(
            peer.seen()[1],
            format!(r#"{RESET} {{"ResetType":"PushPowerButton"}}"#)
        );
    }

    #[tokio::test]
    async fn a_bmc_that_lists_no_off_gets_nothing_sent() {
        let peer = scripted_bmc(vec![system("On", &["On", "Nmi"])], vec![]).await;
        let timeout = Duration::from_secs(20);
        let error = bounded(timeout, peer.redfish().power(Intent::Off, timeout))
            .await
            .expect_err("no off listed");
        assert_eq!(
            error,
            PowerError::Protocol {
                bmc: peer.endpoint.clone(),
                detail: "the system lists no ResetType for a forced power off (it lists On, \
                         Nmi); fleet sends none it does not list (after the soft off: the \
                         system lists no ResetType for a graceful power off (it lists On, Nmi); \
                         fleet sends none it does not list)"
                    .to_string(),
            }
        );
        assert!(
            peer.seen().iter().all(|s| s.starts_with("GET")),
            "{:?}",
            peer.seen()
        );
    }

    #[tokio::test]
    async fn a_busy_bmc_is_read_again_and_garbage_is_an_error() {
        let peer = scripted_bmc(vec![status(503, "busy"), system("On", ALL)], vec![]).await;
        let timeout = Duration::from_secs(20);
        let audit = bounded(timeout, peer.redfish().power(Intent::On, timeout))
            .await
            .expect("on after a 503");
        assert_eq!(
            lines(&audit),
            [
                format!("GET {PATH} -> 503 Service Unavailable: busy"),
                format!("GET {PATH} -> 200 PowerState=On"),
            ]
        );

        let garbage = scripted_bmc(
            vec![Answer(200, "<html>".to_string(), Duration::ZERO)],
            vec![],
        )
        .await;
        let reading = bounded(timeout, garbage.redfish().state()).await;
        let Err(PowerError::Protocol { detail, .. }) = reading else {
            panic!("not a protocol error: {reading:?}");
        };
        assert!(
            detail.starts_with(&format!("GET {PATH}: the ComputerSystem is not JSON")),
            "{detail}"
        );
    }

    #[tokio::test]
    async fn a_bmc_that_never_answers_is_unreachable_at_the_timeout() {
        let peer = scripted_bmc(
            vec![Answer(200, String::new(), Duration::from_secs(3600))],
            vec![],
        )
        .await;
        let timeout = Duration::from_secs(2);
        let started = Instant::now();
        let error = bounded(timeout, peer.redfish().power(Intent::On, timeout))
            .await
            .expect_err("no answer");
        let took = started.elapsed();
        assert!(
            (timeout..timeout + Duration::from_secs(1)).contains(&took),
            "{took:?}"
        );
        let PowerError::Unreachable { detail, .. } = error else {
            panic!("not unreachable: {error:?}");
        };
        // The one request was bounded by what was left of the action's time.
        assert!(
            detail.starts_with("no answer within 2.0s, for 2."),
            "{detail}"
        );
    }

    #[tokio::test]
    async fn requests_go_one_at_a_time_with_the_headers_bmcs_take() {
        let mut slow = system("On", ALL);
        slow.2 = Duration::from_millis(100);
        let peer = scripted_bmc(vec![slow], vec![Answer(204, String::new(), Duration::ZERO)]).await;
        let redfish = peer.redfish();
        let bound = Duration::from_secs(20);
        let readings = bounded(
            bound,
            futures::future::join_all((0..4).map(|_| redfish.state())),
        )
        .await;
        assert_eq!(readings, vec![Ok(PowerState::On); 4]);
        assert_eq!(
            peer.script.in_flight.lock().unwrap().1,
            1,
            "at most one in flight"
        );
        // The script keeps the machine on: soft, then hard, then not reached.
        let short = Duration::from_secs(2);
        let error = bounded(short, redfish.power(Intent::Off, short)).await;
        assert!(
            matches!(
                error,
                Err(PowerError::NotReached {
                    intent: Intent::Off,
                    ..
                })
            ),
            "{error:?}"
        );
        let resets: Vec<_> = peer
            .seen()
            .into_iter()
            .filter(|s| s.starts_with("POST"))
            .collect();
        assert_eq!(
            resets,
            [
                format!(r#"{RESET} {{"ResetType":"GracefulShutdown"}}"#),
                format!(r#"{RESET} {{"ResetType":"ForceOff"}}"#),
            ]
        );
        let headers = peer.script.headers.lock().unwrap().clone();
        let post = peer
            .seen()
            .iter()
            .position(|s| s.starts_with("POST"))
            .unwrap();
        for (i, h) in headers.iter().enumerate() {
            assert_eq!(h["connection"], "close", "{i}");
            assert_eq!(h["authorization"], "Basic YWRtaW46cHc=", "{i}");
            assert_eq!(h["accept"], "application/json", "{i}");
        }
        assert_eq!(headers[post]["content-type"], "application/json");
    }
}
