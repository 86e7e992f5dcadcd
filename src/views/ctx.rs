//! What a verb and the live page's actions run with (`Ctx`), and how they fail (`Error`, with the
//! exit code each failure maps to): the command line and the page share them, so an action on the
//! page answers with a verb's words and a refusal is a refusal in both.

use tokio_util::sync::CancellationToken;

use crate::requests::RequestError;
use crate::store::keys::Keys;
use crate::store::presence::{Presence, PresenceError};
use fleet_redis::conn::Conn;
use fleet_redis::connect::{ConnectError, Endpoint};

/// What a verb runs with: where Redis is, the key namer, and the shutdown signal.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub endpoint: Endpoint,
    pub keys: Keys,
    /// Cancelled on SIGINT or SIGTERM: the agent and `--watch` stop on it.
    pub shutdown: CancellationToken,
    /// Whether stdout is a terminal (a `--watch` table then redraws in place).
    pub tty: bool,
}

impl Ctx {
    /// Connects and returns the presence store, bounded by `--timeout`.
    pub async fn presence(&self) -> Result<Presence<Conn>, Error> {
        let conn = self.endpoint.open().await?;
        Ok(Presence::new(conn, self.keys.clone()))
    }
}

/// A verb's failure, with the exit code it maps to.
#[derive(Debug)]
pub enum Error {
    /// Bad input: a name, a duration, a flag, a URL. Exit 2.
    Usage(anyhow::Error),
    /// The world failed: Redis unreachable, a call timed out. Exit 1.
    Runtime(anyhow::Error),
}

impl Error {
    pub fn usage(message: impl std::fmt::Display) -> Self {
        Error::Usage(anyhow::anyhow!("{message}"))
    }

    /// Whether this is a write to a pipe whose reader closed it.
    pub fn is_broken_pipe(&self) -> bool {
        let (Error::Usage(e) | Error::Runtime(e)) = self;
        e.chain().any(|cause| {
            cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        })
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            Error::Runtime(_) => 1,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(e) | Error::Runtime(e) => {
                f.write_str(&fleet_redis::connect::chain(e.as_ref()))
            }
        }
    }
}

impl From<ConnectError> for Error {
    fn from(e: ConnectError) -> Self {
        if e.is_invalid_input() {
            Error::Usage(e.into())
        } else {
            Error::Runtime(e.into())
        }
    }
}

impl From<PresenceError> for Error {
    fn from(e: PresenceError) -> Self {
        Error::Runtime(e.into())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Runtime(anyhow::Error::new(e).context("writing the output"))
    }
}

/// Maps a request's failure: a refusal the user can act on is exit 2, the store failing exit 1.
/// A slot that spent its attempts is exit 1: the world failed there, not the request.
pub fn request_error(e: RequestError) -> Error {
    match e {
        RequestError::Store(_) | RequestError::Spent { .. } => Error::Runtime(e.into()),
        RequestError::SlotTaken { .. }
        | RequestError::NoSuchClaim(_)
        | RequestError::Ended { .. }
        | RequestError::Raced(_)
        | RequestError::NotMarkable(..)
        | RequestError::PoweringOff { .. } => Error::Usage(e.into()),
    }
}
