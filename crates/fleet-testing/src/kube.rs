//! A real Kubernetes control plane on loopback for the cluster tests: etcd, kube-apiserver (RBAC
//! on, certificates made at start), kube-controller-manager, kube-scheduler and kwok playing the
//! kubelets, all built from their Go modules into one binary (`peers/`, `scripts/peers.sh`) and
//! started by its `stack` command in a temporary directory. Killed, with every component, when the
//! handle drops. A missing binary is an error saying how to build it: the tests fail, never skip.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::ServerError;

/// The environment variable that names the directory of `k8s-local` (what `scripts/peers.sh`
/// prints); without it the script is run to find, or build, it.
pub const PEERS_ENV: &str = "FLEET_PEERS_BIN";

/// How long the whole stack may take to start: the API server's first start migrates storage and
/// makes its bootstrap objects.
const START_BOUND: Duration = Duration::from_secs(180);

/// The label that makes a Node kwok's to play: its kubelet beats while the Node has it.
pub const KWOK_LABEL: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// A running control plane.
pub struct KubeStack {
    child: Child,
    /// The directory of `k8s-local` and its `kubectl`.
    pub bin: PathBuf,
    lines: mpsc::Receiver<String>,
    dir: tempfile::TempDir,
    /// The API server's URL.
    pub server: String,
    /// A kubeconfig of the cluster's administrator (`system:masters`).
    pub admin: PathBuf,
    /// The API server's audit log: one JSON line a request, who made it and how it was answered.
    pub audit: PathBuf,
}

/// The directory of the `k8s-local` binary: `FLEET_PEERS_BIN`, else what `scripts/peers.sh`
/// prints (building it the first time, which takes many minutes).
pub fn peers_bin() -> Result<PathBuf, ServerError> {
    if let Some(dir) = std::env::var_os(PEERS_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| ServerError::Kube(format!("running {}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(ServerError::Kube(format!(
            "{} could not build k8s-local (Go 1.26 and the Go module proxy are needed)",
            script.display()
        )));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

impl KubeStack {
    /// Starts the stack and waits until every component answers.
    pub fn start() -> Result<KubeStack, ServerError> {
        let bin = peers_bin()?;
        let binary = bin.join("k8s-local");
        let dir = tempfile::Builder::new()
            .prefix("fleet-kube-")
            .tempdir()
            .map_err(ServerError::TempDir)?;
        let mut command = Command::new(&binary);
        command
            .arg("stack")
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // A group of its own: the handle kills the stack and, through their parent-death
            // signal, its components.
            .process_group(0);
        let mut child = command.spawn().map_err(|e| {
            ServerError::Kube(format!(
                "{}: {e}; build it with scripts/peers.sh",
                binary.display()
            ))
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let ready = match lines.recv_timeout(START_BOUND) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                return Err(ServerError::Kube(format!(
                    "the stack did not start within {START_BOUND:?}; its logs are in {}",
                    dir.path().display()
                )));
            }
        };
        let ready: serde_json::Value = serde_json::from_str(&ready).map_err(|e| {
            ServerError::Kube(format!("the stack's ready line is no JSON ({e}): {ready}"))
        })?;
        let field = |name: &str| -> Result<String, ServerError> {
            ready[name].as_str().map(str::to_owned).ok_or_else(|| {
                ServerError::Kube(format!("the stack's ready line lacks {name}: {ready}"))
            })
        };
        Ok(KubeStack {
            server: field("server")?,
            admin: PathBuf::from(field("admin")?),
            audit: PathBuf::from(field("audit")?),
            child,
            bin,
            lines,
            dir,
        })
    }

    /// The stack's directory: its certificates, data and each component's log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The control plane's own `kubectl` (of its release, built beside it).
    pub fn kubectl_path(&self) -> PathBuf {
        self.bin.join("kubectl")
    }

    /// Runs `kubectl` as the administrator.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(self.kubectl_path())
            .arg("--kubeconfig")
            .arg(&self.admin)
            .args(args)
            .output()
            .expect("kubectl beside k8s-local (scripts/peers.sh links it)")
    }

    /// `kubectl` that must succeed: its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Applies `yaml` as the administrator.
    pub fn apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = Command::new(self.kubectl_path())
            .arg("--kubeconfig")
            .arg(&self.admin)
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl beside k8s-local (scripts/peers.sh links it)");
        let mut stdin = child.stdin.take().expect("stdin is piped");
        stdin
            .write_all(yaml.as_bytes())
            .expect("writing the manifest");
        drop(stdin);
        let o = child.wait_with_output().expect("kubectl apply");
        assert!(
            o.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// A kubeconfig that authenticates as the ServiceAccount `namespace/name`, with a token the
    /// API server issued for it (TokenRequest): the identity a Pod of that account runs as.
    pub fn identity(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&[
            "create",
            "token",
            name,
            "-n",
            namespace,
            "--duration",
            "24h",
        ]);
        let ca = self.dir.path().join("pki/ca.crt");
        let path = self
            .dir
            .path()
            .join(format!("{namespace}-{name}.kubeconfig"));
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {name}\nclusters:\n- name: k8s-local\n  \
             cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  \
             user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: \
             k8s-local\n    user: {name}\n    namespace: {namespace}\n",
            server = self.server,
            ca = ca.display(),
            token = token.trim(),
        );
        std::fs::write(&path, text).expect("writing the kubeconfig");
        path
    }

    /// Stops the API server (the rest of the stack runs on), and waits until it is down.
    pub fn stop_apiserver(&self) {
        self.signal(Signal::SIGUSR1);
        self.wait_line("\"apiserver\":\"stopped\"");
    }

    /// Starts the API server again, and waits until it is ready.
    pub fn start_apiserver(&self) {
        self.signal(Signal::SIGUSR2);
        self.wait_line("\"apiserver\":\"started\"");
    }

    fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).expect("signalling the stack");
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits an i32"))
    }

    fn wait_line(&self, marker: &str) {
        loop {
            match self.lines.recv_timeout(START_BOUND) {
                Ok(line) if line.contains(marker) => return,
                Ok(_) => {}
                Err(_) => panic!(
                    "the stack did not say {marker} within {START_BOUND:?}; its logs are in {}",
                    self.dir.path().display()
                ),
            }
        }
    }
}

impl Drop for KubeStack {
    fn drop(&mut self) {
        // The whole group: the stack and anything it started. A signal call, not kill(1): the
        // machine's procps kill reads `kill -KILL -18560` as kill(-1), every process there is.
        let _ = killpg(self.pid(), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
