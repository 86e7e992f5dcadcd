//! Waking the controller between its ticks (SPEC §4.5, the wake path). It only ever says "pass
//! sooner"; what a pass does is decided by the pass, from what it reads.
//!
//! Two sources:
//! - **Announced beats.** A beat that changes its bench's state publishes the bench's name on the
//!   wake channel (`SPUBLISH` in the beat's pipeline, a sharded channel under the presence keys' hash
//!   tag).
//!   A listener task holds a RESP3 connection of its own, subscribed with `SSUBSCRIBE` (redis-rs's
//!   `aio::PubSub` has none), and every message it hears asks for a pass. It subscribes again
//!   whenever the subscription ends: an unsubscribe the server sends (a slot that moved, in a
//!   Cluster), a disconnection, a ping left unanswered. On a Redis Cluster the listener's
//!   connection is a Cluster connection of its own (RESP3, redis-rs's `ssubscribe`), which sends
//!   the subscription to the node of the channel's slot. After each subscription it asks for one
//!   pass, since a change announced while nobody listened is lost.
//! - **Deadlines.** Each pass's read holds every key's deadline; the controller sets a timer at
//!   the earliest (`domain::wake::expiry`, converted to a local instant from the moment the read
//!   returned), since Redis sends nothing a controller can rely on when a key expires.
//!
//! Requests coalesce: one `Notify` holds at most one, so a burst of messages during a pass queues
//! exactly one more pass, and a pass before the tick comes at most once per `EARLY_GAP`, so what
//! anyone publishes, or a bench's key that keeps expiring, costs at most one pass per gap (SPEC
//! §4.5, §7: one bench publishing as fast as it could took 1 000 slots from 11 passes per 10 s to
//! 1 942). A message is never queued: each push is judged as it arrives and dropped, and what it
//! says is never read (any bench may publish any text on the channel). The tick stays the safety
//! net: a message can be lost, a listener can be down, a bench user's ACL may not let it publish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{AsyncPushSender, SendError};
use redis::{AsyncConnectionConfig, Client, ProtocolVersion, PushInfo, PushKind};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::domain::wake::{EXPIRY_MARGIN, expiry};
use crate::store::keys::Keys;
use crate::store::presence::Snapshot;
use fleet_redis::conn::Conn;
use fleet_redis::connect::Endpoint;
use fleet_redis::url::{ClusterUrl, Target};

/// How long the listener waits before subscribing again after a failure, at first and at most
/// (doubling in between).
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How often the listener pings its connection: a connection that died without a word (a host
/// gone, a partition) is found within this plus the timeout, not at the next TCP keepalive.
const PING_EVERY: Duration = Duration::from_secs(5);
/// The shortest time between two passes before the tick (SPEC §4.5): a quarter of a second adds
/// at most that to a change's pass, and bounds what a flood of messages or a key that expires
/// again and again can cost to four passes a second.
pub const EARLY_GAP: Duration = Duration::from_millis(250);

/// A wake listener that could not listen; the tick goes on meanwhile.
#[derive(Debug, thiserror::Error)]
pub enum WakeError {
    #[error("subscribing to the wake channel {channel}")]
    Subscribe {
        channel: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("pinging the wake listener's connection")]
    Ping {
        #[source]
        source: redis::RedisError,
    },
}

/// Where the controller hears announced beats: a client for connections of the listener's own,
/// and the channel.
#[derive(Clone)]
pub struct Wake {
    source: Source,
    channel: String,
    timeout: Duration,
}

/// Where the listener's connections go.
#[derive(Clone)]
enum Source {
    /// One server (RESP3).
    Server(Client),
    /// The primary a Sentinel URL names, asked for again at every subscription, so the listener
    /// follows a failover.
    Primary(Conn),
    /// A Redis Cluster: the node of the channel's slot, found again at every subscription.
    Cluster(Endpoint, ClusterUrl),
}

/// `client`, switched to RESP3: a push needs it.
fn resp3(client: &Client) -> Result<Client, redis::RedisError> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    // The TLS parameters are in the address, so the copy keeps them.
    Client::open(info.set_redis_settings(settings))
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wake")
            .field("channel", &self.channel)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Wake {
    /// Listens on `keys`' wake channel through connections that `client` makes (switched to
    /// RESP3 here: a push needs it), each connect and ping bounded by `timeout`.
    pub fn new(client: &Client, keys: &Keys, timeout: Duration) -> Self {
        Wake {
            source: Source::Server(client.clone()),
            channel: keys.wake_channel(),
            timeout,
        }
    }

    /// Listens on the primary `conn` follows (a Sentinel URL's), found again at every
    /// subscription: after a failover the listener subscribes on the new primary.
    pub fn following(conn: Conn, keys: &Keys, timeout: Duration) -> Self {
        Wake {
            source: Source::Primary(conn),
            channel: keys.wake_channel(),
            timeout,
        }
    }

    /// The RESP3 client of the listener's next connection to one server.
    async fn client(&self) -> Result<Client, redis::RedisError> {
        match &self.source {
            Source::Server(client) => resp3(client),
            Source::Primary(conn) => match conn.primary_client().await {
                Some(found) => resp3(&found?),
                None => Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "a connection of one server has no primary to follow",
                ))),
            },
            Source::Cluster(..) => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a Cluster has no one server to listen on",
            ))),
        }
    }
}

impl Wake {
    /// The wake of `endpoint`'s server when its URL names one server; for a Sentinel URL, of the
    /// primary `conn` follows (a connection opened from the same endpoint); for a Cluster URL,
    /// of the node that holds the channel's slot.
    pub fn of_endpoint(endpoint: &Endpoint, conn: &Conn, keys: &Keys) -> Option<Self> {
        if let Ok(client) = endpoint.client() {
            return Some(Wake::new(&client, keys, endpoint.timeout));
        }
        let source = match endpoint.target() {
            Ok(Target::Sentinel(_)) => Source::Primary(conn.clone()),
            Ok(Target::Cluster(url)) => Source::Cluster(endpoint.clone(), url),
            Ok(Target::Single) | Err(_) => return None,
        };
        Some(Wake {
            source,
            channel: keys.wake_channel(),
            timeout: endpoint.timeout,
        })
    }
}

/// How the controller wakes between ticks: off (the tick alone), or on with its listener.
pub(super) struct Waking {
    wake: Option<Wake>,
    /// At most one pass asked for and not yet run.
    requested: Arc<Notify>,
    /// The earliest deadline of the last read, as a local instant, while waking is on.
    expiry: Option<Instant>,
    /// When the last pass before the tick was due: the next is not before `EARLY_GAP` after it.
    last_early: Option<Instant>,
}

impl Waking {
    pub(super) fn off() -> Self {
        Waking {
            wake: None,
            requested: Arc::new(Notify::new()),
            expiry: None,
            last_early: None,
        }
    }

    pub(super) fn on(wake: Wake) -> Self {
        Waking {
            wake: Some(wake),
            ..Waking::off()
        }
    }

    /// Starts the listener, when waking is on, until `stop`.
    pub(super) fn listen(&self, stop: CancellationToken) -> Option<JoinHandle<()>> {
        let wake = self.wake.clone()?;
        Some(tokio::spawn(listen(wake, self.requested.clone(), stop)))
    }

    /// A pass read presence (or could not: `None`) and its reply arrived at `read_at`: the timer
    /// goes to the earliest deadline among the keys that count. `read_at` is after the server's
    /// `TIME` of the read, so the timer never fires before a deadline on the server's clock.
    pub(super) fn saw(&mut self, snapshot: Option<&Snapshot>, read_at: Instant) {
        if self.wake.is_none() {
            return;
        }
        self.expiry = snapshot
            .and_then(|s| expiry(&s.benches, s.now, EXPIRY_MARGIN))
            .and_then(|span| read_at.checked_add(span));
    }

    /// Resolves when a pass is due before the tick: a beat was announced, or the earliest
    /// deadline came, and not sooner than `EARLY_GAP` after the last such pass. Never resolves
    /// while waking is off. The gap is waited first, so a tick that comes meanwhile takes nothing
    /// a request or a deadline left.
    pub(super) async fn due(&mut self) {
        if let Some(last) = self.last_early {
            tokio::time::sleep_until((last + EARLY_GAP).into()).await;
        }
        let deadline = async {
            match self.expiry {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = deadline => self.expiry = None,
            () = self.requested.notified() => {}
        }
        self.last_early = Some(Instant::now());
    }
}

/// What one push from the server means to the listener.
enum Heard {
    /// A beat changed its bench's state: pass.
    Beat,
    /// The subscription ended: subscribe again.
    Lost,
    /// Nothing to do (the confirmation of the subscription, say).
    Nothing,
}

fn heard(kind: &PushKind) -> Heard {
    match kind {
        PushKind::SMessage => Heard::Beat,
        // Only the one shard channel is subscribed: any unsubscribe ends it.
        PushKind::SUnsubscribe
        | PushKind::Unsubscribe
        | PushKind::PUnsubscribe
        | PushKind::Disconnection => Heard::Lost,
        // `PushKind` is non-exhaustive: a kind redis-rs adds later is nothing to this listener.
        _ => Heard::Nothing,
    }
}

/// Where the listener's connection delivers its pushes: each is judged as it arrives and
/// dropped, so a flood of messages holds no memory here (SPEC §7). A message asks for a pass,
/// whatever it says; the end of the subscription is told to `follow`.
#[derive(Clone)]
struct Pushes {
    requested: Arc<Notify>,
    lost: Arc<Notify>,
    why: Arc<std::sync::Mutex<Option<String>>>,
}

impl Pushes {
    fn new(requested: Arc<Notify>) -> Self {
        Pushes {
            requested,
            lost: Arc::new(Notify::new()),
            why: Arc::default(),
        }
    }
}

impl AsyncPushSender for Pushes {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        match heard(&info.kind) {
            Heard::Beat => self.requested.notify_one(),
            Heard::Lost => {
                if let Ok(mut why) = self.why.lock() {
                    *why = Some(format!("the server sent {}", info.kind));
                }
                self.lost.notify_one();
            }
            Heard::Nothing => {}
        }
        Ok(())
    }
}

/// The listener: subscribes, asks for a pass at each announced beat, and subscribes again
/// whenever the subscription ends, until `stop`.
async fn listen(wake: Wake, requested: Arc<Notify>, stop: CancellationToken) {
    let mut retry = RETRY_FIRST;
    // Said once per outage, not once per attempt: a subscription that cannot be made, and one
    // that ends within RETRY_MAX of being made (flapping).
    let mut failing = false;
    let mut flapping = false;
    loop {
        let subscribed = tokio::select! {
            _ = stop.cancelled() => return,
            subscribed = subscribe(&wake, Pushes::new(requested.clone())) => subscribed,
        };
        match subscribed {
            Ok((conn, pushes)) => {
                failing = false;
                if flapping {
                    debug!(
                        channel = wake.channel,
                        "listening for announced beats again"
                    );
                } else {
                    info!(channel = wake.channel, "listening for announced beats");
                }
                // A change announced while nobody listened is lost: one pass now.
                requested.notify_one();
                let since = tokio::time::Instant::now();
                let Some(why) = follow(conn, &pushes, &stop, wake.timeout).await else {
                    return;
                };
                // Only a subscription that held a while ends the outage. One that ends at once
                // (a bench publishing messages past the pubsub output limit, which disconnects
                // the subscriber: SPEC §7 S8) is retried on the backoff, and said once, so
                // the flood costs a reconnection every RETRY_MAX, not one a round trip.
                if since.elapsed() >= RETRY_MAX {
                    retry = RETRY_FIRST;
                    flapping = false;
                }
                if !flapping {
                    flapping = true;
                    warn!(
                        channel = wake.channel,
                        why, "the wake subscription ended; subscribing again"
                    );
                } else {
                    debug!(
                        channel = wake.channel,
                        why, "the wake subscription ended again"
                    );
                }
            }
            Err(e) if !failing => {
                failing = true;
                warn!(
                    error = fleet_redis::connect::chain(&e),
                    "cannot listen for announced beats; passing on the tick meanwhile"
                );
            }
            Err(e) => debug!(
                error = fleet_redis::connect::chain(&e),
                "still cannot listen"
            ),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            () = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// A connection of the listener's own, subscribed to the wake channel, delivering its pushes
/// to `pushes`.
async fn subscribe(wake: &Wake, pushes: Pushes) -> Result<(Conn, Pushes), WakeError> {
    let failed = |source| WakeError::Subscribe {
        channel: wake.channel.clone(),
        source,
    };
    let sender: Arc<dyn AsyncPushSender> = Arc::new(pushes.clone());
    if let Source::Cluster(endpoint, url) = &wake.source {
        let mut conn = endpoint.cluster(url, Some(sender)).await.map_err(|e| {
            failed(redis::RedisError::from((
                redis::ErrorKind::Io,
                "connecting to the cluster",
                e.to_string(),
            )))
        })?;
        conn.ssubscribe(&wake.channel).await.map_err(failed)?;
        return Ok((Conn::from(conn), pushes));
    }
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(wake.timeout))
        .set_response_timeout(Some(wake.timeout))
        .set_push_sender(sender);
    let mut conn = wake
        .client()
        .await
        .map_err(failed)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(failed)?;
    // Its reply is the confirmation push; with one channel there is exactly one.
    redis::cmd("SSUBSCRIBE")
        .arg(&wake.channel)
        .query_async::<redis::Value>(&mut conn)
        .await
        .map_err(failed)?;
    Ok((Conn::from(conn), pushes))
}

/// Follows one subscription until it ends (`Some(why)`) or `stop` (`None`).
async fn follow(
    mut conn: Conn,
    pushes: &Pushes,
    stop: &CancellationToken,
    timeout: Duration,
) -> Option<String> {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            () = pushes.lost.notified() => {
                let why = pushes.why.lock().ok().and_then(|mut w| w.take());
                return Some(why.unwrap_or_else(|| "the subscription ended".to_owned()));
            }
            _ = ping.tick() => {
                let pong = tokio::time::timeout(
                    timeout,
                    redis::cmd("PING").query_async::<redis::Value>(&mut conn),
                )
                .await;
                let error = match pong {
                    Ok(Ok(_)) => continue,
                    Ok(Err(source)) => WakeError::Ping { source },
                    Err(_) => WakeError::Ping {
                        source: std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer")
                            .into(),
                    },
                };
                return Some(fleet_redis::connect::chain(&error));
            }
        }
    }
}
