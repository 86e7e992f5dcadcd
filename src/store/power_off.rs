//! The agent's power-off (SPEC §4.10): a request the operation wrapper writes for a bench, and
//! the bench's acknowledgement of it, each one key per bench.
//!
//! The wrapper writes the request with a fresh nonce (`ask`, one script that stamps the server's
//! time and expires the request when the wrapper stops waiting), then reads the acknowledgement
//! (`answer`, one `GET`) until it names that nonce. The bench's beat reads both in its own round
//! trip (`presence::beat`), and `pending` says which request the bench has not answered yet; the agent
//! answers (`acknowledge`, one `SET`) before it runs its power-off command, so a nonce is
//! answered, and obeyed, once. Every call is one round trip; the decoding is pure.

use std::time::Duration;

use redis::aio::ConnectionLike;
use serde::{Deserialize, Serialize};

use crate::domain::name::BenchName;

use super::keys::Keys;
use super::script::{Script, eval, script};

const OFF_REQUEST: Script = script!("off_request.lua");

/// How long an acknowledgement outlives the request it answers: past the request's own end,
/// so a beat never sees the request without its answer, and then gone on its own.
pub const ACK_OUTLIVES: Duration = Duration::from_secs(600);

/// The longest a nonce may be (the wrapper's are 32 hex digits); anything longer is a foreign
/// write.
const MAX_NONCE: usize = 64;

/// The most bytes of an acknowledgement the wrapper reads: an agent's is about 250 bytes with its
/// reason, so more is a foreign write, never read whole (SPEC §7).
pub const MAX_ACK: usize = 2_048;

/// A power-off request, as the wrapper wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffRequest {
    pub nonce: String,
    /// The server's ms when it was written.
    pub at: i64,
    /// The server's ms when it lapses (the wrapper stops waiting then).
    pub until: i64,
}

/// What the agent said to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// It runs its power-off command now.
    Accepted,
    /// It powers nothing off (started without `--power-off-command`); `why` says so.
    Refused,
}

/// The agent's acknowledgement of one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffAck {
    pub nonce: String,
    pub answer: Answer,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PowerOffError {
    #[error("writing the power-off request of {name}")]
    Ask {
        name: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the power-off acknowledgement of {name}")]
    Answer {
        name: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("writing the power-off acknowledgement of {name}")]
    Acknowledge {
        name: BenchName,
        #[source]
        source: redis::RedisError,
    },
}

/// The power-off keys over one connection.
#[derive(Clone)]
pub struct PowerOff<C> {
    conn: C,
    keys: Keys,
}

impl<C: ConnectionLike + Clone + Send> PowerOff<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        PowerOff { conn, keys }
    }

    /// Asks `name`'s agent to power its machine off: the request with `nonce`, standing for
    /// `stands` on the server's clock. One round trip.
    pub async fn ask(
        &self,
        name: &BenchName,
        nonce: &str,
        stands: Duration,
    ) -> Result<OffRequest, PowerOffError> {
        let ms = u64::try_from(stands.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut conn = self.conn.clone();
        let at: i64 = eval(OFF_REQUEST, &[self.keys.off_request(name)])
            .arg(nonce)
            .arg(ms)
            .query_async(&mut conn)
            .await
            .map_err(|source| PowerOffError::Ask {
                name: name.clone(),
                source,
            })?;
        Ok(OffRequest {
            nonce: nonce.to_owned(),
            at,
            until: at.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
        })
    }

    /// The bench's last acknowledgement: `None` when there is none; an unreadable one (a
    /// foreign write, or one past `MAX_ACK` bytes) is `Some(Err(why))`. One round trip. The
    /// bench writes this key with its own user, so it is read bounded, never whole (SPEC §7).
    pub async fn answer(
        &self,
        name: &BenchName,
    ) -> Result<Option<Result<OffAck, String>>, PowerOffError> {
        let mut conn = self.conn.clone();
        let raw: Vec<u8> = redis::cmd("GETRANGE")
            .arg(self.keys.off_ack(name))
            .arg(0)
            .arg(MAX_ACK)
            .query_async(&mut conn)
            .await
            .map_err(|source| PowerOffError::Answer {
                name: name.clone(),
                source,
            })?;
        if raw.is_empty() {
            return Ok(None);
        }
        if raw.len() > MAX_ACK {
            return Ok(Some(Err(format!(
                "the power-off acknowledgement is larger than {MAX_ACK} bytes: not one an agent \
                 writes"
            ))));
        }
        Ok(Some(decode_ack(&String::from_utf8_lossy(&raw))))
    }

    /// The bench's answer to `request`, kept `ACK_OUTLIVES` past the request's lapse, and
    /// whether the request it answers still stands once it is written (SPEC §4.10, §7 S5): one
    /// round trip, `SET` of the answer then `GET` of the request. An answer names its nonce, so
    /// one written after its request was replaced or lapsed answers nothing (the wrapper counts
    /// only its own nonce); `false` tells the caller the request is gone, and it must not obey.
    /// No transaction: a bench's user may run none, since a transaction of a million queued
    /// commands holds Redis for everyone while it runs (§7 S1).
    pub async fn acknowledge(
        &self,
        name: &BenchName,
        request: &OffRequest,
        ack: &OffAck,
    ) -> Result<bool, PowerOffError> {
        let text = serde_json::to_string(&Versioned { v: 1, ack }).unwrap_or_default();
        let keep = i64::try_from(ACK_OUTLIVES.as_millis()).unwrap_or(i64::MAX);
        let mut conn = self.conn.clone();
        // The request is fleet's (the controller's user wrote it), so it is read whole.
        let ((), standing): ((), Option<String>) = redis::pipe()
            .cmd("SET")
            .arg(self.keys.off_ack(name))
            .arg(text)
            .arg("PXAT")
            .arg(request.until.saturating_add(keep).max(1))
            .get(self.keys.off_request(name))
            .query_async(&mut conn)
            .await
            .map_err(|source| PowerOffError::Acknowledge {
                name: name.clone(),
                source,
            })?;
        Ok(standing
            .as_deref()
            .and_then(|raw| decode_request(raw).ok())
            .is_some_and(|r| r.nonce == request.nonce))
    }
}

#[derive(Serialize)]
struct Versioned<'a> {
    v: u32,
    #[serde(flatten)]
    ack: &'a OffAck,
}

#[derive(Deserialize)]
struct RawRequest {
    v: u32,
    nonce: String,
    at: i64,
    until: i64,
}

#[derive(Deserialize)]
struct RawAck {
    v: u32,
    #[serde(flatten)]
    ack: OffAck,
}

fn nonce_ok(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= MAX_NONCE
        && nonce.chars().all(|c| c.is_ascii_alphanumeric())
}

/// A request as the wrapper writes it; anything else (a foreign write) is refused with why.
pub fn decode_request(raw: &str) -> Result<OffRequest, String> {
    let r: RawRequest =
        serde_json::from_str(raw).map_err(|e| format!("the power-off request is not one ({e})"))?;
    if r.v != 1 {
        return Err(format!(
            "the power-off request has version {}, this fleet reads 1",
            r.v
        ));
    }
    if !nonce_ok(&r.nonce) {
        return Err("the power-off request's nonce is not one fleet writes".to_owned());
    }
    Ok(OffRequest {
        nonce: r.nonce,
        at: r.at,
        until: r.until,
    })
}

/// An acknowledgement as an agent writes it.
pub fn decode_ack(raw: &str) -> Result<OffAck, String> {
    let r: RawAck = serde_json::from_str(raw)
        .map_err(|e| format!("the power-off acknowledgement is not one ({e})"))?;
    if r.v != 1 {
        return Err(format!(
            "the power-off acknowledgement has version {}, this fleet reads 1",
            r.v
        ));
    }
    Ok(r.ack)
}

/// The request a bench has yet to answer, from the two values its beat read (`None` for a
/// missing key): a request whose nonce its acknowledgement does not name. An unreadable request
/// is an error (the beat reports it); an unreadable acknowledgement answers nothing, so the
/// request stands and the agent answers it again.
pub fn pending(request: Option<&str>, ack: Option<&str>) -> Result<Option<OffRequest>, String> {
    let Some(raw) = request else {
        return Ok(None);
    };
    let request = decode_request(raw)?;
    let answered = ack
        .and_then(|raw| decode_ack(raw).ok())
        .is_some_and(|ack| ack.nonce == request.nonce);
    Ok((!answered).then_some(request))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: &str = r#"{"v":1,"nonce":"ab12","at":1000,"until":61000}"#;

    fn ack(nonce: &str, answer: Answer) -> String {
        serde_json::to_string(&Versioned {
            v: 1,
            ack: &OffAck {
                nonce: nonce.to_owned(),
                answer,
                why: None,
            },
        })
        .unwrap()
    }

    #[test]
    fn a_request_is_pending_until_an_acknowledgement_names_its_nonce() {
        let request = OffRequest {
            nonce: "ab12".into(),
            at: 1000,
            until: 61000,
        };
        assert_eq!(pending(None, None), Ok(None));
        assert_eq!(
            pending(None, Some(&ack("ab12", Answer::Accepted))),
            Ok(None)
        );
        assert_eq!(pending(Some(REQ), None), Ok(Some(request.clone())));
        assert_eq!(
            pending(Some(REQ), Some(&ack("old1", Answer::Accepted))),
            Ok(Some(request.clone()))
        );
        assert_eq!(
            pending(Some(REQ), Some(&ack("ab12", Answer::Accepted))),
            Ok(None)
        );
        assert_eq!(
            pending(Some(REQ), Some(&ack("ab12", Answer::Refused))),
            Ok(None)
        );
        // An acknowledgement that does not decode answers nothing.
        assert_eq!(pending(Some(REQ), Some("garbage")), Ok(Some(request)));
    }

    #[test]
    fn a_foreign_request_is_refused_saying_why() {
        for (raw, why) in [
            ("garbage", "is not one"),
            (r#"{"v":2,"nonce":"ab","at":1,"until":2}"#, "version 2"),
            (r#"{"v":1,"nonce":"a b","at":1,"until":2}"#, "nonce"),
            (r#"{"v":1,"nonce":"","at":1,"until":2}"#, "nonce"),
        ] {
            let err = pending(Some(raw), None).unwrap_err();
            assert!(err.contains(why), "{raw}: {err}");
        }
    }

    #[test]
    fn an_acknowledgement_reads_back_as_written() {
        let written = OffAck {
            nonce: "ab12".into(),
            answer: Answer::Refused,
            why: Some("started without --power-off-command".into()),
        };
        let text = serde_json::to_string(&Versioned {
            v: 1,
            ack: &written,
        })
        .unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"nonce":"ab12","answer":"refused","why":"started without --power-off-command"}"#
        );
        assert_eq!(decode_ack(&text), Ok(written));
    }
}
