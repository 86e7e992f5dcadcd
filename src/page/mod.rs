//! The live page (SPEC §4.13, issue 16): `fleet serve` serves the fleet at a glance at `/`, on
//! its metrics listener or on `--ui-addr`.
//!
//! One reader per process reads the store once a pass interval (`Feed`), like the views do, so
//! any replica serves the page, a follower too, and the number of open pages costs the store
//! nothing. Each read is rendered once into the `<main>` fragment; `/` serves it inside the
//! page's shell, and `/events` streams every new one (server-sent events) to each open page,
//! whose script swaps it in. A stream holds a place under the listener's cap until its
//! connection closes; one that falls `QUEUE` frames behind is disconnected, never buffered for
//! without limit, and its browser reconnects to the newest frame. Every frame is a new read, so
//! a stream is never idle longer than a pass interval and needs no keep-alive. Assets are
//! embedded, named by their content's hash and cached for a year. Actions (`actions.rs`) are on
//! only with `--ui-token-file`. The listener itself (the Host check, the caps, the timeouts) is
//! `telemetry::listener`.

mod actions;
pub mod frame;
pub mod html;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::conn::Conn;
use crate::store::keys::Keys;
use crate::telemetry::Health;
use crate::telemetry::listener::{Connection, Gate, Place};

pub use actions::{Act, Actions, BODY_MAX, Verbs};

/// The shortest token `--ui-token-file` may hold.
pub fn actions_min_token() -> usize {
    actions::MIN_TOKEN
}
use frame::Frame;

/// How many frames one page's stream may hold unsent before the page is disconnected.
const QUEUE: usize = 4;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The newest read as every page gets it, encoded once for every page.
///
/// A frame (the `<main>` fragment) is sent to a page only when it differs from the last one the
/// page got: the fragment holds no clock that moves by itself (claims show when they were made
/// and their deadline; the page's script counts from those), so a fleet where nothing changes
/// costs each page one small `tick` event a read, saying the read's time.
pub struct Published {
    pub fragment: String,
    /// Whether the read succeeded (a failed one keeps the last frame under a banner).
    pub ok: bool,
    /// Counts the changes of the fragment: a page that got frame `seq` gets a tick next.
    pub seq: u64,
    /// The read's time on the store's clock, as the page says it.
    pub at: String,
    /// The frame as one server-sent event (`frame`, or `stale` after a failed read): each
    /// page's stream sends these very bytes, so a hundred pages cost a hundred socket writes, not
    /// a hundred encodings.
    pub frame: axum::body::Bytes,
    /// The read's time as a `tick` event.
    pub tick: axum::body::Bytes,
}

impl Published {
    pub fn new(fragment: String, ok: bool, seq: u64, at: String) -> Published {
        Published {
            frame: event(if ok { "frame" } else { "stale" }, &fragment),
            tick: event("tick", &at),
            fragment,
            ok,
            seq,
            at,
        }
    }
}

/// One server-sent event: its name, then its data line by line. An SSE client ends a line at
/// CR, LF or CRLF alike, so each of them in the data ends a `data:` line here: no line break
/// reaches the stream but fleet's own, and an operation's output can neither end the event nor
/// start a field of its own (`retry:`, `event:`, `id:`). The client joins the data lines with
/// LF, so it reads every break of the data as LF.
fn event(name: &str, data: &str) -> axum::body::Bytes {
    let mut event = String::with_capacity(data.len() + 64);
    event.push_str("event: ");
    event.push_str(name);
    event.push('\n');
    for line in sse_lines(data) {
        event.push_str("data: ");
        event.push_str(line);
        event.push('\n');
    }
    event.push('\n');
    axum::body::Bytes::from(event)
}

/// The lines of `data` as an SSE client splits them: at every CRLF, CR or LF. Text after the
/// last break is a line too, even empty, so a break at the end is kept.
fn sse_lines(data: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let text = rest?;
        match text.find(['\r', '\n']) {
            None => {
                rest = None;
                Some(text)
            }
            Some(at) => {
                let skip = if text[at..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&text[at + skip..]);
                Some(&text[..at])
            }
        }
    })
}

/// Reads the store once every `interval` and publishes each read, until `stop`.
pub struct Feed {
    conn: Conn,
    keys: Keys,
    interval: Duration,
    actions: bool,
}

impl Feed {
    pub fn new(conn: Conn, keys: Keys, interval: Duration, actions: bool) -> Self {
        Feed {
            conn,
            keys,
            interval,
            actions,
        }
    }

    /// The channel the pages read; the first value says the store is being read.
    pub fn channel(
        &self,
    ) -> (
        watch::Sender<Arc<Published>>,
        watch::Receiver<Arc<Published>>,
    ) {
        watch::channel(Arc::new(Published::new(
            html::fragment(None, None, self.actions),
            true,
            0,
            "not read yet".to_owned(),
        )))
    }

    pub async fn run(self, tx: watch::Sender<Arc<Published>>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<Frame> = None;
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (fragment, ok, at) = match Frame::read(self.conn.clone(), &self.keys).await {
                Ok(frame) => {
                    failing = false;
                    let fragment = html::fragment(Some(&frame), None, self.actions);
                    let at = frame
                        .now
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                    last = Some(frame);
                    (fragment, true, at)
                }
                Err(e) => {
                    let why = e.to_string();
                    if !failing {
                        warn!(error = why, "the live page cannot read the store");
                        failing = true;
                    }
                    let fragment = html::fragment(last.as_ref(), Some(&why), self.actions);
                    (fragment, false, tx.borrow().at.clone())
                }
            };
            let seq = {
                let before = tx.borrow();
                before.seq + u64::from(before.fragment != fragment || before.ok != ok)
            };
            // Nobody may be watching: a send with no page open is not a failure.
            let _ = tx.send_replace(Arc::new(Published::new(fragment, ok, seq, at)));
        }
    }
}

/// An embedded asset: its body, type and content-hashed path.
struct Asset {
    path: String,
    body: &'static str,
    kind: &'static str,
}

impl Asset {
    fn of(name: &str, ext: &str, body: &'static str, kind: &'static str) -> Asset {
        let hash = Sha256::digest(body.as_bytes());
        let short: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
        Asset {
            path: format!("/assets/{name}-{short}.{ext}"),
            body,
            kind,
        }
    }
}

/// The page's routes, for the metrics listener or a listener of their own; `gate` holds the
/// streams' places. Every stream ends at `stop`: the listener's graceful shutdown waits for its
/// connections, and a page's stream never ends on its own (found by the browser test: `fleet
/// serve` could not stop while a page was open).
pub fn router(
    frames: watch::Receiver<Arc<Published>>,
    actions: Option<Actions>,
    health: Arc<Health>,
    gate: Gate,
    stop: CancellationToken,
) -> axum::Router {
    let css = Asset::of("page", "css", CSS, "text/css; charset=utf-8");
    let js = Asset::of("page", "js", JS, "text/javascript; charset=utf-8");
    let shell = Arc::new((css.path.clone(), js.path.clone(), actions.clone()));
    let page_frames = frames.clone();
    let mut app = axum::Router::new()
        .route(
            "/",
            get(move || {
                let (css, js, actions) = &*shell;
                let shell = html::Shell {
                    css,
                    js,
                    csrf: actions.as_ref().map(Actions::csrf),
                };
                let body = {
                    let now = page_frames.borrow();
                    html::page(&shell, &now.fragment, &now.at)
                };
                async move { no_store(Html(body).into_response()) }
            }),
        )
        .route(
            "/events",
            get(move |connection: Option<axum::Extension<Connection>>| {
                let place = gate.stream();
                let frames = frames.clone();
                let stop = stop.clone();
                async move { stream(frames, place, connection.map(|c| c.0), stop) }
            }),
        );
    for asset in [css, js] {
        let Asset { path, body, kind } = asset;
        app = app.route(
            &path,
            get(move || async move {
                (
                    [
                        (header::CONTENT_TYPE, kind),
                        (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
                    ],
                    body,
                )
            }),
        );
    }
    if let Some(actions) = actions {
        // The body is taken unread (`Body`, not `String`): the token and the origin are checked
        // on the head alone, before a byte of it is read (SPEC §4.13).
        let handler = move |action: axum::extract::Path<String>,
                            headers: axum::http::HeaderMap,
                            body: axum::body::Body| {
            let actions = actions.clone();
            let health = health.clone();
            async move { actions.handle(action, headers, body, &health).await }
        };
        app = app.route("/actions/{action}", post(handler));
    }
    app
}

fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

/// One page's stream: the newest frame at once, then each new one, while it holds a `place`
/// (none left: 503). A feeder task moves frames into a queue of `QUEUE`; when the page has not
/// taken them and the queue is full, the page has fallen behind: its connection is closed. The
/// place goes with the response's body, which lives as long as the connection sends it, so a
/// stream that stalls keeps its place until its connection closes, and only then is it free.
fn stream(
    frames: watch::Receiver<Arc<Published>>,
    place: Option<Place>,
    connection: Option<Connection>,
    stop: CancellationToken,
) -> Response {
    let Some(place) = place else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CACHE_CONTROL, "no-store")],
            "too many pages are open; try again later\n",
        )
            .into_response();
    };
    let (tx, rx) = mpsc::channel::<axum::body::Bytes>(QUEUE);
    tokio::spawn(async move {
        let mut frames = frames;
        tokio::select! {
            ended = forward(&mut frames, &tx) => {
                if ended == Ended::Behind && let Some(connection) = connection {
                    connection.disconnect();
                }
            }
            () = stop.cancelled() => {}
        }
    });
    let events = futures::stream::unfold((rx, place), |(mut rx, place)| async move {
        let event = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(event), (rx, place)))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

/// Why a page's feeder stopped.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The page left `QUEUE` events untaken.
    Behind,
    /// The page's stream is gone (its connection closed).
    Gone,
    /// The feed ended (the process stops).
    Feed,
}

/// Moves each new read into one page's queue: the newest frame at once, then at each read the
/// frame when it changed since the page's last, else the tick. Returns when the page is gone,
/// has left `QUEUE` events untaken (a slow page is dropped, never buffered for), or the feed
/// ended.
async fn forward(
    frames: &mut watch::Receiver<Arc<Published>>,
    tx: &mpsc::Sender<axum::body::Bytes>,
) -> Ended {
    let queued = |sent: Result<(), mpsc::error::TrySendError<_>>| match sent {
        Ok(()) => None,
        Err(mpsc::error::TrySendError::Full(_)) => Some(Ended::Behind),
        Err(mpsc::error::TrySendError::Closed(_)) => Some(Ended::Gone),
    };
    let first = frames.borrow_and_update().clone();
    if let Some(ended) = queued(tx.try_send(first.frame.clone())) {
        return ended;
    }
    let mut sent = first.seq;
    while frames.changed().await.is_ok() {
        let next = frames.borrow_and_update().clone();
        let event = if next.seq == sent {
            next.tick.clone()
        } else {
            sent = next.seq;
            next.frame.clone()
        };
        if let Some(ended) = queued(tx.try_send(event)) {
            return ended;
        }
    }
    Ended::Feed
}

#[cfg(test)]
mod tests;
