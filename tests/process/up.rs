//! The README's quick start: `make up` (scripts/up.sh) under a pseudo-terminal,
//! as a person runs it, a claim to ready, another whose startup is in flight, then Ctrl-C. The
//! stack stops with exit 0 and leaves no process behind, the operation in flight and the
//! simulated benches' agents included.

use crate::support;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Polls `done` on the terminal's output until it holds, within `limit`.
fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes whose environment holds `marker` (the stack's SIM_DIR).
fn carrying(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

/// The stack a test started: killed whole if the test fails before its Ctrl-C, so a failure
/// leaves no `make up` running to slow every test after it.
struct Stack {
    session: i32,
    marker: Option<String>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(marker) = &self.marker {
            for line in carrying(marker) {
                if let Some(Ok(pid)) = line.split(':').next().map(str::parse::<i32>) {
                    // SAFETY: kill(2) on a pid read from /proc; a pid gone meanwhile is harmless.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        // SAFETY: the script leads a session and process group of its own (setsid above).
        unsafe { libc::kill(-self.session, libc::SIGKILL) };
    }
}

/// `scripts/up.sh ARGS` under a pseudo-terminal of its own, as a person runs it, the screen read
/// as it comes.
struct Terminal {
    child: std::process::Child,
    master: OwnedFd,
    screen: Arc<Mutex<String>>,
    all_read: std::sync::mpsc::Receiver<()>,
    stack: Stack,
}

/// What the banner names: the stack's Redis URL, its run directory and the live page.
struct Banner {
    text: String,
    url: String,
    run: String,
    page: String,
}

impl Terminal {
    fn start(args: &[&str]) -> Terminal {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty fills two descriptors we then own; the other arguments may be null.
        let opened = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(opened, 0, "openpty");
        // SAFETY: both descriptors are open and ours alone.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let grpc = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let mut cmd = Command::new("bash");
        cmd.arg("scripts/up.sh")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("FLEET_BIN", env!("CARGO_BIN_EXE_fleet"))
            .env("FLEET_GRPC_ADDR", &grpc)
            .env("BOOT_DELAY", "2")
            .env("TERM", "xterm")
            .env_remove("FLEET_REDIS_URL")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: between fork and exec, only async-signal-safe calls: a session of its own whose
        // controlling terminal is the pseudo-terminal, as a login shell's would be, and SIGINT
        // handled as a terminal's shell has it (a test run started in the background of a
        // script inherits it ignored, and a shell cannot trap a signal ignored at its start).
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0
                    || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0
                    || libc::signal(libc::SIGINT, libc::SIG_DFL) == libc::SIG_ERR
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let stack = Stack {
            session: child.id() as i32,
            marker: None,
        };
        drop(cmd);
        let screen = Arc::new(Mutex::new(String::new()));
        let mut reader = std::fs::File::from(master.try_clone().unwrap());
        let shown = screen.clone();
        // Told when the terminal's output has all been read: the script's last words may still
        // be in the terminal when its exit is seen (CI read the screen without them once).
        let (read_all, all_read) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the terminal's last user is gone: the end.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                shown
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            let _ = read_all.send(());
        });
        Terminal {
            child,
            master,
            screen,
            all_read,
            stack,
        }
    }

    fn text(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    /// Waits for the banner, at most `limit`, and reads what it names.
    fn banner(&mut self, limit: Duration) -> Banner {
        wait_for("the banner", limit, || {
            self.text().contains("Ctrl-C stops everything")
        });
        let text = self.text();
        let url = text
            .split_whitespace()
            .find(|w| w.starts_with("redis+unix://"))
            .expect("the banner names the Redis URL")
            .to_owned();
        let run = url
            .trim_start_matches("redis+unix://")
            .trim_end_matches("/redis.sock")
            .to_owned();
        self.stack.marker = Some(format!("SIM_DIR={run}"));
        let page = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .expect("the banner names the live page")
            .trim_end_matches('/')
            .to_owned();
        Banner {
            text,
            url,
            run,
            page,
        }
    }

    /// Ctrl-C: the stack stops with exit 0, says so, and leaves no process and no directory.
    fn ctrl_c(mut self, run: &str) {
        let marker = format!("SIM_DIR={run}");
        (&std::fs::File::from(self.master.try_clone().unwrap()))
            .write_all(&[0x03])
            .unwrap();
        let stopping = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if stopping.elapsed() > Duration::from_secs(20) {
                let text = self.text();
                panic!(
                    "up.sh did not stop within 20 s of Ctrl-C; the stack's processes: {:#?}\nthe \
                     screen's end:\n{}",
                    carrying(&marker),
                    text.chars()
                        .skip(text.chars().count().saturating_sub(3_000))
                        .collect::<String>()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(0), "{}", self.text());
        drop(self.master);
        // A process still holding the terminal keeps the read open: the check below names it.
        let _ = self.all_read.recv_timeout(Duration::from_secs(20));
        let left = carrying(&marker);
        assert!(left.is_empty(), "left behind: {left:#?}");
        assert!(!std::path::Path::new(run).exists(), "{run} is removed");
        let text = self.screen.lock().unwrap().clone();
        assert!(text.contains("nothing is left running"), "{text}");
    }
}

/// `fleet` against the stack's Redis.
fn fleet(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(args)
        .env("FLEET_REDIS_URL", url)
        .output()
        .unwrap()
}

#[test]
fn make_up_stops_on_ctrl_c_leaving_nothing_even_with_a_startup_in_flight() {
    let mut terminal = Terminal::start(&[]);
    let banner = terminal.banner(Duration::from_secs(60));
    let (url, run) = (banner.url.as_str(), banner.run.as_str());
    // The banner names the live page, and it answers with the stack's slots.
    let (status, body) = support::http_get(&banner.page, "/");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<title>fleet</title>"), "{body}");
    // A claim to ready, as the quick start does.
    let o = fleet(url, &["claim", "sim-01", "--wait"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains(": ready after"));
    wait_for("the live view to show it", Duration::from_secs(20), || {
        let t = terminal.text();
        t.contains("== slots ==") && t.contains("sim-01-")
    });
    // Another, interrupted while its startup runs.
    assert!(fleet(url, &["claim", "sim-02"]).status.success());
    let log = format!("{run}/serve.log");
    wait_for("the second startup", Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("starting machine")
            .count()
            >= 2
    });
    let marker = format!("SIM_DIR={run}");
    assert!(
        carrying(&marker).len() >= 3,
        "the stack runs: {:?}",
        carrying(&marker)
    );
    terminal.ctrl_c(run);
}

// `make cluster`: the banner's own steps, as a person follows them. No Node at first; the Pod it
// suggests pends; the scale-up it suggests (cluster-autoscaler's call, made by `fleet autoscaler`)
// boots a bench whose Node the scheduler places the Pod on; Ctrl-C leaves nothing, the control
// plane included.
#[test]
fn make_cluster_runs_a_pod_on_a_bench_it_powers_on_and_stops_leaving_nothing() {
    let mut terminal = Terminal::start(&["cluster"]);
    // A first run builds the control plane (make test has built it already).
    let banner = terminal.banner(Duration::from_secs(180));
    let word = |prefix: &str| {
        banner
            .text
            .split_whitespace()
            .find_map(|w| w.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("the banner names {prefix}: {}", banner.text))
            .to_owned()
    };
    let kubeconfig = word("KUBECONFIG=");
    let path = word("PATH=").replace(":$PATH", "");
    let kubectl = |args: &[&str]| {
        let o = Command::new(format!("{path}/kubectl"))
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap();
        assert!(o.status.success(), "kubectl {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(
        kubectl(&["get", "nodes", "-o", "name"]),
        "",
        "every bench off, no Node"
    );
    let run_line = banner
        .text
        .lines()
        .find(|l| l.trim_start().starts_with("kubectl run"))
        .expect("the banner's Pod");
    let quoted = run_line.split('\'').nth(1).expect("the overrides");
    kubectl(&[
        "run",
        "wants-sim",
        "--image=registry.invalid/any",
        &format!("--overrides={quoted}"),
    ]);
    let phase = || kubectl(&["get", "pod", "wants-sim", "-o", "jsonpath={.status.phase}"]);
    wait_for("the Pod to pend", Duration::from_secs(20), || {
        phase() == "Pending"
    });
    let words: Vec<&str> = banner.text.split_whitespace().collect();
    let grpc = words
        .windows(2)
        .find(|w| w[0] == "--grpc-addr")
        .map(|w| w[1].to_owned())
        .expect("the banner names the provider's address");
    let increase = banner
        .text
        .lines()
        .find(|l| l.contains("increase sim 1"))
        .expect("the banner's scale-up");
    assert!(increase.contains(&grpc), "{increase}");
    let o = fleet(
        &banner.url,
        &["autoscaler", "--grpc-addr", &grpc, "increase", "sim", "1"],
    );
    assert!(o.status.success(), "{o:?}");
    wait_for("the Pod to run", Duration::from_secs(60), || {
        phase() == "Running"
    });
    let node = kubectl(&["get", "pod", "wants-sim", "-o", "jsonpath={.spec.nodeName}"]);
    assert!(node.starts_with("sim-0"), "{node}");
    terminal.ctrl_c(&banner.run);
}

// The live view shows why `fleet serve` died (here: the provider's port is taken) and stops,
// instead of looping on `no catalog`.
#[test]
fn make_up_says_why_fleet_serve_died() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let o = Command::new("bash")
        .arg("scripts/up.sh")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("FLEET_BIN", env!("CARGO_BIN_EXE_fleet"))
        .env("FLEET_GRPC_ADDR", &addr)
        .env_remove("FLEET_REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("fleet serve stopped"), "{err}");
    assert!(err.contains(&format!("listening on {addr}")), "{err}");
    drop(taken);
}
