//! Reaching Redis: the URL, TLS, and the timeouts every call is bounded by (SPEC §2.7).
//!
//! `redis://`, `rediss://` (TLS, with an optional CA file) and `redis+unix://` URLs are accepted,
//! with `user:password@` for ACL users. Errors name the URL with its password redacted.

use std::path::PathBuf;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo};

/// The default Redis URL.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Where Redis is and how long a call may take.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub url: String,
    /// The bound on connecting and on every call.
    pub timeout: Duration,
    /// A PEM file of the CA that signed the server's certificate, for `rediss://`.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "invalid Redis URL {url}: use redis://[user:password@]host:port[/db], rediss://... for TLS, \
         or redis+unix:///path/to/redis.sock"
    )]
    InvalidUrl {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the Redis CA file {path}")]
    CaFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot reach Redis at {url} within {timeout}: is redis-server running there? \
         set --redis or FLEET_REDIS_URL"
    )]
    Unreachable {
        url: String,
        timeout: humantime::Duration,
        #[source]
        source: redis::RedisError,
    },
}

impl ConnectError {
    /// Whether the error is the caller's input (exit 2) rather than the world (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, ConnectError::InvalidUrl { .. })
    }
}

impl Endpoint {
    pub fn new(url: impl Into<String>, timeout: Duration) -> Self {
        Self {
            url: url.into(),
            timeout,
            ca_file: None,
        }
    }

    /// The URL with any password replaced by `***`, for messages and logs.
    pub fn redacted(&self) -> String {
        redact(&self.url)
    }

    /// Builds the client, validating the URL without connecting.
    pub fn client(&self) -> Result<Client, ConnectError> {
        install_crypto_provider();
        let invalid = |source| ConnectError::InvalidUrl {
            url: self.redacted(),
            source,
        };
        let info = self.url.as_str().into_connection_info().map_err(invalid)?;
        match &self.ca_file {
            None => Client::open(info).map_err(invalid),
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| ConnectError::CaFile {
                    path: path.clone(),
                    source,
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
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
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

    /// A connection manager for a long-running process: it reconnects in the background after a
    /// failed call, and the caller retries on its own schedule. One connection attempt here;
    /// the caller owns the retry loop.
    pub async fn manager(&self) -> Result<ConnectionManager, ConnectError> {
        let client = self.client()?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(self.timeout);
        let connecting = client.get_connection_manager_with_config(config);
        match tokio::time::timeout(self.timeout * 2, connecting).await {
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

    fn unreachable(&self, source: redis::RedisError) -> ConnectError {
        ConnectError::Unreachable {
            url: self.redacted(),
            timeout: self.timeout.into(),
            source,
        }
    }
}

/// TLS goes through rustls with the ring provider; installing it twice is harmless.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Replaces the password of a URL's user info with `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{scheme}://{masked}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn invalid_urls_are_invalid_input() {
        for url in ["http://h:1", "nonsense", "redis://h:notaport"] {
            let err = Endpoint::new(url, Duration::from_secs(1))
                .client()
                .unwrap_err();
            assert!(err.is_invalid_input(), "{url}: {err}");
        }
    }
}
