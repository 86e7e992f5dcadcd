//! The live page's actions (SPEC §4.13): claim a slot, cancel a claim, hold or release a bench.
//! On only when `fleet serve` has `--ui-token-file`.
//!
//! Each request must carry the token as `Authorization: Bearer <token>` (compared in constant
//! time) and the page's CSRF token as `X-Fleet-CSRF`, and must not come from another site
//! (`Sec-Fetch-Site`, `Origin`). All of that is checked on the request's head, before a byte of
//! its body is read; then a body declared larger than `BODY_MAX` is refused unread (413), and
//! one is read only up to `BODY_MAX`, within `BODY_READ`: a peer without the token costs no
//! buffered body, and one with it a few kB at most. A browser never adds the bearer header by itself, and another
//! site can neither read the CSRF token nor send the header without a preflight this server
//! never answers, so a page elsewhere cannot act through an operator's browser. A follower
//! refuses every action, as the provider refuses changes there. An action runs the very verb the
//! command line runs (`fleet claim`, `cancel`, `hold`, `release`), with the same checks and the
//! same words back: the page parses what was asked into an `Act`, and `fleet serve` hands in the
//! `Verbs` that run it, so the page sits beside the command line rather than under it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::info;

use crate::domain::name::{BenchName, ClaimName, Reason};
use crate::telemetry::Health;

use crate::views::{Ctx, Error};

/// The shortest token `--ui-token-file` may hold.
pub const MIN_TOKEN: usize = 16;
/// The longest token `--ui-token-file` may hold (SPEC §4.13 L9): a request's head is at most
/// `HEAD_BYTES` (8 KiB, L3), and the token rides in its `Authorization` header beside the rest a
/// browser sends (cookies, user agent, the CSRF token, origin), so half the head is left them.
pub const MAX_TOKEN: usize = 4_096;
const _: () = assert!(MAX_TOKEN <= crate::telemetry::listener::HEAD_BYTES / 2);
/// The largest body an action may have: its JSON is a name and a reason, some hundred bytes.
pub const BODY_MAX: usize = 4 * 1024;
/// How long an action's body may take to arrive once its head passed.
const BODY_READ: Duration = Duration::from_secs(10);

/// What the actions need: the token, the CSRF token, what a verb runs with, and the verbs.
#[derive(Clone)]
pub struct Actions {
    token: Arc<String>,
    csrf: Arc<String>,
    ctx: Ctx,
    verbs: Arc<dyn Verbs>,
}

/// An action the page was asked for, its target read.
#[derive(Debug, PartialEq, Eq)]
pub enum Act {
    /// Claim this slot (`fleet claim SLOT`, without waiting).
    Claim(BenchName),
    /// Cancel this claim (`fleet cancel CLAIM`).
    Cancel(ClaimName),
    /// Hold this bench, for this reason (`fleet hold BENCH --reason`).
    Hold(BenchName, Reason),
    /// Release this bench (`fleet release BENCH`).
    Release(BenchName),
}

/// Runs an `Act` as the command line's verb of the same name runs it, writing the verb's words.
pub trait Verbs: Send + Sync {
    fn run<'a>(
        &'a self,
        act: Act,
        ctx: &'a Ctx,
        out: &'a mut Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;
}

/// An action's body.
#[derive(Deserialize)]
struct Asked {
    /// The slot (claim), claim (cancel) or bench (hold, release) acted on.
    target: String,
    /// Why, for a hold.
    reason: Option<String>,
}

impl Actions {
    /// Actions with `token` (read from `--ui-token-file`) and a CSRF token of this process's own.
    pub fn new(token: String, ctx: Ctx, verbs: Arc<dyn Verbs>) -> Self {
        let csrf: String = (0..16)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        Actions {
            token: Arc::new(token),
            csrf: Arc::new(csrf),
            ctx,
            verbs,
        }
    }

    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Checks a request and runs its action; the answer is the verb's own words. The head is
    /// checked whole before the body is read (SPEC §4.13).
    pub async fn handle(
        &self,
        Path(action): Path<String>,
        headers: HeaderMap,
        body: Body,
        health: &Health,
    ) -> Response {
        if let Some(refused) = self.refused(&headers) {
            return refused;
        }
        if declared_length(&headers).is_some_and(|n| n > BODY_MAX as u64) {
            return too_large();
        }
        if !health.is_leading() {
            return answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "this fleet serve does not lead (it follows, or has not passed yet): actions go \
                 to the leader's page"
                    .to_owned(),
            );
        }
        let body = match tokio::time::timeout(BODY_READ, axum::body::to_bytes(body, BODY_MAX)).await
        {
            Ok(Ok(body)) => body,
            Ok(Err(e)) if over_limit(&e) => return too_large(),
            Ok(Err(_)) => {
                return answer(
                    StatusCode::BAD_REQUEST,
                    "the body could not be read (the connection broke)".to_owned(),
                );
            }
            Err(_) => {
                return answer(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive within {}s of the head",
                        BODY_READ.as_secs()
                    ),
                );
            }
        };
        let Ok(asked) = serde_json::from_slice::<Asked>(&body) else {
            return answer(
                StatusCode::BAD_REQUEST,
                "the body must be JSON: {\"target\": \"NAME\", \"reason\": \"...\"}".to_owned(),
            );
        };
        let mut out: Vec<u8> = Vec::new();
        let ran = self.run(&action, asked, &mut out).await;
        let said = String::from_utf8_lossy(&out).trim().to_owned();
        match ran {
            Ok(()) => {
                info!(action, said, "the live page acted");
                answer(StatusCode::OK, said)
            }
            Err(Error::Usage(e)) => answer(StatusCode::BAD_REQUEST, format!("{e:#}")),
            Err(Error::Runtime(e)) => answer(StatusCode::CONFLICT, format!("{e:#}")),
        }
    }

    /// The refusal of a request without the token, the CSRF token, or from another site.
    fn refused(&self, headers: &HeaderMap) -> Option<Response> {
        let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
        let bearer = text(header::AUTHORIZATION.as_str()).and_then(|v| v.strip_prefix("Bearer "));
        if !bearer.is_some_and(|b| same(b.as_bytes(), self.token.as_bytes())) {
            let mut refused = answer(
                StatusCode::UNAUTHORIZED,
                "an action needs the token of --ui-token-file, as Authorization: Bearer TOKEN"
                    .to_owned(),
            );
            refused.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return Some(refused);
        }
        let csrf = text("x-fleet-csrf");
        if !csrf.is_some_and(|c| same(c.as_bytes(), self.csrf.as_bytes())) {
            return Some(answer(
                StatusCode::FORBIDDEN,
                "an action needs the page's CSRF token as X-Fleet-CSRF (reload the page)"
                    .to_owned(),
            ));
        }
        let cross_site = text("sec-fetch-site").is_some_and(|s| s != "same-origin" && s != "none");
        let host = text(header::HOST.as_str());
        let foreign_origin = text(header::ORIGIN.as_str()).is_some_and(|origin| {
            let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
            host != Some(origin_host)
        });
        (cross_site || foreign_origin).then(|| {
            answer(
                StatusCode::FORBIDDEN,
                "an action must come from this page, not another site".to_owned(),
            )
        })
    }

    /// Runs the verb of `action` on what was asked, writing its words to `out`.
    async fn run(&self, action: &str, asked: Asked, out: &mut Vec<u8>) -> Result<(), Error> {
        let act = act_of(action, asked)?;
        self.verbs.run(act, &self.ctx, out).await
    }
}

/// What `action` asks for, its target and reason read as the verb's arguments are.
fn act_of(action: &str, asked: Asked) -> Result<Act, Error> {
    let bench = || BenchName::parse(&asked.target).map_err(Error::usage);
    Ok(match action {
        "claim" => Act::Claim(bench()?),
        "cancel" => Act::Cancel(ClaimName::parse(&asked.target).map_err(Error::usage)?),
        "hold" => {
            let why = asked.reason.as_deref().unwrap_or("held from the page");
            Act::Hold(bench()?, Reason::parse(why).map_err(Error::usage)?)
        }
        "release" => Act::Release(bench()?),
        other => {
            return Err(Error::usage(format!(
                "no action {other:?}: the page's actions are claim, cancel, hold and release"
            )));
        }
    })
}

/// The body's length as its head declares it, when it does.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Whether reading a body failed at its limit (rather than at the connection).
fn over_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

fn too_large() -> Response {
    answer(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "an action's body is at most {BODY_MAX} bytes: {{\"target\": \"NAME\", \"reason\": \"...\"}}"
        ),
    )
}

fn answer(status: StatusCode, text: String) -> Response {
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        format!("{text}\n"),
    )
        .into_response()
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(target: &str, reason: Option<&str>) -> Asked {
        Asked {
            target: target.to_owned(),
            reason: reason.map(str::to_owned),
        }
    }

    #[test]
    fn each_action_reads_its_target_as_its_verb_does() {
        let bench = |n: &str| BenchName::parse(n).unwrap();
        assert_eq!(
            act_of("claim", asked("b-1", None)).unwrap(),
            Act::Claim(bench("b-1"))
        );
        assert_eq!(
            act_of("cancel", asked("c-7", None)).unwrap(),
            Act::Cancel(ClaimName::parse("c-7").unwrap())
        );
        assert_eq!(
            act_of("hold", asked("b-1", Some("disk swap"))).unwrap(),
            Act::Hold(bench("b-1"), Reason::parse("disk swap").unwrap())
        );
        assert_eq!(
            act_of("hold", asked("b-1", None)).unwrap(),
            Act::Hold(bench("b-1"), Reason::parse("held from the page").unwrap())
        );
        assert_eq!(
            act_of("release", asked("b-1", None)).unwrap(),
            Act::Release(bench("b-1"))
        );
        for (action, target) in [("claim", "Not A Name"), ("drop", "b-1")] {
            let e = act_of(action, asked(target, None)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{action} {target}: {e}");
        }
        let e = act_of("drop", asked("b-1", None)).unwrap_err();
        assert!(
            e.to_string().contains("claim, cancel, hold and release"),
            "{e}"
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcdef", b"abcdef"));
        assert!(!same(b"abcdef", b"abcdeg"));
        assert!(!same(b"abc", b"abcdef"));
        assert!(!same(b"", b"a"));
    }
}
