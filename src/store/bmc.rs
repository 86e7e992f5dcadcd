//! The BMC's power reading of each slot (SPEC §4.10): what a Redfish or IPMI BMC last said of
//! its machine's power, shown beside the heartbeat (`bmc: on|off|unknown`). A second opinion and
//! a report: no decision of the claim model reads it (the heartbeat stays the observation of
//! record), and an unknown reading is never DOWN.
//!
//! One key per slot, `{P:G}:bmc:<slot>`, holding JSON `{"v":1,"state":…,"at":<server ms>,
//! "why":…}`. The leader's reader writes it (`record`, one script that stamps the server's time,
//! fenced like the controller's other writes) with a TTL of a few read periods, so a reading
//! whose reader stopped lapses and the views show none. The views read every slot's reading in
//! one round trip (`read_all`). The decoding is pure and never panics: a value fleet did not
//! write is an error naming the key and what is wrong, and spoils no other slot.

use fleet_redis::conn::{Order, query_by_tag};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use serde::Deserialize;

use crate::domain::name::{BenchName, GroupName};

use super::fenced::Fenced;
use super::keys::Keys;
use super::script::{Script, eval, script};
use super::{mget_chunked, mget_joined};

const WRITE: Script = script!("bmc_write.lua");

/// The longest reason kept with an unknown reading: a reason is a line for a view, not a log.
pub const MAX_WHY: usize = 240;

/// What a BMC said of its machine's power.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BmcState {
    On,
    Off,
    /// The BMC could not be read, or reported a transitional or unknown state.
    Unknown,
}

impl BmcState {
    pub fn as_str(self) -> &'static str {
        match self {
            BmcState::On => "on",
            BmcState::Off => "off",
            BmcState::Unknown => "unknown",
        }
    }

    fn parse(text: &str) -> Option<BmcState> {
        match text {
            "on" => Some(BmcState::On),
            "off" => Some(BmcState::Off),
            "unknown" => Some(BmcState::Unknown),
            _ => None,
        }
    }
}

/// One stored reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BmcReading {
    pub state: BmcState,
    /// The server's time of the reading.
    pub at: DateTime<Utc>,
    /// Why it is unknown (no secret: the drivers' errors carry none).
    pub why: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    #[error("writing the BMC reading of slot {slot} in group {group}")]
    Record {
        group: GroupName,
        slot: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the BMC readings of group {group}")]
    Read {
        group: GroupName,
        #[source]
        source: redis::RedisError,
    },
    #[error("a write to group {group} was refused: a newer leader holds the group's fence")]
    Fenced { group: GroupName },
    /// A value fleet did not write.
    #[error("the key {key} does not hold a BMC reading: {why}")]
    Garbage { key: String, why: String },
}

/// The stored form, as the script writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    state: String,
    at: i64,
    #[serde(default)]
    why: Option<String>,
}

/// Reads one stored reading. Pure; anything but what `record` writes is `Garbage`, naming `key`.
pub fn decode(key: &str, raw: &str) -> Result<BmcReading, BmcError> {
    let garbage = |why: String| BmcError::Garbage {
        key: key.to_owned(),
        why,
    };
    let wire: Wire = serde_json::from_str(raw).map_err(|e| garbage(e.to_string()))?;
    if wire.v != 1 {
        return Err(garbage(format!("version {} (this fleet reads 1)", wire.v)));
    }
    let state = BmcState::parse(&wire.state)
        .ok_or_else(|| garbage(format!("state {:?} (on, off or unknown)", wire.state)))?;
    let at = DateTime::from_timestamp_millis(wire.at)
        .filter(|_| wire.at > 0)
        .ok_or_else(|| garbage(format!("time {} is not a server ms", wire.at)))?;
    if wire
        .why
        .as_ref()
        .is_some_and(|w| w.chars().count() > MAX_WHY)
    {
        return Err(garbage(format!("a reason over {MAX_WHY} characters")));
    }
    Ok(BmcReading {
        state,
        at,
        why: wire.why,
    })
}

/// A reason as it is kept: one line, no control character, at most [`MAX_WHY`] characters.
pub fn trim_why(why: &str) -> String {
    let line: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    if line.chars().count() <= MAX_WHY {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(MAX_WHY - 1).collect();
    cut.push('…');
    cut
}

/// A group's readings as read: per slot asked, in order, its reading, none, or why it cannot be
/// read.
pub type GroupReadings = Vec<Option<Result<BmcReading, BmcError>>>;

/// The BMC readings over one connection.
#[derive(Clone)]
pub struct BmcStore<C> {
    shell: Fenced<C>,
}

impl<C: ConnectionLike + Clone + Send> BmcStore<C> {
    pub fn new(conn: C, keys: Keys) -> Self {
        Self {
            shell: Fenced::new(conn, keys),
        }
    }

    /// The same store, its writes carrying the leadership `token`.
    pub fn fenced(&self, token: &str) -> Self {
        Self {
            shell: self.shell.fenced(token),
        }
    }

    /// Records a reading, stamped with the server's time and standing for `ttl`. Fenced: a
    /// deposed leader's late reading is refused, so a view never shows an older reading over a
    /// newer one. One round trip (a script). Returns the reading's server time.
    pub async fn record(
        &self,
        group: &GroupName,
        slot: &BenchName,
        state: BmcState,
        why: Option<&str>,
        ttl: Duration,
    ) -> Result<DateTime<Utc>, BmcError> {
        let g = self.shell.keys.group(group);
        let mut conn = self.shell.conn.clone();
        let at: i64 = eval(WRITE, &[g.fence(), g.bmc(slot)])
            .arg(self.shell.token())
            .arg(state.as_str())
            .arg(why.map(trim_why).unwrap_or_default())
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .query_async(&mut conn)
            .await
            .map_err(|source| BmcError::Record {
                group: group.clone(),
                slot: slot.clone(),
                source,
            })?;
        if at < 0 {
            return Err(BmcError::Fenced {
                group: group.clone(),
            });
        }
        DateTime::from_timestamp_millis(at).ok_or_else(|| BmcError::Garbage {
            key: g.bmc(slot),
            why: format!("the script answered {at}"),
        })
    }

    /// Reads the readings of every slot asked, for each group in order: one round trip (a
    /// pipeline of a group's `MGET`s, of `KEYS_PER_COMMAND` keys at most) whatever the number of
    /// groups. A key of another type reads as none (`MGET` returns nothing for it).
    pub async fn read_all(
        &self,
        groups: &[(GroupName, Vec<BenchName>)],
    ) -> Result<Vec<GroupReadings>, BmcError> {
        let asked: Vec<_> = groups.iter().filter(|(_, s)| !s.is_empty()).collect();
        let Some((first, _)) = asked.first() else {
            return Ok(groups.iter().map(|_| Vec::new()).collect());
        };
        // A part a group: a group's keys share its hash tag (one Cluster slot).
        let parts: Vec<redis::Pipeline> = asked
            .iter()
            .map(|(group, slots)| {
                let g = self.shell.keys.group(group);
                let mut part = redis::pipe();
                mget_chunked(
                    &mut part,
                    &slots.iter().map(|s| g.bmc(s)).collect::<Vec<_>>(),
                );
                part
            })
            .collect();
        let failed = |source| BmcError::Read {
            group: first.clone(),
            source,
        };
        let replies: Vec<redis::Value> = query_by_tag(&self.shell.conn, &parts, Order::Any)
            .await
            .map_err(failed)?;
        let mut replies = replies.into_iter();
        groups
            .iter()
            .map(|(group, slots)| {
                if slots.is_empty() {
                    return Ok(Vec::new());
                }
                let g = self.shell.keys.group(group);
                let raws = mget_joined(&mut replies, slots.len()).map_err(failed)?;
                Ok(slots
                    .iter()
                    .zip(raws)
                    .map(|(slot, raw)| raw.map(|raw| decode(&g.bmc(slot), &raw)))
                    .collect())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "{fleet:g}:bmc:n1";

    #[test]
    fn what_the_script_writes_reads_back() {
        let on = decode(KEY, r#"{"v":1,"state":"on","at":1800000000123}"#).unwrap();
        assert_eq!(
            on,
            BmcReading {
                state: BmcState::On,
                at: DateTime::from_timestamp_millis(1_800_000_000_123).unwrap(),
                why: None,
            }
        );
        // cjson escapes a slash; serde reads it back.
        let unknown = decode(
            KEY,
            r#"{"v":1,"state":"unknown","at":1800000000123,"why":"http:\/\/127.0.0.1:1: unreachable"}"#,
        )
        .unwrap();
        assert_eq!(unknown.state, BmcState::Unknown);
        assert_eq!(
            unknown.why.as_deref(),
            Some("http://127.0.0.1:1: unreachable")
        );
    }

    #[test]
    fn garbage_is_an_error_naming_the_key_and_what_is_wrong() {
        for (raw, why) in [
            ("nonsense", "line 1 column"),
            (r#"{"v":2,"state":"on","at":1}"#, "version 2"),
            (r#"{"v":1,"state":"maybe","at":1}"#, "state \"maybe\""),
            (r#"{"v":1,"state":"on","at":-5}"#, "time -5"),
            (r#"{"v":1,"state":"on"}"#, "missing field `at`"),
            (r#"{"v":1,"state":"on","at":1,"x":1}"#, "unknown field `x`"),
            (r#"{"v":1,"state":"on","at":1e400}"#, ""),
            (r#"[1,2]"#, ""),
        ] {
            let e = decode(KEY, raw).unwrap_err().to_string();
            assert!(
                e.starts_with("the key {fleet:g}:bmc:n1 does not hold a BMC reading: ")
                    && e.contains(why),
                "{raw}: {e}"
            );
        }
        let long = format!(
            r#"{{"v":1,"state":"unknown","at":1,"why":"{}"}}"#,
            "x".repeat(MAX_WHY + 1)
        );
        assert!(decode(KEY, &long).is_err());
    }

    #[test]
    fn a_reason_is_kept_as_one_short_line() {
        assert_eq!(trim_why("  a\nb\tc "), "a b c");
        let long = trim_why(&"é".repeat(MAX_WHY * 2));
        assert_eq!(long.chars().count(), MAX_WHY);
        assert!(long.ends_with('…'));
        assert_eq!(trim_why(&"y".repeat(MAX_WHY)), "y".repeat(MAX_WHY));
    }
}
