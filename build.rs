//! Compiles the externalgrpc proto and the trimmed Kubernetes messages with protox (no system
//! protoc) into the provider's wire types, records the git commit the binary was built from (for
//! `fleet version`), when built from a checkout, and writes the SHA-1 of each Lua script as Redis
//! names it (`store::script`), so a script is called by its hash without the binary hashing
//! anything.

use sha1::{Digest, Sha1};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    script_hashes()?;
    #[cfg(feature = "provider")]
    wire_types()?;
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

/// `OUT_DIR/lua/<file>.sha1` for every script of `src/store/lua/`: the hex SHA-1 of the prelude and
/// the script, the text `store::script::script!` sends, which is what Redis hashes (`EVALSHA`).
fn script_hashes() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::Path::new("src/store/lua");
    println!("cargo:rerun-if-changed={}", dir.display());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("lua");
    std::fs::create_dir_all(&out)?;
    let prelude = std::fs::read(dir.join("prelude.lua"))?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.ends_with(".lua") || name == "prelude.lua" {
            continue;
        }
        let mut hasher = Sha1::new();
        hasher.update(&prelude);
        hasher.update(std::fs::read(&path)?);
        let hex: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        std::fs::write(out.join(format!("{name}.sha1")), hex)?;
    }
    Ok(())
}

/// The provider's wire types (only with the `provider` feature, whose build-dependencies these
/// are): the externalgrpc service, and the Kubernetes messages of the template and the priced
/// pod, trimmed from upstream's (the file says why); maps as BTreeMap, as k8s-pb had them: keys in
/// order, so a template encodes to the same bytes every time.
#[cfg(feature = "provider")]
fn wire_types() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalgrpc.proto");
    let fds = protox::compile(["proto/externalgrpc.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto/k8s.proto");
    let k8s = protox::compile(["proto/k8s.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .btree_map(".")
        .compile_fds(k8s)?;
    Ok(())
}
