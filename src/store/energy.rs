//! The energy ledger's store (SPEC §4.12): per slot, one hash of daily buckets (`YYYY-MM-DD` →
//! `on_ms off_ms activations`) and the field `mark` (`power known at_ms`: the power observed
//! last, the last power known, and the server's instant accounted up to).
//!
//! The leader keeps each slot's ledger in memory and writes each step as a compare-and-set on
//! the mark, fenced by the group's token (`account`, one script): a step that finds another
//! mark (a successor, a predecessor that wrote after the read) is refused and the writer reads
//! again, so no interval is counted twice. The accounting itself is `domain::energy`; this
//! module only reads and writes its stored form. The hash is bounded: one field per day, the
//! newest 401 kept, a day deleted in the step whose newer day takes its place (never by the
//! clock's day: a clock that steps forward deletes nothing, SPEC §4.12). Every call is one round trip; the
//! decoding is pure and never panics on a foreign write (a field it cannot read is skipped,
//! with the reason).

use fleet_redis::conn::{Order, query_by_tag};
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, Utc};
use redis::aio::ConnectionLike;

use crate::domain::energy::{Advance, Bucket, Ledger, Mark, date_of, day_of_date};
use crate::domain::name::{BenchName, GroupName};

use super::fenced::Fenced;
use super::keys::Keys;
use super::script::{Script, Start, pipelined, script, server_time};

const ACCOUNT: Script = script!("energy_account.lua");

/// The field of the mark.
const MARK: &str = "mark";

#[derive(Debug, thiserror::Error)]
pub enum EnergyError {
    #[error("reading the energy ledger of slot {slot} in group {group}")]
    Read {
        group: GroupName,
        slot: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("writing the energy ledger of slot {slot} in group {group}")]
    Account {
        group: GroupName,
        slot: BenchName,
        #[source]
        source: redis::RedisError,
    },
    #[error("reading the energy ledgers")]
    View {
        #[source]
        source: redis::RedisError,
    },
    #[error("a write to group {group} was refused: a newer leader holds the group's fence")]
    Fenced { group: GroupName },
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
}

/// A slot's ledger as stored, and the fields that could not be read (each with its reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub ledger: Ledger,
    pub skipped: Vec<String>,
}

/// One slot's step, as `account` takes it.
pub struct Step<'a> {
    pub slot: &'a BenchName,
    /// The mark the ledger had when read (or last written).
    pub before: Option<Mark>,
    /// The ledger once the step is taken.
    pub after: &'a Ledger,
    /// What the step changed.
    pub advance: &'a Advance,
}

/// What a step's write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accounted {
    Written,
    /// Another writer moved the mark since the read: read again before the next step.
    Moved,
}

/// The field name of a day.
fn day_field(day: i64) -> Option<String> {
    date_of(day).map(|d| d.format("%Y-%m-%d").to_string())
}

/// Reads a ledger hash. Pure; a field that is not a day or a mark is skipped with its reason.
pub fn decode(fields: HashMap<String, String>) -> Stored {
    let mut days = BTreeMap::new();
    let mut mark = None;
    let mut skipped = Vec::new();
    for (field, value) in fields {
        if field == MARK {
            match Mark::parse(&value) {
                Ok(m) => mark = Some(m),
                Err(why) => skipped.push(format!("field {MARK}: {why}")),
            }
            continue;
        }
        let Ok(date) = NaiveDate::parse_from_str(&field, "%Y-%m-%d") else {
            skipped.push(format!("field {field:?} is neither a day nor the mark"));
            continue;
        };
        match Bucket::parse(&value) {
            Ok(b) => {
                days.insert(day_of_date(date), b);
            }
            Err(why) => skipped.push(format!("field {field}: {why}")),
        }
    }
    skipped.sort();
    Stored {
        ledger: Ledger::from_parts(days, mark),
        skipped,
    }
}

/// The energy ledgers over one connection.
#[derive(Clone)]
pub struct EnergyStore<C> {
    shell: Fenced<C>,
}

impl<C: ConnectionLike + Clone + Send> EnergyStore<C> {
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

    /// Reads one slot's ledger. One round trip.
    pub async fn read(&self, group: &GroupName, slot: &BenchName) -> Result<Stored, EnergyError> {
        let mut conn = self.shell.conn.clone();
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.shell.keys.group(group).energy(slot))
            .query_async(&mut conn)
            .await
            .map_err(|source| EnergyError::Read {
                group: group.clone(),
                slot: slot.clone(),
                source,
            })?;
        Ok(decode(fields))
    }

    /// Reads the ledgers of a group's slots, in their order. One round trip (a pipeline).
    pub async fn read_all(
        &self,
        group: &GroupName,
        slots: &[BenchName],
    ) -> Result<Vec<Stored>, EnergyError> {
        let Some(first) = slots.first() else {
            return Ok(Vec::new());
        };
        let g = self.shell.keys.group(group);
        let mut pipe = redis::pipe();
        for slot in slots {
            pipe.cmd("HGETALL").arg(g.energy(slot));
        }
        let mut conn = self.shell.conn.clone();
        let all: Vec<HashMap<String, String>> =
            pipe.query_async(&mut conn)
                .await
                .map_err(|source| EnergyError::Read {
                    group: group.clone(),
                    slot: first.clone(),
                    source,
                })?;
        Ok(all.into_iter().map(decode).collect())
    }

    /// Reads the ledgers of every group's slots, and the server's time, for a view. One round
    /// trip (a pipeline).
    pub async fn read_groups(
        &self,
        asked: &[(GroupName, Vec<BenchName>)],
    ) -> Result<(Vec<Vec<Stored>>, DateTime<Utc>), EnergyError> {
        // One part a group (a group's ledgers share its hash tag: one Cluster slot); TIME rides
        // in the first, so on a Cluster it is the clock of a node that holds ledgers.
        let mut parts: Vec<redis::Pipeline> = asked
            .iter()
            .map(|(group, slots)| {
                let g = self.shell.keys.group(group);
                let mut part = redis::pipe();
                for slot in slots {
                    part.cmd("HGETALL").arg(g.energy(slot));
                }
                part
            })
            .collect();
        let mut first = redis::pipe();
        first.cmd("TIME");
        for cmd in parts
            .first()
            .into_iter()
            .flat_map(redis::Pipeline::cmd_iter)
        {
            first.add_command(cmd.clone());
        }
        match parts.first_mut() {
            Some(part) => *part = first,
            None => parts.push(first),
        }
        let (mut replies, time) = {
            let all: Vec<redis::Value> = query_by_tag(&self.shell.conn, &parts, Order::Any)
                .await
                .map_err(|source| EnergyError::View { source })?;
            let mut all = all.into_iter();
            let Some(time) = all.next() else {
                return Err(EnergyError::Reply(
                    "the pipeline returned nothing".to_owned(),
                ));
            };
            let time: (String, String) = redis::from_redis_value(time)
                .map_err(|e| EnergyError::Reply(format!("TIME: {e}")))?;
            (all, time)
        };
        let now = server_time(&time.0, &time.1)
            .ok_or_else(|| EnergyError::Reply(format!("TIME was {:?} {:?}", time.0, time.1)))?;
        let mut out = Vec::with_capacity(asked.len());
        for (_, slots) in asked {
            let mut group = Vec::with_capacity(slots.len());
            for _ in slots {
                let Some(reply) = replies.next() else {
                    return Err(EnergyError::Reply(
                        "a ledger is missing from the reply".to_owned(),
                    ));
                };
                let fields: HashMap<String, String> = redis::from_redis_value(reply)
                    .map_err(|e| EnergyError::Reply(format!("a ledger: {e}")))?;
                group.push(decode(fields));
            }
            out.push(group);
        }
        Ok((out, now))
    }

    /// Writes one step: `before` is the mark the ledger had when read (or last written),
    /// `after` the ledger once the step is taken, `advance` what the step changed. One round
    /// trip (a script).
    pub async fn account(
        &self,
        group: &GroupName,
        slot: &BenchName,
        before: Option<Mark>,
        after: &Ledger,
        advance: &Advance,
    ) -> Result<Accounted, EnergyError> {
        let step = Step {
            slot,
            before,
            after,
            advance,
        };
        let mut all = self.account_all(group, &[step]).await?;
        all.pop()
            .ok_or_else(|| EnergyError::Reply("no answer to the step".to_owned()))?
    }

    /// Writes the steps of a group's slots, each its own compare-and-set, in one round trip (a
    /// pipeline of the script, by its hash after the first: `script::pipelined`): the answers in
    /// the steps' order. A refused fence is that step's error; an error of the call is the whole
    /// call's.
    pub async fn account_all(
        &self,
        group: &GroupName,
        steps: &[Step<'_>],
    ) -> Result<Vec<Result<Accounted, EnergyError>>, EnergyError> {
        let Some(first) = steps.first() else {
            return Ok(Vec::new());
        };
        let marks = (steps.iter())
            .map(|step| step.after.mark())
            .collect::<Option<Vec<Mark>>>()
            .ok_or_else(|| EnergyError::Reply("a step always leaves a mark".to_owned()))?;
        let conn = self.shell.conn.clone();
        let call = |i: usize, start: Start| self.step_command(group, &steps[i], marks[i], start);
        let answers = pipelined(&conn, steps.len(), call).await;
        let answers: Vec<(i64, String)> = answers
            .and_then(|values| {
                let decoded = values.iter().map(redis::from_redis_value_ref);
                decoded
                    .collect::<Result<_, _>>()
                    .map_err(redis::RedisError::from)
            })
            .map_err(|source| EnergyError::Account {
                group: group.clone(),
                slot: first.slot.clone(),
                source,
            })?;
        if answers.len() != steps.len() {
            return Err(EnergyError::Reply(format!(
                "{} answers to {} steps",
                answers.len(),
                steps.len()
            )));
        }
        Ok(answers
            .into_iter()
            .map(|(code, why)| match (code, why.as_str()) {
                (1, _) => Ok(Accounted::Written),
                (_, "moved") => Ok(Accounted::Moved),
                (_, "fenced") => Err(EnergyError::Fenced {
                    group: group.clone(),
                }),
                (c, w) => Err(EnergyError::Reply(format!("account returned {c} {w}"))),
            })
            .collect())
    }

    /// The script call of one step, which leaves `mark`.
    fn step_command(
        &self,
        group: &GroupName,
        step: &Step<'_>,
        mark: Mark,
        start: Start,
    ) -> redis::Cmd {
        let g = self.shell.keys.group(group);
        let mut cmd = start(ACCOUNT, &[g.energy(step.slot), g.fence()]);
        cmd.arg(self.shell.token())
            .arg(step.before.map(|m| m.render()).unwrap_or_default())
            .arg(mark.render());
        let set: Vec<(String, String)> = step
            .advance
            .increments
            .keys()
            .filter_map(|d| Some((day_field(*d)?, step.after.days().get(d)?.render())))
            .collect();
        cmd.arg(set.len());
        for (field, value) in &set {
            cmd.arg(field).arg(value);
        }
        for day in &step.advance.trimmed {
            if let Some(field) = day_field(*day) {
                cmd.arg(field);
            }
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_in_the_hash_is_skipped_with_its_reason() {
        let fields = HashMap::from([
            ("2026-11-30".to_owned(), "1000 2000 1".to_owned()),
            ("2026-11-31".to_owned(), "1 2 3".to_owned()),
            ("2026-11-29".to_owned(), "x".to_owned()),
            ("mark".to_owned(), "on".to_owned()),
        ]);
        let stored = decode(fields);
        assert_eq!(stored.ledger.days().len(), 1);
        assert_eq!(stored.ledger.mark(), None);
        assert_eq!(stored.skipped.len(), 3, "{:?}", stored.skipped);
        assert!(stored.skipped[0].starts_with("field \"2026-11-31\" is neither"));
    }
}
