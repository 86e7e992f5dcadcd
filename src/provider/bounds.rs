//! What the provider's listener bounds of a peer (SPEC §6.4, §7.1). Any peer that reaches the
//! port holds a connection before TLS or a certificate is asked of it, so the listener bounds
//! what it holds as the page's listener does (SPEC §4.13):
//!
//! - its connections, in places of their own (`Limits::provider`, apart from the HTTP
//!   listeners'): past the cap nothing is accepted, and a peer address past its share is closed
//!   as accepted;
//! - a connection's time: its first byte within [`FIRST_BYTE`] (a TLS handshake within it too),
//!   then never silent for [`IDLE`]; the server pings every [`KEEPALIVE`], so a live client,
//!   which answers, is never idle, and a gone one is closed after [`KEEPALIVE_TIMEOUT`];
//! - its streams: [`STREAMS`] at once on one connection (a client queues the rest), and a call
//!   answered within [`CALL`]; what it sends before the provider reads it, by HTTP/2's windows
//!   ([`CONNECTION_WINDOW`]);
//! - the memory of requests in flight: the bytes every request announces (its messages'
//!   lengths, which the decoder reserves as it reads them) until it is answered, and the calls,
//!   are counted against [`Budget`]'s caps, over every connection and per peer address; a
//!   request past them is refused (`RESOURCE_EXHAUSTED`) before the decoder sees its message.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::telemetry::listener::{self, Bounded, Deadlines, Gate, Place, peer_of};

/// The largest request the provider reads (SPEC §7.1): tonic's own default, said here so it is
/// fleet's rule. cluster-autoscaler's largest request, DeleteNodes of every node of a group, is a
/// few hundred bytes a node; a peer's larger message is refused before it is decoded.
pub const MAX_REQUEST: usize = 4 << 20;

/// How long a new connection has to send its first byte, and a TLS client to finish its
/// handshake: a peer that connects and says nothing holds a place no longer.
pub const FIRST_BYTE: Duration = Duration::from_secs(10);
/// How long a connection may send nothing once it has begun.
pub const IDLE: Duration = Duration::from_secs(90);
/// How often the server pings a connection (HTTP/2 PING), and how long it waits for the answer
/// before it closes the connection. A client answers every ping, so a live one is never
/// [`IDLE`] whatever its calls.
pub const KEEPALIVE: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// A peer that takes nothing of an answer for this long is disconnected.
pub const WRITE_STALL: Duration = Duration::from_secs(30);
/// The calls one connection may have open at once (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`):
/// a client queues the next itself. cluster-autoscaler makes its calls one after another.
pub const STREAMS: u32 = 8;
/// How long a call may take, its request read and its answer made.
pub const CALL: Duration = Duration::from_secs(30);
/// What a peer may send on one connection, and on one stream, before the provider reads it
/// (HTTP/2 flow control): what it reads is charged to the budget below, so this is all a
/// connection holds beside it.
pub const CONNECTION_WINDOW: u32 = 1 << 20;
pub const STREAM_WINDOW: u32 = 256 << 10;
/// The largest header block a request may have.
pub const HEADERS: u32 = 16 * 1024;
/// The bytes of requests in flight, over every connection and for one peer address: four and two
/// of the largest request. cluster-autoscaler's requests are a few hundred bytes a node.
pub const BYTES: usize = 4 * MAX_REQUEST;
pub const BYTES_PER_PEER: usize = 2 * MAX_REQUEST;
/// The calls in flight, over every connection and for one peer address: each answer is held in
/// memory until it is sent.
pub const CALLS: usize = 64;
pub const CALLS_PER_PEER: usize = 16;

/// An accepted connection, holding its place, its reads and writes bounded in time.
pub struct Conn {
    io: Bounded<TcpStream>,
    _place: Place,
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.get_ref().connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The connections `listener` accepts while `gate` has a place for them, until `stop`.
pub fn incoming(
    listener: Arc<TcpListener>,
    gate: Gate,
    stop: CancellationToken,
) -> impl futures::Stream<Item = io::Result<Conn>> {
    futures::stream::unfold(
        (listener, gate, stop),
        |(listener, gate, stop)| async move {
            // The provider's gate keeps no probes' places: every place is a connection's.
            let (tcp, _, place, _) = listener::accept(&listener, &gate, &stop).await?;
            // Without TCP_NODELAY an answer over more than one segment waits out the client's
            // delayed ACK (Nagle): about 40 ms on every NodeGroupNodes of a large group.
            let _ = tcp.set_nodelay(true);
            let io = Bounded::new(
                tcp,
                Deadlines {
                    write_stall: WRITE_STALL,
                    read: Some((FIRST_BYTE, IDLE)),
                },
            );
            Some((Ok(Conn { io, _place: place }), (listener, gate, stop)))
        },
    )
}

/// The caps on requests in flight, shared by every connection of the provider.
#[derive(Clone)]
pub struct Budget {
    held: Arc<Mutex<Held>>,
    bytes: Gauge,
}

/// What is held now: in all, and by each peer address that holds anything.
#[derive(Default)]
struct Held {
    total: Load,
    peers: HashMap<IpAddr, Load>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Load {
    bytes: usize,
    calls: usize,
}

impl Budget {
    /// A budget counted on `bytes` (`fleet_provider_request_bytes`).
    pub fn new(bytes: Gauge) -> Budget {
        Budget {
            held: Arc::default(),
            bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes `load` for `peer`, or says which cap it would pass.
    fn take(&self, peer: IpAddr, load: Load) -> Result<(), Status> {
        let mut held = self.lock();
        let mine = held.peers.get(&peer).copied().unwrap_or_default();
        let past = |have: Load, bytes: usize, calls: usize| {
            have.bytes + load.bytes > bytes || have.calls + load.calls > calls
        };
        if past(mine, BYTES_PER_PEER, CALLS_PER_PEER) {
            return Err(Status::resource_exhausted(format!(
                "this peer has {} calls and {} bytes of requests in flight, at most {CALLS_PER_PEER} \
                 and {BYTES_PER_PEER}: wait for their answers",
                mine.calls, mine.bytes
            )));
        }
        if past(held.total, BYTES, CALLS) {
            return Err(Status::resource_exhausted(format!(
                "the provider has {} calls and {} bytes of requests in flight, at most {CALLS} and \
                 {BYTES}: try again",
                held.total.calls, held.total.bytes
            )));
        }
        let entry = held.peers.entry(peer).or_default();
        entry.bytes += load.bytes;
        entry.calls += load.calls;
        held.total.bytes += load.bytes;
        held.total.calls += load.calls;
        self.bytes.inc_by(gauge(load.bytes));
        Ok(())
    }

    fn give(&self, peer: IpAddr, load: Load) {
        let mut held = self.lock();
        if let Some(entry) = held.peers.get_mut(&peer) {
            entry.bytes -= load.bytes.min(entry.bytes);
            entry.calls -= load.calls.min(entry.calls);
            if *entry == Load::default() {
                held.peers.remove(&peer);
            }
        }
        held.total.bytes -= load.bytes.min(held.total.bytes);
        held.total.calls -= load.calls.min(held.total.calls);
        self.bytes.dec_by(gauge(load.bytes));
    }
}

fn gauge(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// One call's share of the budget: its call, and its request's bytes as they come; given back
/// when the call's answer is sent or dropped.
pub struct Share {
    budget: Budget,
    peer: IpAddr,
    bytes: Mutex<usize>,
}

impl Share {
    fn charge(&self, n: usize) -> Result<(), Status> {
        self.budget.take(self.peer, Load { bytes: n, calls: 0 })?;
        *self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += n;
        Ok(())
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let bytes = *self
            .bytes
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.budget.give(self.peer, Load { bytes, calls: 1 });
    }
}

/// The peer address of a request, as the provider's connections carry it (plaintext or TLS).
fn peer<B>(request: &http::Request<B>) -> Option<IpAddr> {
    let extensions = request.extensions();
    let tcp = extensions.get::<TcpConnectInfo>().or_else(|| {
        extensions
            .get::<tonic::transport::server::TlsConnectInfo<TcpConnectInfo>>()
            .map(tonic::transport::server::TlsConnectInfo::get_ref)
    })?;
    tcp.remote_addr().map(|a| peer_of(a.ip()))
}

/// The layer that counts every call against a [`Budget`].
#[derive(Clone)]
pub struct Budgeted(pub Budget);

impl<S> tower_layer::Layer<S> for Budgeted {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            budget: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    budget: Budget,
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, ResBody> tower_service::Service<http::Request<tonic::body::Body>> for Counted<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>, Response = http::Response<ResBody>>
        + Send,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<Kept<ResBody>>;
    type Error = S::Error;
    type Future = Answer<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // A request with no peer address is the process's own (a test's in-memory channel).
        let peer = peer(&request).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        if let Err(refused) = self.budget.take(peer, Load { bytes: 0, calls: 1 }) {
            return Box::pin(async move { Ok(refused.into_http().map(Kept::Refused)) });
        }
        let share = Arc::new(Share {
            budget: self.budget.clone(),
            peer,
            bytes: Mutex::new(0),
        });
        let request = request.map(|body| {
            tonic::body::Body::new(Charged {
                inner: body,
                share: share.clone(),
                framing: Framing::default(),
            })
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| Kept::Answer { inner, share }))
        })
    }
}

/// A request's body, charged to its call's share as its messages come: each gRPC message by the
/// length its 5-byte prefix announces, before the frame that carries the prefix goes on. tonic
/// reserves that length as it reads the prefix, so a request that announces 4 MiB costs 4 MiB
/// from its first frame, whatever it sends after.
struct Charged {
    inner: tonic::body::Body,
    share: Arc<Share>,
    /// Where the body is in its messages.
    framing: Framing,
}

/// The gRPC framing of a body: a message is a flag byte, a 4-byte big-endian length, and that
/// many bytes.
#[derive(Default)]
struct Framing {
    /// The prefix bytes of the next message read so far.
    prefix: Vec<u8>,
    /// The bytes of the current message still to come.
    body: usize,
}

impl Framing {
    /// What the bytes of `data` announce that was not announced before: the sum of the prefix
    /// and the length of every message whose prefix ends in them.
    fn announced(&mut self, mut data: &[u8]) -> usize {
        let mut announced = 0;
        while !data.is_empty() {
            if self.body > 0 {
                let n = self.body.min(data.len());
                self.body -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.prefix.len()).min(data.len());
            self.prefix.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.prefix.len() == 5 {
                let length = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]);
                // A message past MAX_REQUEST is refused by the decoder before it reserves.
                self.body = usize::try_from(length).unwrap_or(usize::MAX);
                announced += 5 + self.body.min(MAX_REQUEST);
                self.prefix.clear();
            }
        }
        announced
    }
}

impl Body for Charged {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame
                    .data_ref()
                    .map_or(0, |data| this.framing.announced(data));
                Poll::Ready(Some(this.share.charge(n).map(|()| frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's body, holding its call's share until it is sent or dropped; or the refusal of a
/// call past the caps.
pub enum Kept<B> {
    Answer { inner: B, share: Arc<Share> },
    Refused(tonic::body::Body),
}

impl<B> Body for Kept<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = Bytes;
    type Error = tonic::codegen::StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Kept::Answer { inner, .. } => Pin::new(inner).poll_frame(cx).map_err(Into::into),
            Kept::Refused(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Kept::Answer { inner, .. } => inner.is_end_stream(),
            Kept::Refused(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Kept::Answer { inner, .. } => inner.size_hint(),
            Kept::Refused(body) => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    // A message is charged by the length its prefix announces, once, wherever the frames split
    // it: at the frame that ends its prefix.
    #[test]
    fn a_message_is_announced_once_by_its_prefix_however_its_frames_split_it() {
        let mut two = message(10);
        two.extend(message(3));
        for cut in 0..=two.len() {
            for second in cut..=two.len() {
                let mut f = Framing::default();
                let parts = [&two[..cut], &two[cut..second], &two[second..]];
                let charged: Vec<usize> = parts.iter().map(|p| f.announced(p)).collect();
                assert_eq!(
                    charged.iter().sum::<usize>(),
                    15 + 8,
                    "cut at {cut}, {second}"
                );
                assert_eq!(f.body, 0);
                assert!(f.prefix.is_empty());
                // The first message's 15 bytes are charged by the part that ends its prefix.
                let ends_prefix = parts
                    .iter()
                    .scan(0, |at, p| {
                        *at += p.len();
                        Some(*at)
                    })
                    .position(|at| at >= 5)
                    .unwrap();
                assert!(
                    charged[ends_prefix] >= 15,
                    "cut at {cut}, {second}: {charged:?}"
                );
            }
        }
    }

    // A prefix that announces more than the largest request is charged at that size: the
    // decoder refuses the message before it reserves anything.
    #[test]
    fn an_announcement_past_the_largest_request_is_charged_at_the_largest() {
        let mut f = Framing::default();
        assert_eq!(f.announced(&[0, 0xff, 0xff, 0xff, 0xff]), 5 + MAX_REQUEST);
    }
}
