//! Compiles the externalgrpc proto with protox (no system protoc) into the provider's wire types,
//! and records the git commit the binary was built from (for `fleet version`), when built from a
//! checkout.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalgrpc.proto");
    let fds = protox::compile(["proto/externalgrpc.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    // The commit, when this is a git checkout; a build from a source tarball says so instead.
    // (Watched only where they exist: a missing path would rerun this script on every build.)
    for watched in [".git/HEAD", ".git/refs/heads"] {
        if std::path::Path::new(watched).exists() {
            println!("cargo:rerun-if-changed={watched}");
        }
    }
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "not built from a git checkout".to_owned());
    println!("cargo:rustc-env=FLEET_GIT_COMMIT={commit}");
    Ok(())
}
