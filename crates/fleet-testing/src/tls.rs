//! A private certificate authority for the TLS setups of the harness (`rediss://`,
//! `rediss+sentinel://`, `rediss+cluster://`): a CA and one server certificate for 127.0.0.1
//! that it signed, made with the installed `openssl` in a temporary directory that is removed
//! when the CA drops. Every server of a setup presents the same certificate, and uses it as its
//! client certificate towards the others (a replica's link to its primary, a sentinel's links,
//! the cluster bus); clients are not asked for one (`tls-auth-clients no`), so fleet needs only
//! `--redis-ca`. A missing `openssl` is an error with an install hint: tests fail on it, never
//! skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ServerError;

/// The files a TLS server of the harness is started with.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA's certificate (PEM): what a client trusts (`--redis-ca`).
    pub ca: PathBuf,
    /// The server's certificate (PEM), for `IP:127.0.0.1`, signed by the CA.
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// The `redis-server` arguments of a server that speaks TLS with these files (the port
    /// itself is `--tls-port`, set by the harness): replication and the sentinels' links in TLS
    /// too, no client certificate asked for.
    pub(crate) fn server_args(&self) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        for (flag, path) in [
            ("--tls-cert-file", &self.cert),
            ("--tls-key-file", &self.key),
            ("--tls-ca-cert-file", &self.ca),
        ] {
            args.push(flag.to_owned());
            args.push(path.display().to_string());
        }
        args.extend(["--tls-auth-clients", "no", "--tls-replication", "yes"].map(str::to_owned));
        args
    }

    /// The same, as lines of a configuration file (a sentinel's).
    pub(crate) fn config_lines(&self) -> String {
        format!(
            "tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients no\n\
             tls-replication yes\n",
            self.cert.display(),
            self.key.display(),
            self.ca.display()
        )
    }
}

/// A CA and a server certificate, alive as long as this value.
pub struct TestCa {
    dir: tempfile::TempDir,
    files: TlsFiles,
}

impl TestCa {
    /// Makes the CA and the server certificate (RSA 2048, valid one day).
    pub fn new() -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("fleet-tls-")
            .tempdir()
            .map_err(ServerError::TempDir)?;
        let d = dir.path();
        std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n")
            .map_err(ServerError::TempDir)?;
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "1",
                "-subj",
                "/CN=fleet-test-ca",
            ],
        )?;
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        )?;
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "1",
                "-extfile",
                "san.ext",
            ],
        )?;
        let files = TlsFiles {
            ca: d.join("ca.pem"),
            cert: d.join("server.pem"),
            key: d.join("server.key"),
        };
        Ok(TestCa { dir, files })
    }

    /// The files servers are started with.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The CA's certificate, for `--redis-ca`.
    pub fn ca(&self) -> &Path {
        &self.files.ca
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), ServerError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(ServerError::OpensslMissing)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ServerError::Tls(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
