//! The live page (SPEC §4.13, issue 16): `fleet serve` serves the fleet at a glance on its
//! metrics listener, at `/`.
//!
//! One reader per process reads the store once a pass interval (`Feed`), like the views do, so
//! any replica serves the page, a follower too, and the number of open pages costs the store
//! nothing. Each read is rendered once into the `<main>` fragment; `/` serves it inside the
//! page's shell, and `/events` streams every new one (server-sent events) to each open page,
//! whose script swaps it in. A page's stream holds at most `QUEUE` frames: one that falls behind
//! is dropped, never buffered without limit, and its browser reconnects to the newest frame.
//! Assets are embedded, named by their content's hash and cached for a year. Actions
//! (`actions.rs`) are on only with `--ui-token-file`.

mod actions;
pub mod frame;
pub mod html;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::conn::Conn;
use crate::store::keys::Keys;
use crate::telemetry::Health;

pub use actions::Actions;

/// The shortest token `--ui-token-file` may hold.
pub fn actions_min_token() -> usize {
    actions::MIN_TOKEN
}
use frame::Frame;

/// How many frames one page's stream may hold unsent before the page is dropped.
const QUEUE: usize = 4;
/// The most pages streamed at once; more are told to come back (503).
const MAX_STREAMS: usize = 1_000;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// The newest read as every page gets it: the fragment, rendered once.
pub struct Published {
    pub fragment: String,
    /// Whether the read succeeded (a failed one keeps the last frame under a banner).
    pub ok: bool,
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
        watch::channel(Arc::new(Published {
            fragment: html::fragment(None, None, self.actions),
            ok: true,
        }))
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
            let published = match Frame::read(self.conn.clone(), &self.keys).await {
                Ok(frame) => {
                    failing = false;
                    let fragment = html::fragment(Some(&frame), None, self.actions);
                    last = Some(frame);
                    Published { fragment, ok: true }
                }
                Err(e) => {
                    let why = e.to_string();
                    if !failing {
                        warn!(error = why, "the live page cannot read the store");
                        failing = true;
                    }
                    let fragment = html::fragment(last.as_ref(), Some(&why), self.actions);
                    Published {
                        fragment,
                        ok: false,
                    }
                }
            };
            // Nobody may be watching: a send with no page open is not a failure.
            let _ = tx.send_replace(Arc::new(published));
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

/// The page's routes, to merge into the metrics listener's. Every stream ends at `stop`: the
/// listener's graceful shutdown waits for its connections, and a page's stream never ends on
/// its own (found by the browser test: `fleet serve` could not stop while a page was open).
pub fn router(
    frames: watch::Receiver<Arc<Published>>,
    actions: Option<Actions>,
    health: Arc<Health>,
    stop: CancellationToken,
) -> axum::Router {
    let css = Asset::of("page", "css", CSS, "text/css; charset=utf-8");
    let js = Asset::of("page", "js", JS, "text/javascript; charset=utf-8");
    let shell = Arc::new((css.path.clone(), js.path.clone(), actions.clone()));
    let streams = Arc::new(AtomicUsize::new(0));
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
                let body = html::page(&shell, &page_frames.borrow().fragment);
                async move { no_store(Html(body).into_response()) }
            }),
        )
        .route(
            "/events",
            get(move || {
                let frames = frames.clone();
                let streams = streams.clone();
                let stop = stop.clone();
                async move { stream(frames, streams, stop) }
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
        let handler = move |action: axum::extract::Path<String>,
                            headers: axum::http::HeaderMap,
                            body: String| {
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

/// One page's stream: the newest frame at once, then each new one. A feeder task moves frames
/// into a queue of `QUEUE`; when the page has not taken them and the queue is full, the feeder
/// stops and the stream ends after what it holds (the browser reconnects to the newest frame).
fn stream(
    frames: watch::Receiver<Arc<Published>>,
    streams: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> Response {
    if streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
        streams.fetch_sub(1, Ordering::SeqCst);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many pages are open; try again later\n",
        )
            .into_response();
    }
    let (tx, rx) = mpsc::channel::<Arc<Published>>(QUEUE);
    tokio::spawn(async move {
        let mut frames = frames;
        tokio::select! {
            () = forward(&mut frames, &tx) => {}
            () = stop.cancelled() => {}
        }
        streams.fetch_sub(1, Ordering::SeqCst);
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        let frame = rx.recv().await?;
        let event = Event::default()
            .event(if frame.ok { "frame" } else { "stale" })
            .data(&frame.fragment);
        Some((Ok::<_, std::convert::Infallible>(event), rx))
    });
    no_store(
        Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response(),
    )
}

/// Moves each new frame into one page's queue: the newest at once, then every change. Returns
/// when the page is gone or has left `QUEUE` frames untaken: a slow page is dropped, never
/// buffered for.
async fn forward(frames: &mut watch::Receiver<Arc<Published>>, tx: &mpsc::Sender<Arc<Published>>) {
    let first = frames.borrow_and_update().clone();
    if tx.try_send(first).is_err() {
        return;
    }
    while frames.changed().await.is_ok() {
        let next = frames.borrow_and_update().clone();
        if tx.try_send(next).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
