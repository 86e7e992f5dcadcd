//! The HTTP listeners of `fleet serve` (SPEC §4.8, §4.13): `--metrics-addr`, and `--ui-addr`
//! when the live page has a listener of its own. Any network peer of a listener reaches it
//! without a token, so the server itself bounds what a peer can hold (SPEC §4.13, "The
//! listener"):
//!
//! - a request whose `Host` names neither the connection's own address nor a `--ui-host` name
//!   is refused (421) before it is routed, so a page elsewhere whose DNS name is rebound to this
//!   address reads nothing of the fleet;
//! - the connections open at once, and of them the page's streams, are capped below the
//!   process's file-descriptor limit ([`Limits`]), so no number of peers takes the descriptors
//!   the controller needs for Redis, its operations, Kubernetes and gRPC; and one peer address
//!   holds at most an eighth of them, so no one peer takes the places of the kubelet's probes
//!   and Prometheus;
//! - a connection has [`HEAD_READ`] to send each request's head, of [`HEAD_BYTES`] at most, and
//!   is closed when its peer takes nothing of a response for [`WRITE_STALL`];
//! - with every place held, the health probes still have [`PROBE_PLACES`] of their own, one a
//!   peer address, each for one request to `/healthz` or `/readyz` within [`PROBE_HEAD_READ`],
//!   so no crowd of the page's peers makes the kubelet restart the pod.
//!
//! It routes nothing itself: the routes are the caller's (`health::routes`, the live page's).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

pub use gate::{Error, Gate, Limits, Nofile, PROBE_PLACES, Place, Use, peer_of, raise_nofile};

/// How long a connection has to send a request's head, from the moment the server waits for
/// one (so an idle kept-alive connection is closed after it too).
pub const HEAD_READ: Duration = Duration::from_secs(10);
/// The most bytes a request's head (its start line and headers) may have; more is 431.
pub const HEAD_BYTES: usize = 8 * 1024;
/// How long a peer may take nothing of a response before its connection is closed.
pub const WRITE_STALL: Duration = Duration::from_secs(30);
/// How long a connection on a probe's place has to send its one request's head: a probe sends
/// it at once, and a peer that holds the place longer keeps it from the next probe.
pub const PROBE_HEAD_READ: Duration = Duration::from_secs(2);
/// The routes a probe's place answers.
const PROBES: [&str; 2] = ["/healthz", "/readyz"];
/// How long a stop waits for a connection's response in flight before it closes it.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// A connection's read and write buffer: a head is at most `HEAD_BYTES`, a body the page takes
/// at most 4 kB (SPEC §4.13), so a peer cannot make the server buffer more than this.
const BUFFER: usize = 16 * 1024;
/// The names a listener answers to besides its own address (`--ui-host`), lowercase.
#[derive(Clone, Debug, Default)]
pub struct Hosts(Arc<[String]>);

impl Hosts {
    pub fn new(names: Vec<String>) -> Hosts {
        Hosts(names.into_iter().map(|n| n.to_ascii_lowercase()).collect())
    }

    /// Whether a request to the host `name` (without its port) on a connection whose local
    /// address is `local` is for this listener. The port is never compared: a port-forward or
    /// a proxy changes it, and a page elsewhere controls the name, not the port.
    fn allow(&self, name: &str, local: IpAddr) -> bool {
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
        let own = match literal.unwrap_or(&name).parse::<IpAddr>() {
            Ok(ip) => ip.to_canonical() == local.to_canonical(),
            Err(_) => name == "localhost" && local.to_canonical().is_loopback(),
        };
        own || self.0.contains(&name)
    }
}

/// A `--ui-host` value: a DNS name or an IP address, without a port. Lowercase.
pub fn host_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
    match literal.unwrap_or(name).parse::<IpAddr>() {
        // A Host names an IPv6 address in brackets, so the name is kept so.
        Ok(IpAddr::V6(v6)) => return Ok(format!("[{v6}]")),
        Ok(IpAddr::V4(v4)) => return Ok(v4.to_string()),
        Err(_) => {}
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.len() <= 253 && name.split('.').all(label_ok) {
        return Ok(name.to_ascii_lowercase());
    }
    Err(format!(
        "invalid host name {text:?}: a DNS name (fleet.example.com) or an IP address, without a \
         port (any port is answered)"
    ))
}

/// The `Host` a request names, when it is not for this listener: the request line's authority
/// if it has one (absolute form), else the `Host` header. A request with neither is let through:
/// a browser always sends one, so such a request cannot come from a page elsewhere. `/healthz`
/// is let through whatever it names: it answers a constant and nothing of the fleet.
fn misdirected<B>(request: &Request<B>, local: IpAddr, hosts: &Hosts) -> Option<String> {
    if request.uri().path() == "/healthz" {
        return None;
    }
    let named = match request.uri().authority() {
        Some(authority) => authority.as_str().to_owned(),
        None => {
            let mut all = request.headers().get_all(header::HOST).iter();
            let first = all.next()?;
            if all.next().is_some() {
                return Some("several Host headers".to_owned());
            }
            match first.to_str() {
                Ok(text) => text.to_owned(),
                Err(_) => return Some(format!("{first:?}")),
            }
        }
    };
    let allowed = named
        .parse::<axum::http::uri::Authority>()
        .ok()
        .filter(well_formed)
        .is_some_and(|a| hosts.allow(a.host(), local));
    (!allowed).then_some(named)
}

/// Whether an authority is a host and at most a port, as a `Host` is: no user, no port that is
/// not a number.
fn well_formed(authority: &axum::http::uri::Authority) -> bool {
    let text = authority.as_str();
    let Some(rest) = text.strip_prefix(authority.host()) else {
        return false;
    };
    rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|port| port.parse::<u16>().is_ok())
}

/// The answer to a misdirected request: which Host, and how to allow it.
fn misdirected_answer(named: &str, local: IpAddr) -> Response {
    let shown: String = named.chars().take(100).collect();
    let loopback = if local.to_canonical().is_loopback() {
        ", localhost"
    } else {
        ""
    };
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        format!(
            "this listener answers to its own address ({local}{loopback}) and to the names of \
             --ui-host, not to Host {shown:?}: if that name is yours, start fleet serve with \
             --ui-host NAME (FLEET_UI_HOST)\n"
        ),
    )
        .into_response()
}

/// What a request knows of its connection (a request extension).
#[derive(Clone)]
pub struct Connection {
    disconnect: CancellationToken,
}

impl Connection {
    /// Closes the connection at once, whatever it is sending (a page's stream that fell
    /// behind: SPEC §4.13).
    pub fn disconnect(&self) {
        self.disconnect.cancel();
    }
}

/// One listener serving `app` until `shutdown`.
pub struct Server {
    pub listener: TcpListener,
    pub app: axum::Router,
    pub gate: Gate,
    pub hosts: Hosts,
}

impl Server {
    /// Accepts connections while a place is free ([`accept`]), until `shutdown`; then waits for
    /// the connections to end, each within [`STOP_GRACE`].
    pub async fn run(self, shutdown: CancellationToken) {
        let connections = TaskTracker::new();
        while let Some((tcp, _, place, kind)) = accept(&self.listener, &self.gate, &shutdown).await
        {
            connections.spawn(serve_connection(
                tcp,
                (place, kind),
                self.app.clone(),
                self.hosts.clone(),
                shutdown.clone(),
            ));
        }
        connections.close();
        connections.wait().await;
    }
}

/// The next connection `listener` accepts with a place of `gate`'s, or `None` at `shutdown`.
/// A place is reserved before the accept, so past the cap peers wait in the kernel's backlog and
/// cost no descriptor; a peer past its share is closed as accepted, and its place goes to the
/// next peer. An accept that fails is logged and tried again. With every connection's place
/// held, a probe's place is taken (`Use::Probe`).
pub async fn accept(
    listener: &TcpListener,
    gate: &Gate,
    shutdown: &CancellationToken,
) -> Option<(TcpStream, std::net::SocketAddr, Place, Use)> {
    loop {
        let reserved = tokio::select! {
            () = shutdown.cancelled() => return None,
            reserved = gate.reserve_any() => reserved,
        };
        let (tcp, from) = tokio::select! {
            () = shutdown.cancelled() => return None,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    drop(reserved);
                    accept_failed(e, shutdown).await;
                    continue;
                }
            },
        };
        match gate.admit(gate.upgrade(reserved), from.ip()) {
            Some((place, kind)) => return Some((tcp, from, place, kind)),
            None => {
                debug!(peer = %from.ip(), "a peer holds its share of the connections; closed");
                drop(tcp);
            }
        }
    }
}

/// After a failed accept: a peer that left is nothing; anything else (out of descriptors) is
/// retried after a second, so the loop does not spin.
async fn accept_failed(e: io::Error, shutdown: &CancellationToken) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        debug!(error = %e, "a peer left before its connection was accepted");
        return;
    }
    warn!(error = %e, "accepting a connection failed; trying again in a second");
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(Duration::from_secs(1)) => {}
    }
}

/// Serves one connection with the listener's bounds, until it ends, is disconnected, or the
/// stop's grace runs out; its place is given back when it closes.
async fn serve_connection(
    tcp: TcpStream,
    (place, kind): (Place, Use),
    app: axum::Router,
    hosts: Hosts,
    shutdown: CancellationToken,
) {
    let Ok(local) = tcp.local_addr() else {
        return;
    };
    // Frames are written whole; waiting to coalesce them only delays the page.
    let _ = tcp.set_nodelay(true);
    let disconnect = CancellationToken::new();
    let service = PerConnection {
        app: TowerToHyperService::new(app),
        hosts,
        local: local.ip(),
        connection: Connection {
            disconnect: disconnect.clone(),
        },
        kind,
    };
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(match kind {
            Use::Any => HEAD_READ,
            Use::Probe => PROBE_HEAD_READ,
        })
        .keep_alive(kind == Use::Any)
        .max_header_size(HEAD_BYTES)
        .max_buf_size(BUFFER);
    let io = TokioIo::new(Bounded::new(
        tcp,
        Deadlines {
            write_stall: WRITE_STALL,
            read: None,
        },
    ));
    let conn = http.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        ended = conn.as_mut() => {
            if let Err(e) = ended {
                debug!(error = %e, "an HTTP connection ended");
            }
        }
        () = disconnect.cancelled() => {}
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(STOP_GRACE, conn).await;
        }
    }
    drop(place);
}

/// The per-connection service: the Host check, then the routes (of a probe's place, the probes'
/// alone).
#[derive(Clone)]
struct PerConnection {
    app: TowerToHyperService<axum::Router>,
    hosts: Hosts,
    local: IpAddr,
    connection: Connection,
    kind: Use,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl Service<Request<Incoming>> for PerConnection {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, mut request: Request<Incoming>) -> Answer {
        if self.kind == Use::Probe && !PROBES.contains(&request.uri().path()) {
            let refused = (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
                "every place of this listener is held: only /healthz and /readyz are answered \
                 now; try again\n",
            )
                .into_response();
            return Box::pin(async move { Ok(refused) });
        }
        if let Some(named) = misdirected(&request, self.local, &self.hosts) {
            let refused = misdirected_answer(&named, self.local);
            return Box::pin(async move { Ok(refused) });
        }
        request.extensions_mut().insert(self.connection.clone());
        Box::pin(self.app.call(request))
    }
}

/// A connection's bounds in time, as [`Bounded`] keeps them.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// A write fails once the peer has taken nothing of it for this long.
    pub write_stall: Duration,
    /// A read fails when the peer has sent nothing for this long: `(first, idle)`, the first
    /// byte's wait from the accept and the wait after any later byte. `None`: reads wait as long
    /// as the protocol above them lets them (HTTP/1 has its own head timeout).
    pub read: Option<(Duration, Duration)>,
}

/// A socket whose writes fail once its peer has taken nothing for a while, and whose reads fail
/// once its peer has sent nothing for a while ([`Deadlines`]): a peer that stops reading or
/// stops sending cannot hold a connection, and what is buffered for it, for ever.
pub struct Bounded<T> {
    io: T,
    deadlines: Deadlines,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The read deadline's timer, and when the peer last sent a byte (`None`: never yet).
    silent: Option<Pin<Box<tokio::time::Sleep>>>,
    heard: Option<tokio::time::Instant>,
}

impl<T> Bounded<T> {
    pub fn new(io: T, deadlines: Deadlines) -> Bounded<T> {
        Bounded {
            io,
            silent: deadlines
                .read
                .map(|(first, _)| Box::pin(tokio::time::sleep(first))),
            deadlines,
            stalled: None,
            heard: None,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// A write's outcome, timed: the clock starts at its first `Pending` and stops at any
    /// progress.
    fn timed<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.deadlines.write_stall;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer took nothing of the response",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A read that waits: fails once the read deadline passed with nothing heard since. The
    /// timer is moved on lazily, only when it fires, so a busy connection costs no timer work
    /// per read.
    fn silence(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (Some(silent), Some((_, idle))) = (self.silent.as_mut(), self.deadlines.read) else {
            return Poll::Pending;
        };
        loop {
            if silent.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match self.heard {
                Some(heard) if heard + idle > tokio::time::Instant::now() => {
                    silent.as_mut().reset(heard + idle);
                }
                _ => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer sent nothing in time",
                    )));
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Bounded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before && this.deadlines.read.is_some() {
                    this.heard = Some(tokio::time::Instant::now());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.silence(cx),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Bounded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.timed(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.timed(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

mod gate;
#[cfg(test)]
mod tests;
