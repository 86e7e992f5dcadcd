//! Following a primary through Redis Sentinel (SPEC §2.7, "Sentinel").
//!
//! The sentinels are asked in turn for the primary's address (`SENTINEL
//! get-master-addr-by-name`); the address they give is connected to and asked `ROLE`, so a
//! sentinel that has not yet seen a failover cannot send fleet to a replica. Every call then
//! goes to that connection. A call that fails on the connection (an I/O error, a timeout) or
//! that the server refuses as no primary's (`READONLY`, `NOREPLICAS`, `MASTERDOWN`) drops it,
//! and the next call asks the sentinels again. The failed call's error goes back to its caller,
//! whose own retry decides: nothing here runs a command twice, so no script is ever repeated
//! behind its caller's back.
//!
//! redis-rs 1.8's `sentinel` feature resolves the primary once per client it builds, and its
//! `ConnectionManager` reconnects to one fixed address; neither follows a failover, so fleet
//! asks the sentinels itself, with the same two commands.
//!
//! Credentials (a decision, SPEC §2.7): the URL's user and password are the primary's. A
//! sentinel is asked without them, and with them when it answers `NOAUTH`: sentinels commonly
//! run without a password, and when they have one it is often the deployment's single password.
//! Sentinels with credentials of their own are asked with those alone
//! (`Endpoint::sentinel_auth`: `--sentinel-user`, `--sentinel-password-file`). A round in which
//! every sentinel refused the credentials it was asked with ends the search at once: another
//! round would be refused the same.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, RedisResult, Value};
use tokio::time::Instant;
use tracing::{debug, info};

use crate::connect::{ConnectError, Endpoint, SentinelAuth, cause};
use crate::current::Current;
use crate::url::SentinelUrl;

/// The Redis error codes by which a server says it is no longer the primary to write to.
const NOT_PRIMARY: [&str; 3] = ["READONLY", "NOREPLICAS", "MASTERDOWN"];

/// The first pause between two rounds over the sentinels while none names a primary that
/// answers; it doubles up to `MAX_PAUSE`, and the call timeout bounds the whole.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_millis(400);

/// Whether an error means the connection to the primary must be given up and the primary asked
/// for again: the connection failed, or the server is no longer the primary, or none was found.
pub fn is_failover(e: &RedisError) -> bool {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return true;
    }
    if e.kind() == ErrorKind::MasterNameNotFoundBySentinel {
        return true;
    }
    if e.code().is_some_and(|code| NOT_PRIMARY.contains(&code)) {
        return true;
    }
    // A pipeline's or a transaction's errors are kept per command.
    e.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, s)| NOT_PRIMARY.contains(&s.code())))
}

/// Whether the primary refused the URL's user or password: asking another sentinel mends
/// nothing.
fn refused_credentials(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// Whether a reply carries a server's refusal as no primary (a pipeline's replies are values,
/// each of which may be an error).
fn says_not_primary(value: &Value) -> bool {
    match value {
        Value::ServerError(e) => NOT_PRIMARY.contains(&e.code()),
        Value::Array(values) => values.iter().any(says_not_primary),
        _ => false,
    }
}

/// The primary a Sentinel URL names, followed across failovers. Shared by every clone of a
/// `Conn`.
pub struct Followed {
    url: SentinelUrl,
    endpoint: Endpoint,
    /// The connection to the primary, found again through the sentinels after a failure.
    current: Current,
    /// The address of the last primary found, to say when it changes.
    last: Mutex<Option<String>>,
}

impl Followed {
    /// Finds the primary and connects, within the call timeout.
    pub async fn open(endpoint: &Endpoint, url: SentinelUrl) -> Result<Followed, ConnectError> {
        let followed = Followed {
            url,
            endpoint: endpoint.clone(),
            current: Current::new(),
            last: Mutex::new(None),
        };
        match followed.connection().await {
            Ok(_) => Ok(followed),
            Err(e) => Err(endpoint.unreachable(e)),
        }
    }

    pub fn db(&self) -> i64 {
        self.url.db
    }

    /// Sends one command to the primary.
    pub async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (mut conn, generation) = self.connection().await?;
        let reply = conn.req_packed_command(cmd).await;
        self.judge(generation, reply.as_ref().map(std::slice::from_ref));
        reply
    }

    /// Sends a pipeline to the primary.
    pub async fn commands(
        &self,
        pipeline: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (mut conn, generation) = self.connection().await?;
        let reply = conn.req_packed_commands(pipeline, offset, count).await;
        self.judge(generation, reply.as_ref().map(Vec::as_slice));
        reply
    }

    /// Drops the connection of `generation` when its reply says the primary is lost; the reply
    /// itself goes back to the caller unchanged.
    fn judge(&self, generation: u64, reply: Result<&[Value], &RedisError>) {
        let lost = match reply {
            Ok(values) => values.iter().any(says_not_primary),
            Err(e) => is_failover(e),
        };
        if lost && self.current.forget(generation) {
            debug!("the Redis primary's connection failed; asking the sentinels again");
        }
    }

    /// The connection to the primary, found through the sentinels when there is none.
    async fn connection(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let (conn, generation, found) = self.current.connection(|| self.search()).await?;
        if let Some(addr) = found {
            self.say_found(addr);
        }
        Ok((conn, generation))
    }

    /// A client for the primary the sentinels name now, for a connection of its own (the wake
    /// listener's subscription): found again when the shared connection is lost.
    pub async fn primary_client(&self) -> RedisResult<redis::Client> {
        self.connection().await?;
        let addr = self
            .last
            .lock()
            .expect("never poisoned: no panic inside")
            .clone();
        let lost = || {
            RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "Sentinel",
                "the primary's address is not known yet".to_owned(),
            ))
        };
        let (host, port) = addr
            .as_deref()
            .and_then(|a| a.rsplit_once(':'))
            .ok_or_else(lost)?;
        let port: u16 = port.parse().map_err(|_| lost())?;
        let url = self.url.server_url(host, port, true, self.url.db);
        self.endpoint.client_for(&url).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "Sentinel",
                crate::connect::chain(&e),
            ))
        })
    }

    /// Says when the primary found is another than the last one.
    fn say_found(&self, addr: String) {
        let mut last = self.last.lock().expect("never poisoned: no panic inside");
        match last.as_deref() {
            None => debug!(
                primary = addr,
                master = self.url.master,
                "redis primary found"
            ),
            Some(before) if before != addr => info!(
                from = before,
                to = addr,
                master = self.url.master,
                "following the new redis primary"
            ),
            Some(_) => {}
        }
        *last = Some(addr);
    }

    /// Asks the sentinels in turn, round after round, until one names a primary that answers as
    /// one, within the call timeout. The error says what each sentinel said last: an attempt
    /// the deadline cut short does not hide what that sentinel said the round before (found by
    /// `tests/process/sentinel.rs`: on a loaded host the deadline fell in the middle of a round, and a
    /// refused certificate read as `no answer in time`).
    async fn search(&self) -> RedisResult<(MultiplexedConnection, String)> {
        let timeout = self.endpoint.timeout;
        let deadline = Instant::now() + timeout;
        let mut pause = FIRST_PAUSE;
        let mut said: Vec<Option<String>> = vec![None; self.url.sentinels.len()];
        loop {
            let mut refused_all = true;
            for ((host, port), words) in self.url.sentinels.iter().zip(said.iter_mut()) {
                let asking = async {
                    let (h, p) = self.ask(host, *port).await?;
                    let conn = self.primary(&h, p).await.map_err(|e| {
                        if refused_credentials(&e) {
                            Said::Final(e)
                        } else {
                            Said::Primary(h.clone(), p, e)
                        }
                    })?;
                    Ok::<_, Said>((conn, format!("{h}:{p}")))
                };
                match tokio::time::timeout_at(deadline, asking).await {
                    Ok(Ok(found)) => return Ok(found),
                    Ok(Err(Said::Final(e))) => return Err(e),
                    Ok(Err(why)) => {
                        refused_all &= matches!(why, Said::Refused(_));
                        *words = Some(why.words());
                    }
                    // Cut short: what it said before, if anything, stands.
                    Err(_) => refused_all = false,
                }
                if Instant::now() >= deadline {
                    // Not every sentinel was asked this round.
                    refused_all = false;
                    break;
                }
            }
            if refused_all {
                return Err(RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "Sentinel",
                    format!("the sentinels would not answer ({})", self.each_said(&said)),
                )));
            }
            if Instant::now() + pause >= deadline {
                let detail = format!(
                    "no sentinel named a primary of {} that answered within {} ({})",
                    self.url.master,
                    humantime::format_duration(timeout),
                    self.each_said(&said)
                );
                return Err(RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "Sentinel",
                    detail,
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// What each sentinel said last (`None`: nothing in time), once when they all said the same.
    fn each_said(&self, said: &[Option<String>]) -> String {
        let words: Vec<&str> = said
            .iter()
            .map(|w| w.as_deref().unwrap_or("no answer in time"))
            .collect();
        let hosts: Vec<String> = self
            .url
            .sentinels
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect();
        if words.len() > 1 && words.iter().all(|w| *w == words[0]) {
            return format!("every sentinel, {}: {}", hosts.join(", "), words[0]);
        }
        hosts
            .iter()
            .zip(words)
            .map(|(host, words)| format!("sentinel {host}: {words}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One sentinel's answer: the primary's address.
    async fn ask(&self, host: &str, port: u16) -> Result<(String, u16), Said> {
        let (reply, asked) = match &self.endpoint.sentinel_auth {
            Some(auth) => (
                self.ask_as(host, port, Asked::Own(auth)).await,
                Asked::Own(auth),
            ),
            None => match self.ask_as(host, port, Asked::Bare).await {
                Err(e) if e.code() == Some("NOAUTH") && self.url.userinfo.is_some() => {
                    (self.ask_as(host, port, Asked::Url).await, Asked::Url)
                }
                reply => (reply, Asked::Bare),
            },
        };
        let reply = reply.map_err(|e| {
            if refused(&e) {
                Said::Refused(refusal(&e, asked))
            } else {
                Said::Sentinel(e)
            }
        })?;
        match reply {
            Some((h, p)) => match p.parse::<u16>() {
                Ok(p) => Ok((h, p)),
                Err(_) => Err(Said::Words(format!("named the port {p:?}"))),
            },
            None => Err(Said::Words(format!(
                "monitors no master named {} (sentinel monitor <name> in its configuration)",
                self.url.master
            ))),
        }
    }

    async fn ask_as(
        &self,
        host: &str,
        port: u16,
        asked: Asked<'_>,
    ) -> RedisResult<Option<(String, String)>> {
        let url = self
            .url
            .server_url(host, port, matches!(asked, Asked::Url), 0);
        let auth = match asked {
            Asked::Own(auth) => Some(auth),
            Asked::Bare | Asked::Url => None,
        };
        let mut conn = self.connect_as(&url, auth).await?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.url.master)
            .query_async(&mut conn)
            .await
    }

    /// Connects to the named primary and checks that it is one. A user the ACL does not grant
    /// `ROLE` (fleet acl's users) is taken at the sentinel's word; a write then refused
    /// `READONLY` still makes the next call ask again.
    async fn primary(&self, host: &str, port: u16) -> RedisResult<MultiplexedConnection> {
        let url = self.url.server_url(host, port, true, self.url.db);
        let mut conn = self.connect(&url).await?;
        let role: RedisResult<Value> = redis::cmd("ROLE").query_async(&mut conn).await;
        match role {
            Ok(Value::Array(parts)) => match parts.first() {
                Some(Value::BulkString(r)) if r.as_slice() == b"master" => {}
                _ => {
                    return Err(RedisError::from((
                        ErrorKind::MasterNameNotFoundBySentinel,
                        "Sentinel",
                        "it is a replica (ROLE), the sentinels have not yet promoted another"
                            .to_owned(),
                    )));
                }
            },
            Err(e) if e.code() == Some("NOPERM") => {
                redis::cmd("PING").query_async::<()>(&mut conn).await?;
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        self.endpoint.set_up(&mut conn).await?;
        Ok(conn)
    }

    async fn connect(&self, url: &str) -> RedisResult<MultiplexedConnection> {
        self.connect_as(url, None).await
    }

    async fn connect_as(
        &self,
        url: &str,
        auth: Option<&SentinelAuth>,
    ) -> RedisResult<MultiplexedConnection> {
        let client = self.endpoint.client_as(url, auth).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "Sentinel",
                crate::connect::chain(&e),
            ))
        })?;
        let timeout = self.endpoint.timeout;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }
}

/// What went wrong with one sentinel, to say in the error of a search that found no primary.
enum Said {
    /// The sentinel could not be asked.
    Sentinel(RedisError),
    /// The sentinel refused the credentials it was asked with, or asked for some: said in words
    /// that name where they come from, never what they are.
    Refused(String),
    /// The primary it named could not be used.
    Primary(String, u16, RedisError),
    Words(String),
    /// An error no other sentinel can mend (a refused password): the search ends with it.
    Final(RedisError),
}

impl Said {
    fn words(&self) -> String {
        match self {
            Said::Sentinel(e) | Said::Final(e) => cause(e),
            Said::Primary(h, p, e) if e.kind() == ErrorKind::MasterNameNotFoundBySentinel => {
                format!("named {h}:{p}, but {}", e.detail().unwrap_or_default())
            }
            Said::Primary(h, p, e) => format!("named {h}:{p}: {}", cause(e)),
            Said::Words(w) | Said::Refused(w) => w.clone(),
        }
    }
}

/// The credentials a sentinel was asked with.
#[derive(Clone, Copy)]
enum Asked<'a> {
    /// None.
    Bare,
    /// The URL's, after it answered `NOAUTH`.
    Url,
    /// The sentinels' own (`--sentinel-user`, `--sentinel-password-file`).
    Own(&'a SentinelAuth),
}

/// Whether a sentinel refused the credentials it was asked with, or asked for some it was not
/// given: no later round mends that.
fn refused(e: &RedisError) -> bool {
    refused_credentials(e)
        || e.detail()
            .is_some_and(|d| d.contains("without any password configured"))
}

/// What a sentinel's refusal means, for the credentials it was asked with.
fn refusal(e: &RedisError, asked: Asked<'_>) -> String {
    let own = "give the sentinels' own with --sentinel-password-file \
               (FLEET_SENTINEL_PASSWORD_FILE) and, for an ACL user, --sentinel-user";
    match asked {
        Asked::Own(auth)
            if e.detail()
                .is_some_and(|d| d.contains("without any password")) =>
        {
            format!(
                "has no password of its own, and was given one: drop --sentinel-password-file \
                 (it asks for the user {} otherwise)",
                auth.user_name()
            )
        }
        Asked::Own(auth) => format!(
            "refused the sentinels' credentials, the user {} and the password of \
             --sentinel-password-file: authentication failed",
            auth.user_name()
        ),
        Asked::Url => {
            format!("refused the URL's user and password, which are the primary's: {own}")
        }
        Asked::Bare => format!(
            "asks for a password: {own}, or put the primary's in the URL if the sentinels \
             share it"
        ),
    }
}
