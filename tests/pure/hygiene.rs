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

/// The source of every crate of the product: fleet's own and the core's.
fn product_sources() -> Vec<(PathBuf, String)> {
    let mut all = sources("src");
    all.extend(sources(CORE));
    all.extend(sources(TRANSPORT));
    all
}

/// The Redis transport's source (SPEC §1): connecting, URLs, Sentinel, Cluster.
const TRANSPORT: &str = "crates/fleet-redis/src";

/// The core crate's source (SPEC §1): the domain and the units.
const CORE: &str = "crates/fleet-core/src";

/// The source without its `#[cfg(test)]` module (tests may do what the code may not).
fn code(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// `path` as the repository names it (relative to its root), for messages and comparisons.
fn shown(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Code the code rules read: not a test module, not a Lua script.
fn is_rust_code(path: &Path) -> bool {
    !is_test_file(path) && path.extension().is_none_or(|e| e != "lua")
}

/// A file that is itself a test module (`mod tests;` and what it includes).
fn is_test_file(path: &Path) -> bool {
    let inner = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path);
    inner.file_name().is_some_and(|n| n == "tests.rs")
        || inner.components().any(|c| c.as_os_str() == "tests")
}

// SPEC §1: the domain has no I/O, no clock, no environment, no async. The core crate's
// dependencies hold most of it (no tokio, redis, kube or tonic to call, chrono without its clock),
// and this holds the rest (std's own I/O, clock and environment).
// SPEC §4.7: every row a verb writes for programs is a type of the read model (`src/views/`, or
// the presence decision's own `domain::state::Row`), and `-o` is one type, `cli::output::Format`,
// each verb offering its formats: rows lived in six rooms behind four format enums.
#[test]
fn rows_live_in_the_read_model_behind_one_format() {
    let mut found = Vec::new();
    for (path, text) in sources("src") {
        let shown = shown(&path);
        let code = code(&text);
        let in_cli = shown.starts_with("src/cli/") || shown == "src/provider/client.rs";
        if in_cli && shown != "src/cli/output.rs" && code.contains("Serialize)]") {
            found.push(format!(
                "{shown} declares a row: move it to src/views/rows.rs"
            ));
        }
        for line in code.lines() {
            let is_format = line.trim_start().starts_with("pub enum ")
                && line.contains("Format")
                && !line.contains("LogFormat");
            if is_format && shown != "src/cli/output.rs" {
                found.push(format!(
                    "{shown}: {} (use cli::output::Format)",
                    line.trim()
                ));
            }
        }
    }
    assert!(found.is_empty(), "\n{}", found.join("\n"));
}

// SPEC.md is read whole by whoever changes fleet: it states rules, and what explains or measures
// them lives in docs/ (the protocol, the figures), so it stays within a length one reads.
#[test]
fn the_spec_stays_within_its_length() {
    let spec =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("SPEC.md")).unwrap();
    let lines = spec.lines().count();
    assert!(
        lines <= SPEC_LINES,
        "SPEC.md is {lines} lines, over its {SPEC_LINES}: state a rule once (docs/protocol.md holds \
         the protocol's, docs/measurements.md the figures)"
    );
}

const SPEC_LINES: usize = 1_400;

// STYLE: comments say why, never which issue. An issue tracker is not in the repository, so "issue
// 30" says nothing to the reader; the reason itself, or the SPEC section, does.
#[test]
fn no_comment_cites_an_issue() {
    let mut found = Vec::new();
    let mut all = Vec::new();
    for dir in [
        "src",
        "cmd",
        "tests",
        "benches",
        CORE,
        TRANSPORT,
        "crates/fleet-testing/src",
    ] {
        all.extend(sources(dir));
    }
    for extra in [
        "Cargo.toml",
        "Makefile",
        "scripts/bench-anchor.sh",
        "scripts/bench-compare.sh",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(extra);
        all.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
    }
    for (path, text) in all {
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let cites = lower.match_indices("issue").any(|(at, word)| {
                let rest = lower[at + word.len()..].trim_start_matches(['s', ' ', '#']);
                rest.starts_with(|c: char| c.is_ascii_digit())
            });
            if cites {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "say why, or the SPEC section, not the issue:\n{}",
        found.join("\n")
    );
}

// Tool output and logs are not the project's: a mutation run's report, a build, a coverage
// profile or a merge's leftovers are made again by whoever needs them, and kept out of the tree
// by `.gitignore`. Git holds the history; the tree holds the source.
#[test]
fn git_tracks_no_tool_output() {
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git, to list the tracked files");
    assert!(listed.status.success(), "git ls-files: {listed:?}");
    let junk: Vec<String> = listed
        .stdout
        .split(|b| *b == 0)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| is_tool_output(p))
        .collect();
    assert!(
        junk.is_empty(),
        "tool output is tracked (git rm --cached it, and ignore it): {junk:?}"
    );
}

/// Whether a tracked path is a tool's output: a directory that a tool writes, or a file of a kind
/// that only tools leave.
fn is_tool_output(path: &str) -> bool {
    let dirs = ["mutants.out", "target", "node_modules", "__pycache__"];
    let in_dir = path.split('/').rev().skip(1).any(|part| {
        dirs.iter()
            .any(|d| part == *d || part.starts_with("mutants.out"))
    });
    let kinds = [".log", ".profraw", ".orig", ".rej", ".pyc"];
    in_dir || kinds.iter().any(|k| path.ends_with(k))
}

#[test]
fn tool_output_is_told_from_the_source() {
    for junk in [
        "mutants.out/caught.txt",
        "mutants.out.old/log/x.log",
        "a/target/debug/fleet",
        "examples/python/__pycache__/x.pyc",
        "fleet.log",
        "src/x.rs.orig",
    ] {
        assert!(is_tool_output(junk), "{junk}");
    }
    for source in [
        "src/lib.rs",
        "docs/target.md",
        "src/cli/log.rs",
        "mutants.md",
    ] {
        assert!(!is_tool_output(source), "{source}");
    }
}

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
    let files = sources(&format!("{CORE}/domain"));
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

// SPEC §6.3: the provider's prices are pure rules over the configuration and the request, as the
// domain's are; they stay in the provider only because they read its wire types. It said "Pure"
// while nothing held it.
#[test]
fn the_pricing_rules_are_pure() {
    let text = std::fs::read_to_string("src/provider/pricing.rs").unwrap();
    let forbidden = [
        "std::fs",
        "std::net",
        "std::env",
        "std::process",
        "std::io",
        "tokio::",
        "redis::",
        "tonic::",
        "kube::",
        "Utc::now",
        "Local::now",
        "SystemTime::now",
        "Instant",
        "async ",
        ".await",
        "tracing",
        "println!",
        "eprintln!",
    ];
    for word in forbidden {
        assert!(
            !code(&text).contains(word),
            "src/provider/pricing.rs uses {word}: the pricing rules must stay pure"
        );
    }
}

// SPEC §2.8: the page is never authority. Nothing reads a `fleet state -o tsv` page back: no code
// opens a .tsv file or splits rows on tabs to recover states.
#[test]
fn no_code_reads_the_tsv_page_back() {
    for dir in ["src", "cmd", CORE, TRANSPORT] {
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
    for (path, text) in product_sources() {
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

/// The reads of a whole file outside the bounded reader, each with why it may: a file of the
/// kernel's, not one fleet is given, or a reader on its way to `fleet_redis::file::read`. An entry
/// that no longer occurs fails the test, so the list stays exact.
const WHOLE_READS: &[(&str, &str)] = &[
    ("src/agent/mod.rs", "/proc/loadavg, the kernel's one line"),
    (
        "src/cli/serve/mod.rs",
        "/proc/sys/kernel/hostname, the kernel's one line",
    ),
    (
        "src/cli/secrets.rs",
        "/proc/self/stat, the kernel's one line",
    ),
];

// SPEC §7 S10: a file fleet is given (a token, a password, a PEM file, the configuration) is read
// through the one bounded reader, `fleet_redis::file::read`, never whole: `--ui-token-file
// /dev/zero` grew `fleet serve` to 24 GB.
#[test]
fn every_file_fleet_is_given_is_read_through_the_bounded_reader() {
    let mut seen = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for dir in ["src", "cmd", CORE, TRANSPORT] {
        for (path, text) in sources(dir) {
            if is_test_file(&path) {
                continue;
            }
            let inner = shown(&path);
            if inner == "crates/fleet-redis/src/file.rs" {
                continue;
            }
            let code = code(&text);
            let whole = [
                "fs::read(",
                "fs::read_to_string(",
                "File::open(",
                "tokio::fs::",
            ]
            .into_iter()
            .find(|w| code.contains(w));
            match (whole, WHOLE_READS.iter().find(|(p, _)| *p == inner)) {
                (Some(_), Some(known)) => {
                    seen.insert(known.0);
                }
                (Some(word), None) => failures.push(format!(
                    "{inner} reads a file with {word}: read a file fleet is given with \
                     fleet_redis::file::read and its kind's limit"
                )),
                (None, _) => {}
            }
        }
    }
    for (known, _) in WHOLE_READS {
        if !seen.contains(known) {
            failures.push(format!(
                "WHOLE_READS lists {known}, which reads no whole file today: remove it"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// STYLE: no unwrap() outside tests.
#[test]
fn no_unwrap_outside_tests() {
    for dir in ["src", "cmd", CORE, TRANSPORT] {
        for (path, text) in sources(dir) {
            if is_test_file(&path) {
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
// crates/fleet-core/src/domain/history.rs, so the compiler already refuses a write elsewhere; this holds the same
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
    for (path, text) in product_sources() {
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
    for file in [
        "crates/fleet-core/src/domain/law.rs",
        "crates/fleet-core/src/domain/fsm.rs",
    ] {
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
    let leaks: Vec<String> = product_sources()
        .into_iter()
        .filter(|(path, _)| !path.starts_with(&provider))
        .filter(|(_, text)| {
            ["provider::wire", "provider::k8s", "include_proto!"]
                .iter()
                .any(|word| code(text).contains(word))
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
    // The controller's unit runs as a user of its own, with a read-only system,
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
    // The small agent, not `fleet agent`: the same flags and variables, 5 MB.
    assert!(
        settings
            .iter()
            .any(|s| s == "ExecStart=/usr/local/bin/fleet-agent %i"),
        "fleet-agent@ runs fleet-agent: {settings:?}"
    );
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
        // verify checks that ExecStart names an executable: `fleet-agent` is another package's
        // binary, so `fleet`'s stands in for it.
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("/usr/local/bin/fleet-agent", env!("CARGO_BIN_EXE_fleet"))
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

// ---------------------------------------------------------------------------------------------
// SPEC §1: every arrow points down. The imports between fleet's own modules are read from the
// source (`use crate::…`, `crate::x::…` and `super::…` paths, outside tests) and checked twice:
// between top-level modules against their layer, and between the submodules of one module for
// cycles.

/// The layer of every top-level module: a module may import only modules of a strictly lower
/// rank, so an import upward, or sideways within one rank, fails.
const RANKS: &[(&str, u8)] = &[
    ("cli", 8),
    ("agent", 7),
    ("provider", 7),
    ("kubernetes", 7),
    ("page", 7),
    ("reconcile", 6),
    ("views", 6),
    ("requests", 5),
    ("lifecycle", 5),
    ("telemetry", 5),
    ("store", 4),
    ("config", 3),
    ("power", 2),
    ("domain", 1),
    ("units", 0),
];

/// Imports, as (from, to) top-level modules, that break the ranks today and are known: each is
/// on its way out, and an entry that no longer occurs fails the test, so the list stays exact.
/// Empty: by these ranks the provider's use of `reconcile::{metrics, requests}` points down
/// (provider 7, reconcile 6), and nothing else goes up or sideways.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

/// One reference from fleet's code to a module path of fleet.
#[derive(Debug)]
struct Import {
    file: PathBuf,
    line: usize,
    /// The module the file is (`["cli", "claim"]` for `src/cli/claim.rs`).
    from: Vec<String>,
    /// The path it names, from the crate root (`["store", "claims", "ClaimStore"]`).
    to: Vec<String>,
}

impl Import {
    fn place(&self) -> String {
        format!("{}:{}", shown(&self.file), self.line)
    }
}

/// The module a source file is: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is
/// the crate root.
fn module_of(path: &Path) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let inner = path.strip_prefix(&src).unwrap().with_extension("");
    let mut parts: Vec<String> = inner
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The code with its comments and the contents of its string and char literals blanked, line
/// breaks kept, so that only real paths are read and every line number stays true.
fn blank_comments_and_literals(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let end = if c == '/' && next == Some('/') {
            chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |n| i + n)
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < chars.len() && depth > 0 {
                match (chars[j], chars.get(j + 1)) {
                    ('/', Some('*')) => (depth, j) = (depth + 1, j + 2),
                    ('*', Some('/')) => (depth, j) = (depth - 1, j + 2),
                    _ => j += 1,
                }
            }
            j
        } else if c == 'r'
            && (i == 0 || !ident(chars[i - 1]) || chars[i - 1] == 'b')
            && matches!(next, Some('"' | '#'))
        {
            // A raw string: r"…", r#"…"#, br##"…"##.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body = i + 2 + hashes;
            (body..chars.len())
                .find(|&j| chars[j..].starts_with(&close))
                .map_or(chars.len(), |j| j + close.len())
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c == '\'' && next == Some('\\') {
            // An escaped char literal: '\n', '\'', '\u{1F600}'.
            (i + 3..chars.len())
                .find(|&j| chars[j] == '\'')
                .map_or(chars.len(), |j| j + 1)
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            // Code, or a lifetime.
            out.push(c);
            i += 1;
            continue;
        };
        let end = end.min(chars.len());
        out.extend(chars[i..end].iter().map(|&c| blank(c)));
        i = end;
    }
    out
}

/// The blanked code without its `#[cfg(test)]` items (a `mod tests;` line, a `mod tests { … }`
/// block, or any other item), wherever in the file they are.
fn without_tests(blanked: &str) -> String {
    let mut out = blanked.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(test)]") {
        let start = from + found;
        let rest = &out[start..];
        let end = match (rest.find(';'), rest.find('{')) {
            (Some(semi), Some(brace)) if semi < brace => start + semi + 1,
            (_, Some(brace)) => {
                let mut depth = 0;
                let close = rest[brace..].char_indices().find_map(|(i, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(brace + i + 1)
                });
                start + close.unwrap_or(rest.len())
            }
            (Some(semi), None) => start + semi + 1,
            (None, None) => out.len(),
        };
        let blank: String = out[start..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(start..end, &blank);
        from = start + blank.len();
    }
    out
}

/// Reads the paths that start at `text[pos..]` (after `crate::` or `super::`, already resolved
/// into `base`), a use tree's braces included, into `out` as (byte offset, full path).
struct PathReader<'a> {
    text: &'a str,
    pos: usize,
}

impl PathReader<'_> {
    fn skip_space(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let found = self.text[self.pos..].starts_with(token);
        if found {
            self.pos += token.len();
        }
        found
    }

    fn ident(&mut self) -> Option<&str> {
        self.skip_space();
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (len > 0).then(|| {
            self.pos += len;
            &rest[..len]
        })
    }

    /// One path or use tree below `base`.
    fn tree(&mut self, mut base: Vec<String>, out: &mut Vec<(usize, Vec<String>)>) {
        loop {
            let start = self.pos;
            if self.eat("{") {
                loop {
                    if self.eat("}") {
                        return;
                    }
                    self.tree(base.clone(), out);
                    if self.eat("as") {
                        self.ident();
                    }
                    if !self.eat(",") {
                        self.eat("}");
                        return;
                    }
                }
            }
            if self.eat("*") {
                out.push((start, base));
                return;
            }
            match self.ident().map(str::to_owned) {
                Some(s) if s == "self" => {}
                Some(s) if s == "super" => {
                    base.pop();
                }
                Some(s) => base.push(s),
                None => {}
            }
            let after = self.pos;
            if !self.eat("::") {
                self.pos = after;
                out.push((start, base));
                return;
            }
        }
    }
}

/// Every reference a source file makes to a module path of fleet, outside its tests.
fn imports_of(path: &Path, text: &str) -> Vec<Import> {
    let from = module_of(path);
    let code = without_tests(&blank_comments_and_literals(text));
    let line_of = |offset: usize| code[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let before = at.checked_sub(1).map(|i| bytes[i] as char);
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let base = if start == "crate::" {
                Vec::new()
            } else {
                from[..from.len().saturating_sub(1)].to_vec()
            };
            let mut reader = PathReader {
                text: &code,
                pos: at + start.len(),
            };
            let mut paths = Vec::new();
            reader.tree(base, &mut paths);
            for (offset, to) in paths {
                found.push(Import {
                    file: path.to_owned(),
                    line: line_of(offset),
                    from: from.clone(),
                    to,
                });
            }
        }
    }
    found
}

/// The modules each module declares (`mod x;` or `mod x { … }`), by parent; test modules
/// aside.
fn declared_modules(files: &[(PathBuf, String)]) -> std::collections::BTreeSet<Vec<String>> {
    let mut modules = std::collections::BTreeSet::new();
    for (path, text) in files {
        let parent = module_of(path);
        for line in without_tests(&blank_comments_and_literals(text)).lines() {
            let words: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || c == ';' || c == '{')
                .filter(|w| !w.is_empty())
                .collect();
            if let Some(i) = words.iter().position(|&w| w == "mod")
                && words[..i].iter().all(|w| w.starts_with("pub"))
                && let Some(name) = words.get(i + 1)
            {
                let mut module = parent.clone();
                module.push((*name).to_owned());
                modules.insert(module);
            }
        }
    }
    modules
}

/// The imports of every source file, outside tests.
fn all_imports() -> (Vec<Import>, std::collections::BTreeSet<Vec<String>>) {
    let files: Vec<(PathBuf, String)> = sources("src")
        .into_iter()
        .filter(|(path, _)| path.extension().is_some_and(|e| e == "rs") && !is_test_file(path))
        .collect();
    let imports = files
        .iter()
        .flat_map(|(path, text)| imports_of(path, text))
        .collect();
    (imports, declared_modules(&files))
}

fn rank(module: &str) -> Option<u8> {
    RANKS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

// SPEC §1: dependencies point downward only, by the ranks above.
#[test]
fn every_import_between_top_level_modules_points_down() {
    let (imports, modules) = all_imports();
    let mut failures = Vec::new();
    for top in modules.iter().filter(|m| m.len() == 1) {
        if rank(&top[0]).is_none() {
            failures.push(format!(
                "src/lib.rs: module {} has no rank: give it its layer in RANKS (tests/pure/hygiene.rs)",
                top[0]
            ));
        }
    }
    let mut known_seen = std::collections::BTreeSet::new();
    for import in &imports {
        let (Some(from), Some(to)) = (import.from.first(), import.to.first()) else {
            continue;
        };
        if from == to || !modules.contains(std::slice::from_ref(to)) {
            continue;
        }
        let (Some(rank_from), Some(rank_to)) = (rank(from), rank(to)) else {
            continue;
        };
        if rank_to < rank_from {
            continue;
        }
        if let Some(known) = KNOWN_UPWARD.iter().find(|(f, t)| f == from && t == to) {
            known_seen.insert(*known);
            continue;
        }
        let way = if rank_to == rank_from {
            "sideways"
        } else {
            "upward"
        };
        failures.push(format!(
            "{}: {from} (rank {rank_from}) imports {} (rank {rank_to}), {way}: an arrow may only \
             point to a lower layer; move what it needs down",
            import.place(),
            import.to.join("::"),
        ));
    }
    for known in KNOWN_UPWARD {
        if !known_seen.contains(known) {
            failures.push(format!(
                "KNOWN_UPWARD lists {} -> {}, which is no upward import today: remove it",
                known.0, known.1
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// SPEC §1: within a module, its submodules import each other without a cycle (a module A using
// B while B uses A, also through `super::`), so each can be read from the ones below it.
#[test]
fn no_submodules_import_each_other_in_a_cycle() {
    use std::collections::{BTreeMap, BTreeSet};
    let (imports, modules) = all_imports();
    // Between two children of one parent, at every depth: the first import that makes the edge.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, &Import>> = BTreeMap::new();
    for import in &imports {
        let common = import
            .from
            .iter()
            .zip(&import.to)
            .take_while(|(a, b)| a == b)
            .count();
        if common == 0 || import.from.len() <= common || import.to.len() <= common {
            continue;
        }
        let from = import.from[..=common].to_vec();
        let to = import.to[..=common].to_vec();
        if modules.contains(&to) {
            edges.entry(from).or_default().entry(to).or_insert(import);
        }
    }
    // A path back from `to` to `from` closes a cycle through the edge from -> to.
    let mut cycles: BTreeSet<Vec<Vec<String>>> = BTreeSet::new();
    for (from, targets) in &edges {
        for to in targets.keys() {
            let mut previous: BTreeMap<&Vec<String>, &Vec<String>> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([to]);
            while let Some(at) = queue.pop_front() {
                if at == from {
                    let mut cycle = vec![from.clone()];
                    let mut back = from;
                    while back != to {
                        back = previous[back];
                        cycle.push(back.clone());
                    }
                    cycle.reverse();
                    // One cycle, whichever of its modules it was found from.
                    let least = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap();
                    cycle.rotate_left(least);
                    cycles.insert(cycle);
                    break;
                }
                for next in edges.get(at).into_iter().flat_map(|t| t.keys()) {
                    if next != to && !previous.contains_key(next) {
                        previous.insert(next, at);
                        queue.push_back(next);
                    }
                }
            }
        }
    }
    let described: Vec<String> = cycles
        .iter()
        .map(|cycle| {
            let steps: Vec<String> = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| {
                    format!(
                        "  {} -> {} ({})",
                        a.join("::"),
                        b.join("::"),
                        edges[a][b].place()
                    )
                })
                .collect();
            format!("a cycle:\n{}", steps.join("\n"))
        })
        .collect();
    assert!(
        described.is_empty(),
        "submodules import each other; move what one takes from the other below both:\n{}",
        described.join("\n")
    );
}

// The reader of imports reads what the two tests above rely on.
#[test]
fn the_import_reader_reads_use_trees_paths_and_super() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/claim.rs");
    let text = "//! crate::nothing in a comment\n\
                use crate::store::{keys::Keys, presence::{self, MAX_TTL}};\n\
                use super::{Ctx, views::slot_request as request};\n\
                fn f() { let s = \"crate::not_code\"; let c = '\"'; crate::domain::claim::add(x); }\n\
                fn g<'a>(x: &'a str) { super::super::units::duration(x); }\n\
                #[cfg(test)]\nmod tests { use crate::agent; }\n\
                #[cfg(test)]\nmod more;\nuse crate::config::Config;\n";
    let got: Vec<(usize, String)> = imports_of(&file, text)
        .into_iter()
        .map(|i| (i.line, i.to.join("::")))
        .collect();
    let want = [
        (2, "store::keys::Keys"),
        (2, "store::presence"),
        (2, "store::presence::MAX_TTL"),
        (4, "domain::claim::add"),
        (10, "config::Config"),
        (3, "cli::Ctx"),
        (3, "cli::views::slot_request"),
        (5, "units::duration"),
    ];
    assert_eq!(
        got,
        want.map(|(l, p)| (l, p.to_owned())),
        "the imports read from the sample"
    );
}

// A long file or function is a smell a reader pays for; one over the limit says why at
// its top, in a line that starts `Long:` (`//! Long: …` for a file, `/// Long: …` or `// Long: …`
// above a function).
const FILE_LINES: usize = 600;
const FN_LINES: usize = 80;

/// Whether the comment lines right above line `at` (its doc, attributes and comments) give a
/// reason for its length.
fn says_why_above(lines: &[&str], at: usize) -> bool {
    lines[..at]
        .iter()
        .rev()
        .map(|l| l.trim_start())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| l.trim_start_matches('/').trim_start().starts_with("Long:"))
}

/// Every function in `code` (comments and literals blanked, test items removed): its name, the
/// line of its `fn` and its length in lines, braces included.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn ") {
        let at = from + found;
        from = at + 3;
        if at > 0 && ident(bytes[at - 1]) {
            continue;
        }
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|&c| c.is_alphanumeric() || c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let rest = &code[at..];
        // The body is the first brace after the parameter list, not the first after `fn`: a
        // parameter may be a pattern with braces (`Parts { rx, conn }: Parts`).
        let Some(params) =
            parameters_end(rest, 3 + rest[3..].find(&name).unwrap_or(0) + name.len())
        else {
            continue; // An `fn` type, which has no name.
        };
        let Some(brace) = rest[params..].find('{').map(|b| params + b) else {
            continue;
        };
        if rest[params..]
            .find(';')
            .is_some_and(|semi| params + semi < brace)
        {
            continue; // A declaration in a trait.
        }
        let mut depth = 0;
        let Some(close) = rest[brace..].char_indices().find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(brace + i)
        }) else {
            continue;
        };
        let line = code[..at].matches('\n').count();
        let len = rest[..close].matches('\n').count() + 1;
        out.push((name, line, len));
    }
    out
}

/// Where the parameter list of the function whose name ends at `after` in `rest` ends (just past
/// its `)`): generics first (`<F: Fn(u8) -> u8>`, whose `->` is no bracket), then the parentheses.
fn parameters_end(rest: &str, after: usize) -> Option<usize> {
    let bytes = rest.as_bytes();
    let mut i = after;
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    if bytes.get(i) == Some(&b'<') {
        let mut depth = 0;
        while let Some(&b) = bytes.get(i) {
            match b {
                b'<' => depth += 1,
                b'>' if bytes[i - 1] != b'-' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    let open = i + rest[i..].find('(')?;
    let mut depth = 0;
    for (j, c) in rest[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + j + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[test]
fn long_files_and_functions_say_why() {
    let mut unexplained = Vec::new();
    for (path, text) in product_sources() {
        if !is_rust_code(&path) {
            continue;
        }
        let shown = shown(&path);
        let lines: Vec<&str> = text.lines().collect();
        let length = code(&text).lines().count();
        if length > FILE_LINES && !lines.iter().take(20).any(|l| l.starts_with("//! Long:")) {
            unexplained.push(format!(
                "{shown}: {length} lines without a `//! Long:` line"
            ));
        }
        let blanked = without_tests(&blank_comments_and_literals(&text));
        for (name, line, len) in functions(&blanked) {
            if len > FN_LINES && !says_why_above(&lines, line) {
                unexplained.push(format!(
                    "{shown}:{}: fn {name} is {len} lines without a `Long:` comment",
                    line + 1
                ));
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "split these, or say why they are long:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn the_function_reader_measures_bodies_and_skips_declarations() {
    let code = "trait T {\n    fn a(&self);\n}\nfn b() {\n    let x = { 1 };\n}\nstruct S { f: fn() -> u8 }\nfn c() {}\n";
    let found = functions(code);
    assert_eq!(
        found,
        [("b".to_owned(), 3, 3), ("c".to_owned(), 7, 1)],
        "{found:?}"
    );
    // A parameter that is a pattern with braces, and generics with a closure's arrow: the body
    // is the brace after the parameters.
    let code = "fn d<F: Fn(u8) -> u8>(\n    P { a, b }: P,\n    f: F,\n) -> u8 {\n    a\n}\n";
    assert_eq!(functions(code), [("d".to_owned(), 0, 6)]);
    let lines = ["/// Long: a table.", "#[test]", "fn d() {"];
    assert!(says_why_above(&lines, 2));
    assert!(!says_why_above(&["/// Short.", "fn e() {"], 1));
}

/// The top-level modules, as `src/lib.rs` declares them or takes them from the core crate.
fn modules() -> Vec<String> {
    std::fs::read_to_string("src/lib.rs")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub use fleet_core::"))?;
            Some(rest.strip_suffix(';')?.to_owned())
        })
        .collect()
}

// A module of four or more submodules opens with a map that names each (`name` or [`name`]):
// a newcomer reads the folder from its door. `reconcile/mod.rs` named a module that was gone and
// `store/mod.rs` 18 modules with no map while nothing held them.
#[test]
fn a_module_of_four_or_more_submodules_maps_them_all() {
    let mut unmapped = Vec::new();
    let mut all = product_sources();
    all.extend(sources("crates/fleet-testing/src"));
    for (path, text) in all {
        if !is_rust_code(&path) {
            continue;
        }
        let submodules: Vec<&str> = code(&text)
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let l = l
                    .strip_prefix("pub(crate) ")
                    .or_else(|| l.strip_prefix("pub(super) "))
                    .or_else(|| l.strip_prefix("pub "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';')
            })
            .collect();
        if submodules.len() < 4 {
            continue;
        }
        let map: String = text
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        for m in submodules {
            if !map.contains(&format!("`{m}`")) {
                unmapped.push(format!("{}: {m}", path.display()));
            }
        }
    }
    assert!(
        unmapped.is_empty(),
        "name these submodules in their module's //! map:\n{}",
        unmapped.join("\n")
    );
}

// The three maps of the house (lib.rs's module list, SPEC §1's table of layers, README's layout)
// name every module that exists, each at the layer RANKS gives it, and nothing else: they
// drifted (lib.rs and SPEC omitted `power`, lib.rs and README `kubernetes`) while nothing held
// them.
#[test]
fn the_maps_name_every_module_at_its_layer_and_nothing_else() {
    let modules = modules();
    assert!(modules.len() > 10, "{modules:?}");
    let lib = std::fs::read_to_string("src/lib.rs").unwrap();
    let mapped: Vec<(String, u8)> = lib
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("//! - [`")?;
            let (name, rest) = rest.split_once("`] (")?;
            let (rank, _) = rest.split_once(')')?;
            Some((name.to_owned(), rank.parse().ok()?))
        })
        .collect();
    let spec = std::fs::read_to_string("SPEC.md").unwrap();
    let layers = &spec[spec.find("## 1.").unwrap()..spec.find("## 2.").unwrap()];
    let table: Vec<(String, u8)> = layers
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim().split('|').map(str::trim).collect();
            let rank: u8 = cells.get(1)?.parse().ok()?;
            Some(
                cells
                    .get(2)?
                    .split(',')
                    .map(|m| (m.trim().trim_matches('`').to_owned(), rank))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect();
    let readme = std::fs::read_to_string("README.md").unwrap();
    let layout = &readme[readme.find("## Layout").unwrap()..];
    let laid: Vec<String> = layout
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("src/")
                .or_else(|| l.strip_prefix("crates/fleet-core/src/"))?;
            let name = rest.split(['/', ' ']).next()?;
            let name = name.strip_suffix(".rs").unwrap_or(name);
            (name != "lib").then(|| name.to_owned())
        })
        .collect();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let want = sorted(modules.clone());
    for (map, names) in [
        (
            "src/lib.rs's module list",
            mapped.iter().map(|(m, _)| m.clone()).collect(),
        ),
        (
            "SPEC §1's table",
            table.iter().map(|(m, _)| m.clone()).collect(),
        ),
        ("README's layout", laid),
    ] {
        assert_eq!(sorted(names), want, "{map} against src/lib.rs's modules");
    }
    for (map, ranked) in [("src/lib.rs", &mapped), ("SPEC §1", &table)] {
        for (m, r) in ranked {
            assert_eq!(Some(*r), rank(m), "{map} puts {m} at layer {r}");
        }
    }
}

/// Where a power driver is named, as CONTRIBUTING.md promises: its folder (`src/power/<name>/`),
/// the registry of the drivers (its variant and row) and the one dispatch over them (its arms).
const DRIVER_FILES: [&str; 2] = ["src/power/mod.rs", "src/power/drive.rs"];

// CONTRIBUTING.md: a new power driver touches its folder and two files of fleet's, nothing else.
// Its configuration was spread over four files of `config` (a flat struct of every driver's
// fields, a second enum of the types, the merge, the typed drivers) while nothing held it. A
// driver is named in code by its identifiers (`Redfish`, `ipmi::`), which this reads outside
// comments, literals and tests.
#[test]
fn a_power_driver_is_named_only_in_its_folder_the_registry_and_the_dispatch() {
    let contributing = std::fs::read_to_string("CONTRIBUTING.md").unwrap();
    for file in ["src/power/<name>/", DRIVER_FILES[0], DRIVER_FILES[1]] {
        assert!(
            contributing.contains(&format!("`{file}`")),
            "CONTRIBUTING.md's power driver paragraph names {file}"
        );
    }
    let kinds: Vec<&str> = fleet::power::KINDS.iter().map(|r| r.kind.name).collect();
    assert_eq!(kinds, ["wol", "redfish", "ipmi"]);
    let mut found = Vec::new();
    for (path, text) in sources("src") {
        if !is_rust_code(&path) {
            continue;
        }
        let inner = shown(&path);
        let code = without_tests(&blank_comments_and_literals(&text));
        let identifiers: Vec<String> = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map(str::to_ascii_lowercase)
            .collect();
        for kind in &kinds {
            let own = inner.starts_with(&format!("src/power/{kind}/"));
            if own || DRIVER_FILES.contains(&inner.as_str()) {
                continue;
            }
            if let Some(name) = identifiers.iter().find(|i| i.contains(kind)) {
                found.push(format!("{inner} names the {kind} driver ({name})"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a driver lives in src/power/<name>/, with its variant and row in src/power/mod.rs and \
         its arms in src/power/drive.rs (CONTRIBUTING.md); ask those, or move this there:\n{}",
        found.join("\n")
    );
}

// SPEC §1: the core crate's dependencies are what the pure rules need, and nothing that could do
// I/O, keep time or run async; chrono comes without its `clock` feature, so `Utc::now` does not
// compile there.
#[test]
fn the_core_crate_depends_on_nothing_that_does_io() {
    let manifest = std::fs::read_to_string("crates/fleet-core/Cargo.toml").unwrap();
    let deps = &manifest[manifest.find("[dependencies]").unwrap()..];
    let deps = &deps[..deps.find("[dev-dependencies]").unwrap_or(deps.len())];
    let names: Vec<&str> = deps
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split('=').next().map(str::trim))
        .collect();
    assert_eq!(
        names,
        ["chrono", "serde", "serde_json", "thiserror", "humantime"],
        "crates/fleet-core/Cargo.toml"
    );
    let root = std::fs::read_to_string("Cargo.toml").unwrap();
    let chrono = root
        .lines()
        .find(|l| l.starts_with("chrono = { version"))
        .expect("the workspace's chrono");
    assert!(!chrono.contains("clock"), "{chrono}");
}

// SPEC §1.1: fleet-agent is built from what it links: `fleet` without features, whose heavy
// dependencies are each optional and behind a feature; and the transport crate names none of
// fleet's own crates.
#[test]
fn the_agent_takes_fleet_without_its_heavy_parts() {
    let agent = std::fs::read_to_string("cmd/fleet-agent/Cargo.toml").unwrap();
    let deps = &agent[agent.find("[dependencies]").unwrap()..];
    let deps = &deps[..deps.find("\n[").map_or(deps.len(), |i| i + 1)];
    let fleet = deps
        .lines()
        .find(|l| l.starts_with("fleet = "))
        .expect("fleet-agent depends on fleet");
    assert!(fleet.contains("default-features = false"), "{fleet}");
    assert!(!fleet.contains("features = ["), "{fleet}");
    let root = std::fs::read_to_string("Cargo.toml").unwrap();
    for heavy in [
        "axum",
        "kube",
        "k8s-openapi",
        "tonic",
        "tonic-prost",
        "prost",
    ] {
        let line = root
            .lines()
            .find(|l| l.starts_with(&format!("{heavy} = ")))
            .unwrap_or_else(|| panic!("Cargo.toml: no {heavy}"));
        assert!(line.contains("optional = true"), "{line}");
    }
    let transport = std::fs::read_to_string("crates/fleet-redis/Cargo.toml").unwrap();
    assert!(
        !transport.contains("fleet ="),
        "the transport depends on fleet"
    );
    assert!(
        !transport.contains("fleet-core"),
        "the transport depends on the core"
    );
}
