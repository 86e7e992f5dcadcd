//! The live page (SPEC §4.13): `fleet serve` serves the fleet at a glance at `/`, on
//! its metrics listener or on `--ui-addr`.
//!
//! One reader per process reads the store once a pass interval (`Feed`), like the views do, so
//! any replica serves the page, a follower too, and the number of open pages costs the store
//! nothing; and only while a page is open (`Demand`), so no page open costs it nothing either. A page looks at a view (`view::Query`: the slot table's filters and page, in its
//! address); each view of a read is rendered once for every page that looks at it. `/` serves
//! it inside the page's shell, and `/events` streams it (server-sent events): the first frame
//! whole, then only the parts and rows that changed (`view::Main::delta`), which the page's
//! script puts in place. A stream holds a place under the listener's cap until its
//! connection closes; one that falls `QUEUE` frames behind is disconnected, never buffered for
//! without limit, and its browser reconnects to the newest frame. Every frame is a new read, so
//! a stream is never idle longer than a pass interval and needs no keep-alive. Assets are
//! embedded, named by their content's hash and cached for a year. Actions (`actions.rs`) are on
//! only with `--ui-token-file`. The listener itself (the Host check, the caps, the timeouts) is
//! `telemetry::listener`.
//!
//! - [`frame`]: what the page shows, read once for every open page (the views' world, the
//!   groups, the slot table).
//! - [`view`]: what one open page looks at (its filters and page) and what it is sent when the
//!   fleet changes.
//! - [`html`]: the page rendered on the server, whole at first and in parts after.
//! - `demand`: who wants the page's reads, so the feed reads only while a page is open.
//! - `actions`: claim, cancel, hold and release, behind the token.

mod actions;
mod demand;
pub mod frame;
pub mod html;
pub mod view;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::store::keys::Keys;
use crate::telemetry::Health;
use crate::telemetry::listener::{Connection, Gate, Place};
use fleet_redis::conn::Conn;

pub use actions::{Act, Actions, BODY_MAX, Verbs};
pub use demand::Demand;
use demand::fresh;
use view::{Change, Main, Query};

/// The shortest token `--ui-token-file` may hold.
pub fn actions_min_token() -> usize {
    actions::MIN_TOKEN
}

/// The longest token `--ui-token-file` may hold: one that fits a request's head (SPEC §4.13 L9).
pub fn actions_max_token() -> usize {
    actions::MAX_TOKEN
}
use frame::Frame;

/// How many frames one page's stream may hold unsent before the page is disconnected.
const QUEUE: usize = 4;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// How many views of one read are kept for the pages that look at them; a page looking at
/// another has its view rendered for itself.
const VIEWS: usize = 16;

/// The newest read as every page gets it: the read, or why there is none, and its views as the
/// pages looking at them asked for them.
///
/// A view holds no clock that moves by itself (claims show when they were made and their
/// deadline; the page's script counts from those), so a fleet where nothing changes costs each
/// page one small `tick` event a read, saying the read's time.
pub struct Published {
    /// The last read that succeeded.
    pub frame: Option<Arc<Frame>>,
    /// Why the newest read failed, when it did (the page shows the last one under a banner).
    pub error: Option<String>,
    /// The read's time on the store's clock, as the page says it.
    pub at: String,
    actions: bool,
    views: Mutex<Vec<(Query, Arc<Main>)>>,
}

impl Published {
    pub fn new(
        frame: Option<Arc<Frame>>,
        error: Option<String>,
        at: String,
        actions: bool,
    ) -> Published {
        Published {
            frame,
            error,
            at,
            actions,
            views: Mutex::new(Vec::new()),
        }
    }

    /// The view `query` of this read, rendered once for every page that looks at it (up to
    /// `VIEWS` views; others are rendered for each page).
    pub fn view(&self, query: &Query) -> Arc<Main> {
        let kept = |views: &Vec<(Query, Arc<Main>)>| {
            views
                .iter()
                .find(|(q, _)| q == query)
                .map(|(_, m)| m.clone())
        };
        if let Some(main) = kept(&self.views.lock().unwrap_or_else(|p| p.into_inner())) {
            return main;
        }
        let main = Arc::new(html::main(
            self.frame.as_deref(),
            self.error.as_deref(),
            query,
            self.actions,
        ));
        let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(other) = kept(&views) {
            return other;
        }
        if views.len() < VIEWS {
            views.push((query.clone(), main.clone()));
        }
        main
    }

    /// The read's time as a `tick` event.
    fn tick(&self) -> axum::body::Bytes {
        event("tick", &self.at)
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

/// Reads the store once every `interval`, and after each pass of this process's controller
/// (no sooner than `interval / 4` after the read before, so passes woken back to back cost the
/// store no more than four reads an interval), and publishes each read, until `stop`; only while
/// a page wants them (`Demand`).
pub struct Feed {
    conn: Conn,
    keys: Keys,
    interval: Duration,
    actions: bool,
    health: Arc<Health>,
    demand: Demand,
}

impl Feed {
    pub fn new(
        conn: Conn,
        keys: Keys,
        interval: Duration,
        actions: bool,
        health: Arc<Health>,
    ) -> Self {
        Feed {
            conn,
            keys,
            interval,
            actions,
            health,
            demand: Demand::default(),
        }
    }

    /// Who wants this feed's reads: the page's routes say so (`router`).
    pub fn demand(&self) -> Demand {
        self.demand.clone()
    }

    /// The channel the pages read; the first value says the store is being read.
    pub fn channel(
        &self,
    ) -> (
        watch::Sender<Arc<Published>>,
        watch::Receiver<Arc<Published>>,
    ) {
        watch::channel(Arc::new(Published::new(
            None,
            None,
            "not read yet".to_owned(),
            self.actions,
        )))
    }

    pub async fn run(self, tx: watch::Sender<Arc<Published>>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<Arc<Frame>> = None;
        let mut failing = false;
        loop {
            if self.demand.wanted() {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                    () = self.health.pass_done() => {}
                }
            } else {
                // Nobody looks: no read until someone does, and then one at once.
                self.demand.wanted_or(&stop).await;
                if stop.is_cancelled() {
                    return;
                }
            }
            let started = tokio::time::Instant::now();
            let published = match Frame::read(self.conn.clone(), &self.keys).await {
                Ok(frame) => {
                    failing = false;
                    debug!(
                        slots = frame.slots.len(),
                        ms = started.elapsed().as_millis(),
                        "the live page read the store"
                    );
                    let at = frame
                        .now
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                    let frame = Arc::new(frame);
                    last = Some(frame.clone());
                    Published::new(Some(frame), None, at, self.actions)
                }
                Err(e) => {
                    let why = e.to_string();
                    if !failing {
                        warn!(error = why, "the live page cannot read the store");
                        failing = true;
                    }
                    let at = tx.borrow().at.clone();
                    Published::new(last.clone(), Some(why), at, self.actions)
                }
            };
            // Nobody may be watching: a send with no page open is not a failure.
            let _ = tx.send_replace(Arc::new(published));
            tick.reset();
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(started + self.interval / 4) => {}
            }
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
    (frames, demand): (watch::Receiver<Arc<Published>>, Demand),
    actions: Option<Actions>,
    health: Arc<Health>,
    gate: Gate,
    stop: CancellationToken,
) -> axum::Router {
    let css = Asset::of("page", "css", CSS, "text/css; charset=utf-8");
    let js = Asset::of("page", "js", JS, "text/javascript; charset=utf-8");
    let shell: PageShell = Arc::new((css.path.clone(), js.path.clone(), actions.clone()));
    let page_frames = frames.clone();
    let page_demand = demand.clone();
    let mut app = axum::Router::new()
        .route(
            "/",
            get(move |query: axum::extract::RawQuery| {
                let to_read = (page_frames.clone(), page_demand.clone());
                page(shell.clone(), to_read, query.0)
            }),
        )
        .route(
            "/events",
            get(
                move |query: axum::extract::RawQuery,
                      connection: Option<axum::Extension<Connection>>| {
                    let view = Query::parse(query.0.as_deref().unwrap_or(""));
                    let place = view.is_ok().then(|| gate.stream()).flatten();
                    let frames = frames.clone();
                    let demand = demand.clone();
                    let stop = stop.clone();
                    async move {
                        match view {
                            Err(why) => bad_view(&why),
                            Ok(view) => {
                                stream((frames, demand), view, place, connection.map(|c| c.0), stop)
                            }
                        }
                    }
                },
            ),
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

/// The assets' paths and the actions, which every page names.
type PageShell = Arc<(String, String, Option<Actions>)>;

/// `/`: the page with the view `query` asks for, from the newest read; when the feed was idle, from
/// the read this load wakes.
async fn page(
    shell: PageShell,
    (mut frames, demand): (watch::Receiver<Arc<Published>>, Demand),
    query: Option<String>,
) -> Response {
    let query = match Query::parse(query.as_deref().unwrap_or("")) {
        Err(why) => return bad_view(&why),
        Ok(query) => query,
    };
    frames.mark_unchanged();
    if demand.load() {
        fresh(&mut frames).await;
    }
    let (css, js, actions) = &*shell;
    let shell = html::Shell {
        css,
        js,
        csrf: actions.as_ref().map(Actions::csrf),
    };
    let now = frames.borrow().clone();
    let main = now.view(&query);
    no_store(Html(html::page(&shell, &main.html(), &now.at)).into_response())
}

/// A view that cannot be read: 400, saying what is wrong and where every slot is.
fn bad_view(why: &str) -> Response {
    no_store(
        (
            StatusCode::BAD_REQUEST,
            Html(format!(
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
                 <title>fleet: not a view</title></head><body><h1>Not a view of the fleet</h1>\
                 <p>{}</p><p><a href=\"./\">Every slot</a></p></body></html>\n",
                html::esc(why)
            )),
        )
            .into_response(),
    )
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
    (frames, demand): (watch::Receiver<Arc<Published>>, Demand),
    view: Query,
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
    let mut frames = frames;
    frames.mark_unchanged();
    let (watching, idle) = demand.watch();
    tokio::spawn(async move {
        if idle {
            fresh(&mut frames).await;
        }
        tokio::select! {
            ended = forward(&mut frames, &tx, &view) => {
                if ended == Ended::Behind && let Some(connection) = connection {
                    connection.disconnect();
                }
            }
            () = stop.cancelled() => {}
        }
    });
    // The place and the stream's share of the demand go with the body.
    let held = (place, watching);
    let events = futures::stream::unfold((rx, held), |(mut rx, held)| async move {
        let event = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(event), (rx, held)))
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

/// Moves each new read into one page's queue: the view whole at once, then at each read what
/// changed in it (`delta`, or the whole view when its parts changed), with the read's time, or
/// the time alone when nothing did. Returns when the page is gone, has left `QUEUE` events
/// untaken (a slow page is dropped, never buffered for), or the feed ended.
async fn forward(
    frames: &mut watch::Receiver<Arc<Published>>,
    tx: &mpsc::Sender<axum::body::Bytes>,
    view: &Query,
) -> Ended {
    let queued = |sent: Result<(), mpsc::error::TrySendError<_>>| match sent {
        Ok(()) => None,
        Err(mpsc::error::TrySendError::Full(_)) => Some(Ended::Behind),
        Err(mpsc::error::TrySendError::Closed(_)) => Some(Ended::Gone),
    };
    let whole = |main: &Main| event(if main.stale { "stale" } else { "frame" }, &main.html());
    let first = frames.borrow_and_update().clone();
    let mut shown = first.view(view);
    if let Some(ended) = queued(tx.try_send(whole(&shown))) {
        return ended;
    }
    while frames.changed().await.is_ok() {
        let next = frames.borrow_and_update().clone();
        let main = next.view(view);
        let sent = match shown.delta(&main) {
            None => next.tick(),
            Some(Change::Whole) => join(whole(&main), next.tick()),
            Some(Change::Delta(parts)) => join(event("delta", &parts), next.tick()),
        };
        shown = main;
        if let Some(ended) = queued(tx.try_send(sent)) {
            return ended;
        }
    }
    Ended::Feed
}

/// Two events as one write.
fn join(a: axum::body::Bytes, b: axum::body::Bytes) -> axum::body::Bytes {
    let mut both = Vec::with_capacity(a.len() + b.len());
    both.extend_from_slice(&a);
    both.extend_from_slice(&b);
    axum::body::Bytes::from(both)
}

#[cfg(test)]
mod tests;
