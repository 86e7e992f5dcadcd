//! The places of a process's listeners (SPEC §4.13, L4, L5, L7): how many connections and
//! streams it may hold, derived from its file-descriptor limit, and how many of them one peer
//! address may; and the gate that hands them out and counts them on `/metrics`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The ceilings of the caps, whatever the descriptors: past them the sockets' memory, not their
/// descriptors, is what a crowd of peers would exhaust.
const MAX_CONNECTIONS: usize = 2_048;
const MAX_STREAMS: usize = 1_000;
/// The fewest places one peer address may hold, whatever the caps: a browser opens six
/// connections to a host, and a page is one stream among them.
const MIN_PER_PEER: usize = 8;
/// The largest soft limit asked for when the hard one is unlimited (the kernel's `nr_open`
/// default): `RLIM_INFINITY` is no valid limit on descriptors.
const NOFILE_CEILING: u64 = 1 << 20;

/// What raising the descriptor limit can fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the process's file-descriptor limit (RLIMIT_NOFILE)")]
    ReadLimit(#[source] nix::Error),
}

/// The listeners' caps, derived from the process's file-descriptor limit (SPEC §4.13): a quarter
/// of the descriptors for HTTP connections (at most 2 048), an eighth for the page's streams (at
/// most 1 000), which are connections too, and an eighth of the connections (at least 8) for one
/// peer address. The other three quarters stay for Redis, the operations' pipes, Kubernetes and
/// gRPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The soft RLIMIT_NOFILE the caps are derived from.
    pub nofile: u64,
    /// The HTTP connections open at once, over every listener.
    pub connections: usize,
    /// The page's streams open at once.
    pub streams: usize,
    /// The connections one peer address may hold at once (an IPv6 peer's /64, which one host
    /// is given whole).
    pub per_peer: usize,
}

impl Limits {
    /// The caps of a process that may open `nofile` descriptors. Pure.
    pub fn of(nofile: u64) -> Limits {
        let share = |divisor: u64, max: usize| {
            usize::try_from(nofile / divisor)
                .unwrap_or(usize::MAX)
                .clamp(1, max)
        };
        let connections = share(4, MAX_CONNECTIONS);
        Limits {
            nofile,
            connections,
            streams: share(8, MAX_STREAMS),
            per_peer: (connections / 8).max(MIN_PER_PEER).min(connections),
        }
    }
}

/// The ceiling of the provider's connections, whatever the descriptors: cluster-autoscaler
/// keeps one, and `fleet autoscaler` opens one a call.
const MAX_PROVIDER_CONNECTIONS: usize = 256;
/// The fewest provider connections one peer address may hold: cluster-autoscaler's, another
/// while it dials a new leader, and a few verbs.
const MIN_PROVIDER_PER_PEER: usize = 4;

impl Limits {
    /// The provider's own places (SPEC §6.4), apart from the HTTP listeners' so that neither's
    /// peers take the other's: a sixteenth of the descriptors (at most 256), and an eighth of
    /// them (at least 4) for one peer address. It has no streams in the page's sense.
    pub fn provider(nofile: u64) -> Limits {
        let connections = usize::try_from(nofile / 16)
            .unwrap_or(usize::MAX)
            .clamp(1, MAX_PROVIDER_CONNECTIONS);
        Limits {
            nofile,
            connections,
            streams: 0,
            per_peer: (connections / 8)
                .max(MIN_PROVIDER_PER_PEER)
                .min(connections),
        }
    }
}

/// The descriptor limit before and after [`raise_nofile`].
#[derive(Clone, Copy, Debug)]
pub struct Nofile {
    /// The soft limit the process started with.
    pub was: u64,
    /// The soft limit now: the hard one, unless raising it was refused.
    pub soft: u64,
    pub hard: u64,
    /// Why the soft limit could not be raised, if it could not.
    pub refused: Option<nix::Error>,
}

/// Raises the soft RLIMIT_NOFILE to the hard one: the soft default (1 024 under systemd and
/// containerd) is there for programs that use `select(2)`, which fleet does not, and the hard
/// one is what the operator granted.
pub fn raise_nofile() -> Result<Nofile, Error> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    let (was, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(Error::ReadLimit)?;
    let want = if hard == RLIM_INFINITY {
        NOFILE_CEILING.max(was)
    } else {
        hard
    };
    if want <= was {
        return Ok(Nofile {
            was,
            soft: was,
            hard,
            refused: None,
        });
    }
    Ok(match setrlimit(Resource::RLIMIT_NOFILE, want, hard) {
        Ok(()) => Nofile {
            was,
            soft: want,
            hard,
            refused: None,
        },
        Err(e) => Nofile {
            was,
            soft: was,
            hard,
            refused: Some(e),
        },
    })
}

/// The places kept for the health probes (SPEC §4.13 L11): taken only when every other place
/// is held, one a peer address, for one request to `/healthz` or `/readyz`.
pub const PROBE_PLACES: usize = 8;
/// How long the next connection waits for another's place before it takes a probe's: a place
/// that is being given back (a connection closing) frees within it, and a probe's timeout (a
/// kubelet's is 1 s) is well above it.
pub const PROBE_AFTER: std::time::Duration = std::time::Duration::from_millis(250);

/// The places of connections and streams, shared by every listener of the process.
#[derive(Clone)]
pub struct Gate {
    limits: Limits,
    connections: Arc<Semaphore>,
    streams: Arc<Semaphore>,
    /// The connections each peer holds, by [`peer_of`]; a peer with none has no entry.
    peers: Peers,
    /// The probes' own places, and the peers that hold one.
    probes: Arc<Semaphore>,
    probing: Peers,
    /// The open connections and streams, as `/metrics` shows them.
    open_connections: Gauge,
    open_streams: Gauge,
}

/// The connections each peer address holds.
type Peers = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A place held: given back when dropped.
pub struct Place {
    _permit: OwnedSemaphorePermit,
    gauge: Gauge,
    /// The peer's count, for a connection's place (a stream's is counted as its connection).
    peer: Option<(IpAddr, Peers)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.gauge.dec();
        if let Some((peer, peers)) = &self.peer {
            let mut peers = peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(held) = peers.get_mut(peer) {
                *held -= 1;
                if *held == 0 {
                    peers.remove(peer);
                }
            }
        }
    }
}

/// The address a peer's connections are counted under: an IPv4 address (also one mapped into
/// IPv6) as it is, an IPv6 address by its /64, the block one host is given and may spread its
/// connections over.
pub fn peer_of(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

impl Gate {
    /// Places for `limits`, counted on the two gauges.
    pub fn new(limits: Limits, open_connections: Gauge, open_streams: Gauge) -> Gate {
        Gate {
            limits,
            connections: Arc::new(Semaphore::new(limits.connections)),
            streams: Arc::new(Semaphore::new(limits.streams)),
            peers: Arc::default(),
            probes: Arc::new(Semaphore::new(PROBE_PLACES)),
            probing: Arc::default(),
            open_connections,
            open_streams,
        }
    }

    /// This gate without the probes' places: a listener no probe asks (the provider's).
    pub fn without_probes(mut self) -> Gate {
        self.probes = Arc::new(Semaphore::new(0));
        self
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// A stream's place, or `None` when every one is held.
    pub fn stream(&self) -> Option<Place> {
        let permit = self.streams.clone().try_acquire_owned().ok()?;
        self.open_streams.inc();
        Some(Place {
            _permit: permit,
            gauge: self.open_streams.clone(),
            peer: None,
        })
    }

    /// A connection's place, once one is free: reserved before the accept, so a peer past the
    /// cap waits in the kernel's backlog.
    pub(super) async fn reserve(&self) -> OwnedSemaphorePermit {
        self.connections
            .clone()
            .acquire_owned()
            .await
            .expect("the gate's semaphore is never closed")
    }

    /// A place for the next connection: one of the connections', else, when none frees within
    /// [`PROBE_AFTER`], a probe's once one is.
    pub(super) async fn reserve_any(&self) -> Reserved {
        if let Ok(permit) = self.connections.clone().try_acquire_owned() {
            return Reserved::Connection(permit);
        }
        let probe = async {
            tokio::time::sleep(PROBE_AFTER).await;
            self.probes.clone().acquire_owned().await
        };
        tokio::select! {
            biased;
            permit = self.reserve() => Reserved::Connection(permit),
            permit = probe => {
                Reserved::Probe(permit.expect("the gate's semaphore is never closed"))
            }
        }
    }

    /// A reservation as it stands once its connection is accepted: a probe's, made while every
    /// other place was held, becomes a connection's if one freed while the accept waited.
    pub(super) fn upgrade(&self, reserved: Reserved) -> Reserved {
        match reserved {
            Reserved::Probe(probe) => match self.connections.clone().try_acquire_owned() {
                Ok(permit) => Reserved::Connection(permit),
                Err(_) => Reserved::Probe(probe),
            },
            connection => connection,
        }
    }

    /// The reserved place, taken by a connection accepted from `from`: counted from now; or
    /// `None` when that peer already holds its share (one probe place, or `per_peer`
    /// connections), and the place stays free.
    pub(super) fn admit(&self, reserved: Reserved, from: IpAddr) -> Option<(Place, Use)> {
        let peer = peer_of(from);
        let (permit, peers, share, kind) = match reserved {
            Reserved::Connection(p) => (p, &self.peers, self.limits.per_peer, Use::Any),
            Reserved::Probe(p) => (p, &self.probing, 1, Use::Probe),
        };
        {
            let mut held = peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let held = held.entry(peer).or_insert(0);
            if *held >= share {
                return None;
            }
            *held += 1;
        }
        self.open_connections.inc();
        Some((
            Place {
                _permit: permit,
                gauge: self.open_connections.clone(),
                peer: Some((peer, peers.clone())),
            },
            kind,
        ))
    }
}

/// A place reserved before an accept.
pub enum Reserved {
    Connection(OwnedSemaphorePermit),
    Probe(OwnedSemaphorePermit),
}

/// What a connection's place lets it do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Every route, as many requests as it sends.
    Any,
    /// One request to `/healthz` or `/readyz` (SPEC §4.13 L11).
    Probe,
}
