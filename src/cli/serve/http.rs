//! The HTTP side of `fleet serve` (SPEC §4.8, §4.13): the token of `--ui-token-file`, read and
//! checked at start; the listeners' caps, from the process's descriptor limit; and the servers
//! of the metrics and of the live page, on one listener or, with `--ui-addr`, on two. The server
//! itself (the Host check, the caps, the timeouts) is `telemetry::listener`.

#[cfg(feature = "page")]
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::telemetry::listener::{self, Gate, Hosts, Limits, Server};
use crate::telemetry::{self, Health, Metrics};

use super::super::{Ctx, Error};
#[cfg(feature = "page")]
use crate::page::{Actions, Feed, actions_max_token, actions_min_token, router};

/// Under this descriptor limit, operations and HTTP peers may run a controller out of them.
const LOW_NOFILE: u64 = 4_096;

/// The token of `--ui-token-file`: its first line, of 16 to 4 096 printable ASCII characters
/// (SPEC §4.13 L9). A browser sends nothing else in a header, and the server reads nothing else
/// from one; and a request's head is at most 8 KiB (L3), the token beside the other headers a
/// browser sends. Any other token could never authenticate: it is refused at start (exit 2),
/// naming the first character that is not, and where, or how long it may be. The file is read to
/// its bound (SPEC §7 S10).
#[cfg(feature = "page")]
pub fn token(path: &Path) -> Result<String, Error> {
    use fleet_redis::file;
    let bytes = file::read(path, file::SECRET)
        .map_err(|e| Error::usage(format!("reading --ui-token-file {}: {e}", path.display())))?;
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let token = line.trim_ascii();
    let how = "make one with `openssl rand -hex 24`";
    if let Some(what) = not_printable(token) {
        return Err(Error::usage(format!(
            "--ui-token-file {}: the token (its first line) must be printable ASCII, without \
             spaces, and has {what}; {how}",
            path.display()
        )));
    }
    if token.len() < actions_min_token() {
        return Err(Error::usage(format!(
            "--ui-token-file {}: the token (its first line) has {} characters, fewer than {}; \
             {how}",
            path.display(),
            token.len(),
            actions_min_token()
        )));
    }
    if token.len() > actions_max_token() {
        return Err(Error::usage(format!(
            "--ui-token-file {}: the token (its first line) has {} characters, more than {}: a \
             request's head is at most {} bytes (SPEC §4.13 L3), and the token rides in it beside \
             the other headers a browser sends, so a longer one could never be accepted; {how}",
            path.display(),
            token.len(),
            actions_max_token(),
            listener::HEAD_BYTES,
        )));
    }
    // Every byte is printable ASCII: the text is UTF-8, and nothing is replaced.
    Ok(String::from_utf8_lossy(token).into_owned())
}

/// The first character of `token` that is not printable ASCII, and its position (from 1, in
/// characters), in words; `None` when every one is.
#[cfg(feature = "page")]
fn not_printable(token: &[u8]) -> Option<String> {
    let text = match std::str::from_utf8(token) {
        Ok(text) => text,
        Err(e) => {
            let at = e.valid_up_to();
            let before = std::str::from_utf8(&token[..at]).map_or(at, |t| t.chars().count());
            return Some(format!(
                "a byte that is not UTF-8 (0x{:02x}) at position {}",
                token[at],
                before + 1
            ));
        }
    };
    let (at, c) = text
        .chars()
        .enumerate()
        .find(|(_, c)| !c.is_ascii_graphic())?;
    Some(format!(
        "the character {c:?} (U+{:04X}) at position {}",
        u32::from(c),
        at + 1
    ))
}

/// The listeners' caps (SPEC §4.13): the soft descriptor limit raised to the hard one, and the
/// caps derived from it, logged.
pub fn limits() -> Result<Limits, Error> {
    let nofile = listener::raise_nofile().map_err(|e| Error::Runtime(e.into()))?;
    if let Some(e) = nofile.refused {
        warn!(
            error = %e,
            soft = nofile.was,
            hard = nofile.hard,
            "the file-descriptor limit could not be raised to its hard limit"
        );
    }
    let limits = Limits::of(nofile.soft);
    info!(
        nofile = limits.nofile,
        was = nofile.was,
        connections = limits.connections,
        streams = limits.streams,
        per_peer = limits.per_peer,
        "the listeners' caps, from the file-descriptor limit"
    );
    if limits.nofile < LOW_NOFILE {
        warn!(
            nofile = limits.nofile,
            "the file-descriptor limit is low for a controller that runs operations: raise it \
             (LimitNOFILE=65536 in the systemd unit, the container runtime's limit in a pod)"
        );
    }
    Ok(limits)
}

/// What the HTTP side is built from.
pub struct Http {
    /// `--metrics-addr`'s listener: the metrics, the health endpoints, and the page unless it
    /// has its own.
    pub metrics: TcpListener,
    /// `--ui-addr`'s listener.
    #[cfg(feature = "page")]
    pub ui: Option<TcpListener>,
    pub limits: Limits,
    /// The `--ui-host` names.
    pub hosts: Vec<String>,
    /// The token that turns the actions on.
    #[cfg(feature = "page")]
    pub token: Option<String>,
    /// The pass interval: the page's reads, and `/readyz`'s window (five of them).
    pub interval: Duration,
}

impl Http {
    /// Starts the page's reader (on a connection of its own, once a pass interval) and the
    /// servers, on `tasks`; they end at `ctx.shutdown`. Built without the `page` feature, the
    /// metrics listener serves the metrics and the health endpoints alone.
    pub async fn start(
        self,
        ctx: &Ctx,
        (metrics, health): (Arc<Metrics>, Arc<Health>),
        tasks: &TaskTracker,
    ) -> Result<(), Error> {
        let gate = Gate::new(
            self.limits,
            metrics.http_connections.clone(),
            metrics.page_streams.clone(),
        );
        let health_routes = telemetry::routes((metrics, health.clone()), self.interval * 5);
        let hosts = Hosts::new(self.hosts);
        let serve = |listener, app| {
            Server {
                listener,
                app,
                gate: gate.clone(),
                hosts: hosts.clone(),
            }
            .run(ctx.shutdown.clone())
        };
        #[cfg(feature = "page")]
        {
            let actions = self.token.map(|token| {
                Actions::new(
                    token,
                    Ctx {
                        tty: false,
                        ..ctx.clone()
                    },
                    std::sync::Arc::new(PageVerbs),
                )
            });
            let conn = ctx.endpoint.open_lasting().await?;
            let feed = Feed::new(
                conn,
                ctx.keys.clone(),
                self.interval,
                actions.is_some(),
                health.clone(),
            );
            let (tx, rx) = feed.channel();
            let demand = feed.demand();
            tasks.spawn(feed.run(tx, ctx.shutdown.clone()));
            let page = router(
                (rx, demand),
                actions,
                health.clone(),
                gate.clone(),
                ctx.shutdown.clone(),
            );
            match self.ui {
                None => {
                    tasks.spawn(serve(self.metrics, health_routes.merge(page)));
                }
                Some(ui) => {
                    tasks.spawn(serve(self.metrics, health_routes));
                    tasks.spawn(serve(ui, page));
                }
            }
        }
        // Built without the page: the metrics and the health endpoints alone.
        #[cfg(not(feature = "page"))]
        tasks.spawn(serve(self.metrics, health_routes));
        Ok(())
    }
}

/// The page's actions run by the command line's verbs (SPEC §4.13).
#[cfg(feature = "page")]
struct PageVerbs;

#[cfg(feature = "page")]
impl crate::page::Verbs for PageVerbs {
    fn run<'a>(
        &'a self,
        act: crate::page::Act,
        ctx: &'a Ctx,
        out: &'a mut Vec<u8>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        use crate::page::Act;
        Box::pin(async move {
            match act {
                Act::Claim(slot) => {
                    super::super::claim::Args { slot, wait: false }
                        .run(ctx, out)
                        .await
                }
                Act::Cancel(claim) => super::super::cancel::Args { claim }.run(ctx, out).await,
                Act::Hold(name, reason) => {
                    super::super::hold::Args {
                        name,
                        reason,
                        register: false,
                        for_: None,
                    }
                    .run(ctx, out)
                    .await
                }
                Act::Release(name) => super::super::release::Args { name }.run(ctx, out).await,
            }
        })
    }
}
