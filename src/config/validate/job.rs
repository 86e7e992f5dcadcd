//! Validation of a Job operation's pod template (SPEC §4.2, Jobs as operations): the image, the
//! entrypoint, the service account, the node selector and the tolerations. What the API server
//! would refuse is refused here, with its place, so a bad template is a problem at start rather
//! than a failed power-on when a machine is needed. Pure: no I/O.

use std::time::Duration;

use crate::config::model::{JobTemplate, Toleration};
use crate::config::raw::{RawJob, RawToleration};
use crate::domain::name::BenchName;

use super::Problems;

/// The template; `None` when it has a problem (in `problems`).
pub(super) fn job(
    raw: &RawJob,
    ttl_after_finished: Duration,
    place: &str,
    problems: &mut Problems,
) -> Option<JobTemplate> {
    let before = problems.len();
    if let Err(why) = check_image(&raw.image) {
        problems.push(
            format!("{place}.image"),
            format!(
                "invalid image {:?}: {why}; an image is a reference like \
                 registry.example/power:1.4 or registry.example/power@sha256:<64 hex digits>",
                raw.image
            ),
        );
    }
    for (list, field) in [(&raw.command, "command"), (&raw.args, "args")] {
        for (i, arg) in list.iter().enumerate() {
            if arg.contains('\0') {
                problems.push(
                    format!("{place}.{field}[{i}]"),
                    "an argument contains a NUL character; arguments are text without NUL",
                );
            }
        }
    }
    if let Some(account) = &raw.service_account_name
        && let Err(e) = BenchName::parse(account)
    {
        problems.push(
            format!("{place}.service_account_name"),
            format!(
                "invalid service_account_name {account:?}: {}; a service account's name is an \
                 RFC 1123 subdomain, like fleet-power",
                e.why()
            ),
        );
    }
    for (key, value) in &raw.node_selector {
        let at = format!("{place}.node_selector.{key}");
        if let Err(why) = check_label_key(key) {
            problems.push(at, why);
        } else if let Err(why) = check_label_value(value) {
            problems.push(at, why);
        }
    }
    let tolerations: Vec<Toleration> = raw
        .tolerations
        .iter()
        .enumerate()
        .map(|(i, t)| toleration(t, &format!("{place}.tolerations[{i}]"), problems))
        .collect();
    if problems.len() != before {
        return None;
    }
    Some(JobTemplate {
        image: raw.image.clone(),
        command: raw.command.clone(),
        args: raw.args.clone(),
        service_account_name: raw.service_account_name.clone(),
        node_selector: raw.node_selector.clone(),
        tolerations,
        ttl_after_finished,
    })
}

/// One toleration, as the API server accepts it; built even with problems (in `problems`).
fn toleration(raw: &RawToleration, place: &str, problems: &mut Problems) -> Toleration {
    let exists = match raw.operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(other) => {
            problems.push(
                format!("{place}.operator"),
                format!("invalid operator {other:?}: Equal (the default) or Exists"),
            );
            false
        }
    };
    match &raw.key {
        Some(key) => {
            if let Err(why) = check_label_key(key) {
                problems.push(format!("{place}.key"), why);
            }
        }
        None if !exists => problems.push(
            format!("{place}.key"),
            "a toleration without a key tolerates every taint and needs operator: Exists; \
             give the taint's key, like node.kubernetes.io/unreachable",
        ),
        None => {}
    }
    if exists && raw.value.is_some() {
        problems.push(
            format!("{place}.value"),
            "operator Exists matches any value: leave value out, or use operator Equal",
        );
    }
    if let Some(value) = &raw.value
        && let Err(why) = check_label_value(value)
    {
        problems.push(format!("{place}.value"), why);
    }
    match raw.effect.as_deref() {
        None | Some("NoSchedule" | "PreferNoSchedule" | "NoExecute") => {}
        Some(other) => problems.push(
            format!("{place}.effect"),
            format!(
                "invalid effect {other:?}: NoSchedule, PreferNoSchedule or NoExecute, or leave it \
                 out for every effect"
            ),
        ),
    }
    if raw.toleration_seconds.is_some() && raw.effect.as_deref() != Some("NoExecute") {
        problems.push(
            format!("{place}.toleration_seconds"),
            "toleration_seconds applies to effect NoExecute only: set effect: NoExecute or leave \
             it out",
        );
    }
    Toleration {
        key: raw.key.clone(),
        operator: raw.operator.clone(),
        value: raw.value.clone(),
        effect: raw.effect.clone(),
        toleration_seconds: raw.toleration_seconds,
    }
}

/// Checks a container image reference, `[host[:port]/]path[:tag][@algorithm:digest]`, as the
/// container runtimes read it. The error says what is wrong, without the valid form.
fn check_image(image: &str) -> Result<(), String> {
    if image.is_empty() {
        return Err("the image is empty".to_owned());
    }
    if image.len() > 1024 {
        return Err("the reference is longer than 1024 characters".to_owned());
    }
    if let Some(c) = image
        .chars()
        .find(|c| !c.is_ascii() || c.is_ascii_whitespace() || c.is_ascii_control())
    {
        return Err(format!("it contains {c:?}"));
    }
    let (named, digest) = match image.split_once('@') {
        Some((named, digest)) => (named, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest
        && !digest_ok(digest)
    {
        return Err(format!(
            "the digest {digest:?} is not an algorithm and its hex digest"
        ));
    }
    // A tag is after the last ':' that follows the last '/': a ':' before it is a host's port.
    let last_slash = named.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match named[last_slash..].rfind(':') {
        Some(i) => (&named[..last_slash + i], Some(&named[last_slash + i + 1..])),
        None => (named, None),
    };
    if let Some(tag) = tag
        && !tag_ok(tag)
    {
        return Err(format!(
            "the tag {tag:?} is not letters, digits, '_', '.' and '-' (at most 128, not \
             starting with '.' or '-')"
        ));
    }
    let parts: Vec<&str> = name.split('/').collect();
    // The first part names a registry when more follow and it looks like a host.
    let host = parts.len() > 1
        && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost");
    for (i, part) in parts.iter().enumerate() {
        let ok = if i == 0 && host {
            let (h, port) = part.split_once(':').unwrap_or((part, "1"));
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.".contains(c))
                && !port.is_empty()
                && port.chars().all(|c| c.is_ascii_digit())
        } else {
            path_component(part)
        };
        if !ok {
            return Err(format!(
                "{part:?} is not a {}",
                if i == 0 && host {
                    "registry host[:port]"
                } else {
                    "repository path component (lowercase letters and digits, separated by \
                     '.', '_' or '-')"
                }
            ));
        }
    }
    Ok(())
}

/// `algorithm:hex`, like `sha256:` and 64 hex digits.
fn digest_ok(digest: &str) -> bool {
    digest.split_once(':').is_some_and(|(algorithm, hex)| {
        !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+._-".contains(c))
            && hex.len() >= 32
            && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

/// At most 128 letters, digits, `_`, `.` and `-`, not starting with `.` or `-`.
fn tag_ok(tag: &str) -> bool {
    let mut chars = tag.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        && tag.len() <= 128
}

/// A repository path component: lowercase letters and digits, separated by `.`, `_` or `-`.
fn path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
        && bytes.iter().all(|&b| alnum(b) || b"._-".contains(&b))
}

/// A label's name part, or a label value when not empty: at most 63 letters, digits, `-`, `_`
/// and `.`, starting and ending with a letter or digit.
fn label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// A Kubernetes label key: `[prefix/]name`, the prefix an RFC 1123 subdomain.
fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| BenchName::parse(p).is_ok());
    if prefix_ok && label_name(name) {
        return Ok(());
    }
    Err(format!(
        "invalid label key {key:?}: a key is an optional RFC 1123 subdomain and '/', then a name \
         of at most 63 letters, digits, '-', '_' and '.' starting and ending with a letter or \
         digit, like kubernetes.io/hostname"
    ))
}

/// A Kubernetes label value: empty, or like a label's name.
fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || label_name(value) {
        return Ok(());
    }
    Err(format!(
        "invalid label value {value:?}: at most 63 letters, digits, '-', '_' and '.' starting \
         and ending with a letter or digit, or empty"
    ))
}
