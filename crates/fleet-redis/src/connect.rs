//! Reaching Redis: the URL, TLS, and the timeouts every call is bounded by (SPEC §2.7).
//!
//! `redis://`, `rediss://` (TLS, with an optional CA file) and `redis+unix://` URLs are accepted,
//! with `user:password@` for ACL users. Errors name the URL with its password redacted. A
//! Sentinel URL (`url`) is followed, and a Cluster URL spoken (`cluster`), by
//! `conn::Conn` (`Endpoint::open`); the plain connections made here refuse both, saying so.

use std::path::PathBuf;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo};

use crate::url::{self, Target};

/// Every URL form fleet takes, for the messages that refuse one.
pub const VALID_URLS: &str = "use redis://[user:password@]host:port[/db], rediss://... for TLS, \
     redis+unix:///path/to/redis.sock, redis+sentinel://[user:password@]host:port[,host:port...]/MASTER_NAME[/db] \
     (rediss+sentinel://... for TLS), or redis+cluster://[user:password@]host:port[,host:port...] \
     (rediss+cluster://... for TLS)";

/// The default Redis URL.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Where Redis is and how long a call may take. Its `Debug` shows the URL redacted.
#[derive(Clone)]
pub struct Endpoint {
    pub url: String,
    /// The bound on connecting and on every call.
    pub timeout: Duration,
    /// A PEM file of the CA that signed the server's certificate, for `rediss://`.
    pub ca_file: Option<PathBuf>,
    /// The sentinels' own credentials, for a Sentinel URL whose sentinels do not take the
    /// primary's (SPEC §2.7, "Sentinel"); `None`: they are asked as the URL says.
    pub sentinel_auth: Option<SentinelAuth>,
    /// Whether the lasting connections ask Redis never to evict them (`CLIENT NO-EVICT ON`):
    /// `fleet serve`'s, so a client that hogs Redis's memory for clients is cut off before the
    /// controller is (SPEC §7.2, S8).
    pub unevicted: bool,
}

/// A password read from a file, never shown: its `Debug` is `***`, and it has no `Display`.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Password(String);

impl Password {
    pub fn new(password: impl Into<String>) -> Self {
        Password(password.into())
    }

    /// The password itself, for the one place that sends it (an `AUTH`).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// The credentials fleet gives the sentinels of a Sentinel URL when they are not the primary's
/// (`--sentinel-user`, `--sentinel-password-file`): a user (`None`: the default user) and a
/// password. They travel to the operation wrapper on its stdin with the URL, never in its
/// arguments or environment.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentinelAuth {
    pub user: Option<String>,
    pub password: Password,
}

impl SentinelAuth {
    /// The user the sentinels are asked as, for messages.
    pub fn user_name(&self) -> &str {
        self.user.as_deref().unwrap_or("default")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid Redis URL {url}: {VALID_URLS}")]
    InvalidUrl {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    /// A URL of any form that fleet's own reader refuses (`url`), before anything
    /// connects: the refusal names the part and the fix, never the password.
    #[error("invalid Redis URL {url}: {why}; {VALID_URLS}")]
    Malformed { url: String, why: url::Refusal },
    /// A Sentinel or Cluster URL given to code that makes one plain connection (`connect`,
    /// `manager`).
    #[error(
        "{url} is a Sentinel or Cluster URL, and this takes one server's (redis://, rediss:// \
         or redis+unix://)"
    )]
    NotPlain { url: String },
    /// Sentinel credentials for a URL that names no sentinels.
    #[error(
        "--sentinel-password-file (FLEET_SENTINEL_PASSWORD_FILE) gives the sentinels' password, \
         and {url} is not a Sentinel URL (redis+sentinel:// or rediss+sentinel://)"
    )]
    SentinelAuthWithoutSentinels { url: String },
    #[error("reading the Redis CA file {path}")]
    CaFile {
        path: PathBuf,
        /// Read to a bound (`file::PEM`): past it, bad input like an unreadable file.
        #[source]
        source: crate::file::ReadError,
    },
    /// The cause is said once, in words (`cause`), never as Redis's own chain.
    #[error("cannot reach Redis at {url}: {cause}")]
    Unreachable {
        url: String,
        cause: String,
        /// Whether waiting may mend it: a refused, reset or unanswered connection (a Redis not up
        /// yet, slow, or failing over), not a refused password, TLS or a database out of range.
        passing: bool,
    },
}

impl ConnectError {
    /// Whether waiting may mend it: the Redis is not up yet, slow, or failing over.
    pub fn may_pass(&self) -> bool {
        matches!(self, ConnectError::Unreachable { passing: true, .. })
    }

    /// Whether the error is the caller's input (exit 2) rather than the world (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            ConnectError::InvalidUrl { .. }
                | ConnectError::Malformed { .. }
                | ConnectError::NotPlain { .. }
                | ConnectError::SentinelAuthWithoutSentinels { .. }
                | ConnectError::CaFile { .. }
        )
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.redacted())
            .field("timeout", &self.timeout)
            .field("ca_file", &self.ca_file)
            .field("sentinel_auth", &self.sentinel_auth)
            .field("unevicted", &self.unevicted)
            .finish()
    }
}

impl Endpoint {
    pub fn new(url: impl Into<String>, timeout: Duration) -> Self {
        Self {
            url: url.into(),
            timeout,
            ca_file: None,
            sentinel_auth: None,
            unevicted: false,
        }
    }

    /// This endpoint, its lasting connections kept from client eviction (`unevicted`).
    pub fn unevicted(mut self) -> Self {
        self.unevicted = true;
        self
    }

    /// The ACL user the URL names (`default` when it names none).
    pub(crate) fn user(&self) -> String {
        let rest = self.url.split_once("://").map_or("", |(_, r)| r);
        match rest.rfind('@') {
            Some(at) => {
                let user = rest[..at].split_once(':').map_or("", |(u, _)| u);
                if user.is_empty() { "default" } else { user }.to_owned()
            }
            None => "default".to_owned(),
        }
    }

    /// The URL with any password replaced by `***`, for messages and logs.
    pub fn redacted(&self) -> String {
        redact(&self.url)
    }

    /// What the URL asks to reach, every part of it read and checked first (SPEC §2.7): a URL
    /// fleet cannot read is refused here, before any connection. The sentinels' own credentials
    /// go with a Sentinel URL only.
    pub fn target(&self) -> Result<Target, ConnectError> {
        match url::parse(&self.url) {
            Ok(Target::Sentinel(s)) => Ok(Target::Sentinel(s)),
            Ok(_) if self.sentinel_auth.is_some() => {
                Err(ConnectError::SentinelAuthWithoutSentinels {
                    url: self.redacted(),
                })
            }
            Ok(target) => Ok(target),
            Err(why) => Err(ConnectError::Malformed {
                url: self.redacted(),
                why,
            }),
        }
    }

    /// Validates the URL of any form fleet takes, and reads the CA file, without connecting.
    pub fn check(&self) -> Result<(), ConnectError> {
        match self.target()? {
            // The primary's URL as it will be built: the user info must read as redis-rs reads
            // a plain URL's.
            Target::Sentinel(s) => {
                let (host, port) = &s.sentinels[0];
                self.client_for(&s.server_url(host, *port, true, s.db))
                    .map(|_| ())
            }
            Target::Cluster(c) => self.cluster_client(&c, None).map(|_| ()),
            Target::Single => self.client().map(|_| ()),
        }
    }

    /// Builds the client of a one-server URL, validating it without connecting.
    pub fn client(&self) -> Result<Client, ConnectError> {
        match self.target()? {
            Target::Single => self.client_for(&self.url),
            Target::Sentinel(_) | Target::Cluster(_) => Err(ConnectError::NotPlain {
                url: self.redacted(),
            }),
        }
    }

    /// The client of one server at `server_url` (this URL, or one a Sentinel URL names), with
    /// the CA file where one is given. Errors name this endpoint's URL, redacted.
    pub fn client_for(&self, server_url: &str) -> Result<Client, ConnectError> {
        self.client_as(server_url, None)
    }

    /// `client_for`, authenticating with `auth` rather than the user info of `server_url` (a
    /// sentinel asked with the sentinels' own credentials).
    pub fn client_as(
        &self,
        server_url: &str,
        auth: Option<&SentinelAuth>,
    ) -> Result<Client, ConnectError> {
        install_crypto_provider();
        let invalid = |source| ConnectError::InvalidUrl {
            url: self.redacted(),
            source,
        };
        let mut info = server_url.into_connection_info().map_err(invalid)?;
        if let Some(auth) = auth {
            let mut settings = info
                .redis_settings()
                .clone()
                .set_password(auth.password.expose());
            if let Some(user) = &auth.user {
                settings = settings.set_username(user);
            }
            info = info.set_redis_settings(settings);
        }
        match &self.ca_file {
            None => Client::open(info).map_err(invalid),
            Some(path) => {
                let pem = crate::file::read(path, crate::file::PEM).map_err(|source| {
                    ConnectError::CaFile {
                        path: path.clone(),
                        source,
                    }
                })?;
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                Client::build_with_tls(info, certs).map_err(invalid)
            }
        }
    }

    /// One multiplexed connection, for a command-line verb: connecting and every call on it are
    /// bounded by the timeout.
    pub async fn connect(&self) -> Result<MultiplexedConnection, ConnectError> {
        let client = self.client()?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connecting = async {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // A server that wants a password only says so at the first command: ask now, so the
            // error names the URL (and the verb's own call never meets it).
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            Ok::<_, redis::RedisError>(conn)
        };
        match tokio::time::timeout(self.timeout, connecting).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(source)) => Err(self.unreachable(source)),
            Err(_) => Err(
                self.unreachable(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))),
            ),
        }
    }

    pub fn unreachable(&self, source: redis::RedisError) -> ConnectError {
        let cause = if source.is_timeout() {
            let tls = self.url.starts_with("rediss");
            format!(
                "no answer within {}: is the host reachable, and its port {}? (--timeout sets \
                 the wait)",
                humantime::format_duration(self.timeout),
                if tls {
                    "a TLS one (rediss://), not a plain one (redis://)"
                } else {
                    "Redis's"
                }
            )
        } else if source.kind() == redis::ErrorKind::AuthenticationFailed
            || source.code() == Some("WRONGPASS")
        {
            format!(
                "authentication failed for user {}: check the user and password in the URL \
                 (redis://user:password@host)",
                self.user()
            )
        } else {
            cause(&source)
        };
        // TLS is said in the cause's own words (`cause`): a refused certificate is no wait.
        let passing = (source.is_timeout()
            || source.is_connection_refusal()
            || source.is_connection_dropped()
            || source.kind() == redis::ErrorKind::Io)
            && !cause.starts_with("TLS failed")
            && !cause.starts_with("authentication failed");
        ConnectError::Unreachable {
            url: self.redacted(),
            cause,
            passing,
        }
    }
}

/// What a Redis error means, said once and in words (SPEC §2.6): the refused connection, the
/// timeout, the password, the database, TLS. redis-rs's own rendering repeats its cause
/// (`Connection refused (os error 111): Connection refused (os error 111)`) and names scripts by
/// their hash; this names neither twice.
pub fn cause(e: &redis::RedisError) -> String {
    use redis::ErrorKind;
    let code = e.code().unwrap_or_default();
    let detail = e.detail().unwrap_or_default();
    if e.is_connection_refusal() {
        return "connection refused: is redis-server running there? set --redis or \
                FLEET_REDIS_URL"
            .to_owned();
    }
    if e.is_timeout() {
        return "no answer in time (--timeout)".to_owned();
    }
    // fleet's own search for a Sentinel's primary says in its detail what each sentinel said;
    // redis-rs would put `Sentinel - MasterNameNotFoundBySentinel:` before it.
    if e.kind() == ErrorKind::MasterNameNotFoundBySentinel && !detail.is_empty() {
        return detail.to_owned();
    }
    if e.is_connection_dropped() {
        return format!(
            "the connection to Redis was lost ({})",
            dedupe(&e.to_string()).to_lowercase()
        );
    }
    if e.kind() == ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
        return "authentication failed: check the user and password in the URL \
                (redis://user:password@host)"
            .to_owned();
    }
    if code == "NOAUTH" {
        return "this Redis requires a password: give it in the URL \
                (redis://[user]:password@host)"
            .to_owned();
    }
    // A command the user may not run is NOPERM; one inside a script the user ran, Redis says in
    // a plain error (Redis 7.0).
    if code == "NOPERM" || detail.starts_with("The user executing the script can't") {
        let detail = detail.split(" script:").next().unwrap_or_default().trim();
        let why = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.trim_end_matches('.'))
        };
        return format!(
            "the user may not do this{why}: use a URL whose Redis user may (of fleet acl's \
             users, fleet-controller writes, fleet-viewer only reads, a bench's own user only \
             beats for that bench)"
        );
    }
    if detail.contains("DB index is out of range") {
        return "the database number in the URL (/N) is out of range for this server".to_owned();
    }
    if code == "WRONGTYPE" {
        // fleet's scripts name the key (store::script's prelude); a plain command cannot.
        return match detail
            .strip_prefix("the key ")
            .and_then(|r| r.split_once(' '))
        {
            Some((key, _)) => format!(
                "the key {key} holds another type of value than fleet writes there: something \
                 else wrote it (see `redis-cli TYPE '{key}'`)"
            ),
            None => "a key holds another type of value than fleet writes there: something else \
                     wrote it"
                .to_owned(),
        };
    }
    let text = without_script(&e.to_string());
    let lower = text.to_ascii_lowercase();
    if lower.contains("tls") || lower.contains("certificate") || lower.contains("handshake") {
        return format!("TLS failed: {}", dedupe(&text));
    }
    dedupe(&text)
}

/// A script's error without where in which script it was raised: Redis names the script by its
/// hash (`script: <40 hex>, on @user_script:7.`, or `f_<40 hex>` in older servers), which says
/// nothing to a person; what the error says is kept.
fn without_script(text: &str) -> String {
    let hex = |w: &str| w.len() >= 40 && w[..40].chars().all(|c| c.is_ascii_hexdigit());
    let mut kept: Vec<&str> = Vec::new();
    let mut words = text.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w.starts_with("f_") && hex(&w[2..]) {
            continue;
        }
        if w == "script:" && words.peek().is_some_and(|n| hex(n)) {
            // `script: <hash>, on @user_script:N.`: to the end of the location.
            words.next();
            if words.peek() == Some(&"on") {
                words.next();
                words.next();
            }
            continue;
        }
        kept.push(w);
    }
    kept.join(" ")
}

/// `a: b: b` → `a: b`: redis-rs repeats an I/O error's text after its own.
fn dedupe(text: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split(": ") {
        if parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    parts.join(": ")
}

/// An error and its causes, in words, each said once (for messages and logs): a Redis error in
/// the chain is rendered by `cause`, and its own sources (the same I/O error again) are skipped.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let part = match err.downcast_ref::<redis::RedisError>() {
            Some(redis) => {
                parts.push(cause(redis));
                break;
            }
            None => err.to_string(),
        };
        if parts.last() != Some(&part) {
            parts.push(part);
        }
        next = err.source();
    }
    parts.join(": ")
}

/// TLS goes through rustls with the ring provider; installing it twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The query parameters that carry a password (redis-rs reads `pass` from a `redis+unix://`
/// URL's query).
const SECRET_PARAMS: [&str; 2] = ["pass", "password"];

/// A query parameter's name as a URL parser reads it (`pa%73s` is `pass`).
fn percent_decoded(name: &str) -> String {
    let bytes = name.as_bytes();
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Replaces every password a Redis URL can carry with `***`, in every form fleet accepts (SPEC
/// §2.7): the user info of a network URL (`user:password@`, or a bare `password@`), wherever its
/// last `@` is, so an unescaped `/`, `?` or `@` in the password hides nothing; and the `pass` or
/// `password` query parameter of any URL (a unix socket's included). Text that is not a URL at
/// all is treated the same way. Masking too much is safe; too little is a leak.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    // A unix socket URL has no user info: its path may hold an `@`.
    let unix = scheme.is_some_and(|s| s.ends_with("unix"));
    let rest = match rest.rfind('@') {
        Some(at) if !unix => {
            let userinfo = &rest[..at];
            let masked = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_owned(),
            };
            format!("{masked}@{}", &rest[at + 1..])
        }
        _ => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _))
                        if SECRET_PARAMS
                            .contains(&percent_decoded(key).to_ascii_lowercase().as_str()) =>
                    {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => rest,
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{rest}"),
        None => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A password in a unix URL's query, or one with an unescaped `/`, was printed
    // whole. One rule for every form.
    #[test]
    fn every_form_of_password_is_redacted() {
        for (url, want) in [
            ("redis://u:pa/ss@h:1/0", "redis://u:***@h:1/0"),
            ("redis://u:pa?ss@h:1/0", "redis://u:***@h:1/0"),
            ("redis://u:p@ss@h:1", "redis://u:***@h:1"),
            ("rediss://u:p#s@h:1", "rediss://u:***@h:1"),
            (
                "redis+unix:///tmp/r.sock?pass=hunter2",
                "redis+unix:///tmp/r.sock?pass=***",
            ),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=hunter2&user=u",
                "redis+unix:///tmp/r.sock?db=1&pass=***&user=u",
            ),
            (
                "unix:///tmp/r@1.sock?password=x",
                "unix:///tmp/r@1.sock?password=***",
            ),
            ("redis://h:1/0?PASS=x", "redis://h:1/0?PASS=***"),
            (
                "redis+unix:///s?pa%73s=hunter2",
                "redis+unix:///s?pa%73s=***",
            ),
            ("u:secret@h", "u:***@h"),
            (
                "redis+sentinel://u:p/w@h1:1,h2:2/master",
                "redis+sentinel://u:***@h1:1,h2:2/master",
            ),
        ] {
            let got = redact(url);
            assert_eq!(got, want, "{url}");
            for secret in [
                "pa/ss", "pa?ss", "p@ss", "hunter2", "=x", "secret", "p/w", "p#s",
            ] {
                assert!(!got.contains(secret), "{url} -> {got}");
            }
        }
        // What an endpoint shows of itself is redacted too.
        let e = Endpoint::new("redis://u:hunter2@h:1", Duration::from_secs(1));
        assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
    }

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("rediss://:secret@h:1"), "rediss://:***@h:1");
        assert_eq!(redact("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock"),
            "redis+unix:///tmp/r.sock"
        );
        assert_eq!(redact("nonsense"), "nonsense");
    }

    #[test]
    fn a_plain_connection_refuses_a_sentinel_or_cluster_url() {
        let e = |url: &str| Endpoint::new(url, Duration::from_secs(1));
        let sentinel = e("redis+sentinel://u:hunter2@h:1/m");
        assert!(sentinel.check().is_ok());
        let err = sentinel.client().unwrap_err();
        assert!(matches!(err, ConnectError::NotPlain { .. }), "{err}");
        let cluster = e("redis+cluster://u:hunter2@h:1,h:2");
        assert!(cluster.check().is_ok());
        let refused = cluster.client().unwrap_err();
        assert!(
            matches!(refused, ConnectError::NotPlain { .. }),
            "{refused}"
        );
        let err = e("redis+sentinel://u:hunter2@h:1").check().unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        let no_path = e("redis+cluster://u:hunter2@h:1/0").check().unwrap_err();
        assert!(no_path.is_invalid_input(), "{no_path}");
        for err in [err, no_path, refused, sentinel.client().unwrap_err()] {
            let text = err.to_string();
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[test]
    fn the_sentinels_credentials_go_with_a_sentinel_url_alone_and_never_show() {
        let auth = SentinelAuth {
            user: Some("sentry".to_owned()),
            password: Password::new("hunter2"),
        };
        let mut sentinel = Endpoint::new("redis+sentinel://h:1/m", Duration::from_secs(1));
        sentinel.sentinel_auth = Some(auth.clone());
        assert!(sentinel.check().is_ok());
        assert!(!format!("{sentinel:?}").contains("hunter2"), "{sentinel:?}");
        for url in ["redis://h:1", "redis+cluster://h:1", "redis+unix:///s"] {
            let mut e = Endpoint::new(url, Duration::from_secs(1));
            e.sentinel_auth = Some(auth.clone());
            let err = e.check().unwrap_err();
            assert!(err.is_invalid_input(), "{url}: {err}");
            assert!(
                err.to_string().contains("not a Sentinel URL"),
                "{url}: {err}"
            );
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn invalid_urls_are_invalid_input() {
        for url in ["http://h:1", "nonsense", "redis://h:notaport"] {
            let err = Endpoint::new(url, Duration::from_secs(1))
                .client()
                .unwrap_err();
            assert!(err.is_invalid_input(), "{url}: {err}");
        }
    }
}
