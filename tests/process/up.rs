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

#[test]
fn make_up_stops_on_ctrl_c_leaving_nothing_even_with_a_startup_in_flight() {
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
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let grpc = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut cmd = Command::new("bash");
    cmd.arg("scripts/up.sh")
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
    // controlling terminal is the pseudo-terminal, as a login shell's would be.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut stack = Stack {
        session: child.id() as i32,
        marker: None,
    };
    drop(cmd);
    let screen = Arc::new(Mutex::new(String::new()));
    let mut reader = std::fs::File::from(master.try_clone().unwrap());
    let shown = screen.clone();
    // Told when the terminal's output has all been read: the script's last words may still be
    // in the terminal when its exit is seen (CI read the screen without them once).
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
    let text = || screen.lock().unwrap().clone();
    wait_for("the banner", Duration::from_secs(60), || {
        text().contains("Ctrl-C stops everything")
    });
    let banner = text();
    let url = banner
        .split_whitespace()
        .find(|w| w.starts_with("redis+unix://"))
        .expect("the banner names the Redis URL")
        .to_owned();
    let run = url
        .trim_start_matches("redis+unix://")
        .trim_end_matches("/redis.sock")
        .to_owned();
    stack.marker = Some(format!("SIM_DIR={run}"));
    let fleet = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_fleet"))
            .args(args)
            .env("FLEET_REDIS_URL", &url)
            .output()
            .unwrap()
    };
    // The banner names the live page, and it answers with the stack's slots.
    let page = banner
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .expect("the banner names the live page")
        .trim_end_matches('/')
        .to_owned();
    let (status, body) = support::http_get(&page, "/");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<title>fleet</title>"), "{body}");
    // A claim to ready, as the quick start does.
    let o = fleet(&["claim", "sim-01", "--wait"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains(": ready after"));
    wait_for("the live view to show it", Duration::from_secs(20), || {
        let t = text();
        t.contains("== slots ==") && t.contains("sim-01-")
    });
    // Another, interrupted while its startup runs.
    assert!(fleet(&["claim", "sim-02"]).status.success());
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
    (&std::fs::File::from(master)).write_all(&[0x03]).unwrap();
    let stopping = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(20),
            "up.sh did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", text());
    // A process still holding the terminal keeps the read open: the check below names it.
    let _ = all_read.recv_timeout(Duration::from_secs(20));
    let left = carrying(&marker);
    assert!(left.is_empty(), "left behind: {left:#?}");
    assert!(!std::path::Path::new(&run).exists(), "{run} is removed");
    assert!(text().contains("nothing is left running"), "{}", text());
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
