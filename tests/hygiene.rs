//! Tests on the source itself: the rules that a reviewer would otherwise have to remember.

use std::path::{Path, PathBuf};

fn sources(dir: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "lua") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut out);
    out
}

/// The source without its `#[cfg(test)]` module (tests may do what the code may not).
fn code(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// A file that is itself a test module (`mod tests;` and what it includes).
fn is_test_file(path: &Path) -> bool {
    let inner = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path);
    inner.file_name().is_some_and(|n| n == "tests.rs")
        || inner.components().any(|c| c.as_os_str() == "tests")
}

// SPEC §1: `src/domain/` has no I/O, no clock, no environment, no async.
#[test]
fn the_domain_is_pure() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::env",
        "std::process",
        "std::io",
        "tokio",
        "redis",
        "tonic",
        "kube",
        "Utc::now",
        "Local::now",
        "SystemTime",
        "Instant",
        "async ",
        ".await",
        "tracing",
        "println!",
        "eprintln!",
    ];
    let files = sources("src/domain");
    assert!(!files.is_empty());
    for (path, text) in files {
        for word in forbidden {
            assert!(
                !code(&text).contains(word),
                "{} uses {word}: the domain must stay pure",
                path.display()
            );
        }
    }
}

// SPEC §2.8: the page is never authority. Nothing reads a `fleet state -o tsv` page back: no code
// opens a .tsv file or splits rows on tabs to recover states.
#[test]
fn no_code_reads_the_tsv_page_back() {
    for dir in ["src", "cmd"] {
        for (path, text) in sources(dir) {
            let code = code(&text);
            for word in [".tsv", "split('\\t')", "split(\"\\t\")", "fleet-state"] {
                assert!(
                    !code.contains(word),
                    "{} reads a page back ({word}): the keys are the present",
                    path.display()
                );
            }
        }
    }
}

// SPEC §2.3: every Redis key is named in the key module; no other file spells a key.
#[test]
fn every_key_is_named_in_the_key_module() {
    for (path, text) in sources("src") {
        if path.ends_with("store/keys.rs") {
            continue;
        }
        let code = code(&text);
        for word in [":bench:", ":benches", ":holds", "{fleet}"] {
            assert!(
                !code.contains(word),
                "{} names a key ({word}): use store::keys",
                path.display()
            );
        }
    }
}

// STYLE: no unwrap() outside tests.
#[test]
fn no_unwrap_outside_tests() {
    for dir in ["src", "cmd"] {
        for (path, text) in sources(dir) {
            if path.starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testing"))
                || is_test_file(&path)
            {
                continue;
            }
            assert!(
                !code(&text).contains(".unwrap()"),
                "{} calls unwrap() outside tests",
                path.display()
            );
        }
    }
}

// SPEC §3.10: the slot's history has one writer. Its fields are private to
// src/domain/history.rs, so the compiler already refuses a write elsewhere; this holds the same
// on the source, so that a future "just to know what happened last" accessor is caught in review.
#[test]
fn nothing_outside_the_history_writer_touches_the_history() {
    let writes = [
        ".previous_phase =",
        ".activations_total =",
        ".activations_last_24h =",
        ".recent_transitions.",
        ".recent_activations.",
        "history.last_transition_time =",
    ];
    for (path, text) in sources("src") {
        if path.ends_with("domain/history.rs") {
            continue;
        }
        for word in writes {
            assert!(
                !text.contains(word),
                "{} writes the history ({word}): only History::record may",
                path.display()
            );
        }
    }
}

// SPEC §3.1: the law is one match with no wildcard arm, so a new input does not compile until
// the table is extended.
#[test]
fn the_law_and_the_state_machine_have_no_wildcard_arm() {
    for file in ["src/domain/law.rs", "src/domain/fsm.rs"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        assert!(!code(&text).contains("_ =>"), "{file} has a wildcard arm");
    }
}

// SPEC §1, §6.1: the generated wire types never leave `src/provider/`; the rest of fleet speaks
// domain types and the provider's own rows.
#[test]
fn the_generated_wire_types_stay_in_the_provider_folder() {
    let provider = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/provider");
    let leaks: Vec<String> = sources("src")
        .into_iter()
        .filter(|(path, _)| !path.starts_with(&provider))
        .filter(|(_, text)| {
            code(text).contains("provider::wire") || code(text).contains("include_proto!")
        })
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        leaks.is_empty(),
        "wire types used outside src/provider: {leaks:?}"
    );
}

/// The `[Service]` settings of a unit in `deploy/systemd/`, as `key=value` lines.
fn unit(name: &str) -> (PathBuf, Vec<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/systemd")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let service = text
        .split("[Service]")
        .nth(1)
        .and_then(|s| s.split("[Install]").next())
        .unwrap_or_else(|| panic!("{name}: no [Service] section"));
    let lines = service
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    (path, lines)
}

#[test]
fn the_systemd_units_are_hardened_and_valid() {
    // Issue 11 #17: the controller's unit runs as a user of its own, with a read-only system,
    // its secrets in an EnvironmentFile, and operations that outlive a restart (KillMode=process).
    let (serve, settings) = unit("fleet-serve.service");
    for want in [
        "User=fleet",
        "EnvironmentFile=/etc/fleet/serve.env",
        "KillMode=process",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "StateDirectory=fleet",
        "CapabilityBoundingSet=",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(settings.iter().any(|s| s == want), "fleet-serve: {want}");
    }
    assert!(
        !settings
            .iter()
            .any(|s| s.starts_with("Environment=FLEET_REDIS")),
        "no secret inline in the unit"
    );
    let (agent, settings) = unit("fleet-agent@.service");
    for want in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
    ] {
        assert!(settings.iter().any(|s| s == want), "fleet-agent@: {want}");
    }
    // Where systemd is installed, it reads both units without a complaint about them (an
    // unknown or misspelled setting is a warning naming the file, and exit 0, so stderr is read).
    let Some(analyze) = which("systemd-analyze") else {
        eprintln!("systemd-analyze is not installed: the units' settings were checked as text");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut verify = std::process::Command::new(analyze);
    verify.arg("verify");
    for (path, name) in [
        (serve, "fleet-serve.service"),
        (agent, "fleet-agent@x.service"),
    ] {
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("/usr/local/bin/fleet", env!("CARGO_BIN_EXE_fleet"));
        let copy = dir.path().join(path.file_name().unwrap());
        std::fs::write(&copy, text).unwrap();
        verify.arg(dir.path().join(name));
    }
    let o = verify.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let about_ours: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains(dir.path().to_str().unwrap()) || l.contains("fleet"))
        .collect();
    assert!(
        o.status.success() && about_ours.is_empty(),
        "{about_ours:?}\n{stderr}"
    );
}

/// The path of `program` on PATH.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}
