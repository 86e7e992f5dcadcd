//! Why a provider call fails, and the one mapping of those failures to gRPC statuses
//! (SPEC §6.3): a malformed request is INVALID_ARGUMENT, an unknown group or node NOT_FOUND, a
//! change past a bound OUT_OF_RANGE, RESOURCE_EXHAUSTED or FAILED_PRECONDITION, a race ABORTED,
//! what fleet does not offer UNIMPLEMENTED, and Redis out of reach, a newer leader's fence or a
//! follower UNAVAILABLE ("not now, retry").

use std::time::Duration;

use tonic::Status;

use crate::domain::name::{BenchName, GroupName, InvalidGroupName};
use crate::domain::sizing::{BelowMin, DecreaseRefused, IncreaseRefused};
use crate::requests::RequestError;
use crate::store::claims::ClaimStoreError;
use fleet_redis::connect::chain;

use super::pricing::{PodPriceError, PriceError};

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the node group id is empty: name one of the groups NodeGroups lists")]
    EmptyGroupId,
    #[error(transparent)]
    InvalidGroupId(InvalidGroupName),
    #[error("no node group {id}: the groups are {}", names(.groups))]
    NoSuchGroup { id: String, groups: Vec<GroupName> },
    #[error(
        "this fleet serve is not the leader: only the leader changes node groups; route \
         cluster-autoscaler to the leader (a Service whose readiness probe is /readyz, which \
         only the leader passes)"
    )]
    NotLeader,
    #[error("delta {0} must be positive: IncreaseSize adds machines")]
    NotAnIncrease(i32),
    #[error("delta {0} must be negative: DecreaseTargetSize only takes back requests")]
    NotADecrease(i32),
    #[error("no nodes to delete: name at least one")]
    NoNodes,
    #[error("node {name:?} (provider ID {provider_id:?}) is not a fleet slot")]
    NotASlot { name: String, provider_id: String },
    #[error(
        "node {name:?} (provider ID {provider_id:?}) is slot {slot} of group {of}, not of group \
         {asked}"
    )]
    OtherGroup {
        name: String,
        provider_id: String,
        slot: BenchName,
        of: GroupName,
        asked: GroupName,
    },
    #[error("{}", increase_refused(.group, .refused, *.cooldown))]
    Increase {
        group: GroupName,
        refused: IncreaseRefused,
        /// The group's failed-slot cooldown, for the operator told why slots are spent.
        cooldown: Duration,
    },
    #[error(
        "deleting {} nodes would take group {group} from {} below its min size {}",
        .below.real, .below.target, .below.min
    )]
    BelowMin { group: GroupName, below: BelowMin },
    #[error("{}", decrease_refused(.group, .refused))]
    Decrease {
        group: GroupName,
        refused: DecreaseRefused,
    },
    #[error(
        "took back {taken} of {wanted} requests of group {group}: the others started booting \
         meanwhile; remove machines with DeleteNodes"
    )]
    Overtaken {
        group: GroupName,
        taken: usize,
        wanted: usize,
    },
    #[error("the claim on {0} kept changing under DeleteNodes; call again")]
    KeptChanging(BenchName),
    #[error(
        "node {name:?} (provider ID {provider_id:?}) is not a fleet slot and carries no {label} \
         label of a fleet group"
    )]
    NotPriced {
        name: String,
        provider_id: String,
        label: &'static str,
    },
    #[error("group {0} declares no power draw (template.power), so it has no price")]
    NoPowerDraw(GroupName),
    #[error(transparent)]
    Price(PriceError),
    #[error(transparent)]
    PodPrice(PodPriceError),
    #[error(
        "group {0} declares no template, so it cannot scale from zero; add one to its \
         configuration"
    )]
    NoTemplate(GroupName),
    #[error(
        "group {0} does not opt in to autoscaling options: cluster-autoscaler's flags apply (set \
         autoscaling_options in its configuration to override them)"
    )]
    NoOptions(GroupName),
    #[error(transparent)]
    Store(#[from] ClaimStoreError),
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A reply that cannot be: a store answer missing what was asked.
    #[error("{0}")]
    Internal(&'static str),
}

fn names(groups: &[GroupName]) -> String {
    groups
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn increase_refused(group: &GroupName, refused: &IncreaseRefused, cooldown: Duration) -> String {
    match refused {
        IncreaseRefused::OverMax { target, delta, max } => {
            format!("target {target} + {delta} is over max size {max} of group {group}")
        }
        IncreaseRefused::Short {
            free,
            delta,
            busy,
            spent,
            max,
            slots_under_max,
        } => {
            let mut why = Vec::new();
            if *busy > 0 {
                why.push(format!("{busy} still powering off"));
            }
            if *spent > 0 {
                why.push(format!(
                    "{spent} spent their attempts (they rest for {} or until `fleet \
                     reset-attempts SLOT`)",
                    humantime::format_duration(cooldown)
                ));
            }
            if let Some(slots) = slots_under_max {
                why.push(format!("max size {max} is above the group's {slots} slots"));
            }
            format!(
                "group {group} has {free} free usable slots, {delta} asked{}",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", why.join("; "))
                }
            )
        }
    }
}

fn decrease_refused(group: &GroupName, refused: &DecreaseRefused) -> String {
    match refused {
        DecreaseRefused::Exist { wanted, pending } => format!(
            "decreasing group {group} by {wanted} would remove machines that exist: only \
             {pending} requests are pending; remove machines with DeleteNodes"
        ),
        DecreaseRefused::BelowMin {
            wanted,
            target,
            min,
        } => format!(
            "decreasing group {group} by {wanted} would take it from {target} below its min \
             size {min}"
        ),
    }
}

impl From<ProviderError> for Status {
    /// The one mapping of a provider failure to its gRPC status.
    fn from(e: ProviderError) -> Status {
        use ProviderError as E;
        let code = match &e {
            E::EmptyGroupId
            | E::InvalidGroupId(_)
            | E::NotAnIncrease(_)
            | E::NotADecrease(_)
            | E::NoNodes
            | E::OtherGroup { .. }
            | E::Price(_) => tonic::Code::InvalidArgument,
            E::PodPrice(p) => match p {
                PodPriceError::NoPod
                | PodPriceError::Undecodable(_)
                | PodPriceError::Quantity { .. }
                | PodPriceError::Time(_) => tonic::Code::InvalidArgument,
                PodPriceError::NoPowerDraw => tonic::Code::Unimplemented,
                PodPriceError::Unhostable { .. } => tonic::Code::NotFound,
            },
            E::NoSuchGroup { .. } | E::NotASlot { .. } | E::NotPriced { .. } => {
                tonic::Code::NotFound
            }
            E::Increase {
                refused: IncreaseRefused::OverMax { .. },
                ..
            } => tonic::Code::OutOfRange,
            E::Increase {
                refused: IncreaseRefused::Short { .. },
                ..
            } => tonic::Code::ResourceExhausted,
            E::BelowMin { .. } | E::Decrease { .. } | E::Overtaken { .. } => {
                tonic::Code::FailedPrecondition
            }
            E::KeptChanging(_) => tonic::Code::Aborted,
            E::NoPowerDraw(_) | E::NoTemplate(_) | E::NoOptions(_) => tonic::Code::Unimplemented,
            // Redis out of reach and a newer leader's fence are both "not now, retry".
            E::NotLeader | E::Store(_) => tonic::Code::Unavailable,
            E::Request(r) => match r {
                RequestError::Store(_) => tonic::Code::Unavailable,
                RequestError::SlotTaken { .. } | RequestError::Raced(_) => tonic::Code::Aborted,
                RequestError::NoSuchClaim(_) => tonic::Code::NotFound,
                RequestError::Ended { .. }
                | RequestError::NotMarkable(..)
                | RequestError::PoweringOff { .. }
                | RequestError::Spent { .. } => tonic::Code::FailedPrecondition,
            },
            E::Internal(_) => tonic::Code::Internal,
        };
        let message = match &e {
            // The store's failures carry their whole chain, down to Redis's own words.
            E::Store(store) | E::Request(RequestError::Store(store)) => chain(store),
            _ => e.to_string(),
        };
        Status::new(code, bounded(message))
    }
}

/// The most of a refusal's message the provider answers and logs (SPEC §6.3): a message may
/// quote what a peer sent (a group id of 4 MB, say), and a refusal is logged each time.
pub const MESSAGE: usize = 1024;

/// `message`, cut at a character's edge to at most [`MESSAGE`] bytes, saying how long it was.
fn bounded(message: String) -> String {
    if message.len() <= MESSAGE {
        return message;
    }
    let mut end = MESSAGE - 64;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &message[..end], message.len())
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    // A refusal that quotes what the peer sent is cut to MESSAGE bytes, at a character's edge,
    // saying how long it was; a short one is whole.
    #[test]
    fn a_refusal_quoting_a_huge_id_answers_and_logs_a_bounded_message() {
        for id in ["g".repeat(4 << 20), "é".repeat(1 << 20)] {
            let status = Status::from(ProviderError::NoSuchGroup {
                id: id.clone(),
                groups: Vec::new(),
            });
            let message = status.message();
            assert!(message.len() <= MESSAGE, "{} bytes", message.len());
            assert!(
                message.ends_with(&format!("({} bytes in all)", message_len(&id))),
                "{}",
                &message[message.len() - 40..]
            );
        }
        let short = Status::from(ProviderError::NoSuchGroup {
            id: "gpu".to_owned(),
            groups: Vec::new(),
        });
        assert!(
            !short.message().contains("bytes in all"),
            "{}",
            short.message()
        );
    }

    fn message_len(id: &str) -> usize {
        ProviderError::NoSuchGroup {
            id: id.to_owned(),
            groups: Vec::new(),
        }
        .to_string()
        .len()
    }
    use crate::domain::claim::{NotMarkable, Phase};
    use crate::domain::name::ClaimName;
    use crate::provider::pricing::QuantityError;

    fn undecodable() -> prost::DecodeError {
        use prost::Message;
        crate::provider::k8s::Pod::decode([0xff_u8].as_slice()).unwrap_err()
    }

    fn group() -> GroupName {
        GroupName::parse("pool-a").unwrap()
    }

    fn claim() -> ClaimName {
        ClaimName::parse("bench-01-1").unwrap()
    }

    fn redis_down() -> ClaimStoreError {
        ClaimStoreError::ReadGroup {
            group: group(),
            source: redis::RedisError::from((redis::ErrorKind::Io, "connection refused")),
        }
    }

    // Every variant (and every request failure) to its code, as SPEC §6.3 maps them.
    #[test]
    fn every_failure_maps_to_its_code() {
        // Long, not complex: one row per variant and per request failure.
        let slot = BenchName::parse("bench-01").unwrap();
        let short = IncreaseRefused::Short {
            free: 0,
            delta: 1,
            busy: 0,
            spent: 0,
            max: 1,
            slots_under_max: None,
        };
        let over = IncreaseRefused::OverMax {
            target: 1,
            delta: 1,
            max: 1,
        };
        let increase = |refused| ProviderError::Increase {
            group: group(),
            refused,
            cooldown: Duration::from_secs(60),
        };
        let request = ProviderError::Request;
        let rows = [
            (ProviderError::EmptyGroupId, Code::InvalidArgument),
            (
                ProviderError::InvalidGroupId(InvalidGroupName("A".into())),
                Code::InvalidArgument,
            ),
            (
                ProviderError::NoSuchGroup {
                    id: "x".into(),
                    groups: vec![group()],
                },
                Code::NotFound,
            ),
            (ProviderError::NotLeader, Code::Unavailable),
            (ProviderError::NotAnIncrease(0), Code::InvalidArgument),
            (ProviderError::NotADecrease(0), Code::InvalidArgument),
            (ProviderError::NoNodes, Code::InvalidArgument),
            (
                ProviderError::NotASlot {
                    name: "n".into(),
                    provider_id: "p".into(),
                },
                Code::NotFound,
            ),
            (
                ProviderError::OtherGroup {
                    name: "n".into(),
                    provider_id: "p".into(),
                    slot: slot.clone(),
                    of: group(),
                    asked: group(),
                },
                Code::InvalidArgument,
            ),
            (increase(over), Code::OutOfRange),
            (increase(short), Code::ResourceExhausted),
            (
                ProviderError::BelowMin {
                    group: group(),
                    below: BelowMin {
                        real: 1,
                        target: 1,
                        min: 1,
                    },
                },
                Code::FailedPrecondition,
            ),
            (
                ProviderError::Decrease {
                    group: group(),
                    refused: DecreaseRefused::Exist {
                        wanted: 1,
                        pending: 0,
                    },
                },
                Code::FailedPrecondition,
            ),
            (
                ProviderError::Overtaken {
                    group: group(),
                    taken: 0,
                    wanted: 1,
                },
                Code::FailedPrecondition,
            ),
            (ProviderError::KeptChanging(slot.clone()), Code::Aborted),
            (
                ProviderError::NotPriced {
                    name: "n".into(),
                    provider_id: "p".into(),
                    label: "l",
                },
                Code::NotFound,
            ),
            (ProviderError::NoPowerDraw(group()), Code::Unimplemented),
            (
                ProviderError::Price(PriceError::Backwards),
                Code::InvalidArgument,
            ),
            (
                ProviderError::PodPrice(PodPriceError::NoPod),
                Code::InvalidArgument,
            ),
            (
                ProviderError::PodPrice(PodPriceError::Undecodable(undecodable())),
                Code::InvalidArgument,
            ),
            (
                ProviderError::PodPrice(PodPriceError::Quantity {
                    pod: "default/p".into(),
                    place: "container \"c\"".into(),
                    resource: "cpu".into(),
                    value: "-1".into(),
                    why: QuantityError::Negative,
                }),
                Code::InvalidArgument,
            ),
            (
                ProviderError::PodPrice(PodPriceError::Time(PriceError::MissingTime)),
                Code::InvalidArgument,
            ),
            (
                ProviderError::PodPrice(PodPriceError::NoPowerDraw),
                Code::Unimplemented,
            ),
            (
                ProviderError::PodPrice(PodPriceError::Unhostable {
                    pod: "default/p".into(),
                    misfits: Vec::new(),
                }),
                Code::NotFound,
            ),
            (ProviderError::NoTemplate(group()), Code::Unimplemented),
            (ProviderError::NoOptions(group()), Code::Unimplemented),
            (ProviderError::Store(redis_down()), Code::Unavailable),
            (ProviderError::Internal("x"), Code::Internal),
            (
                request(RequestError::Store(redis_down())),
                Code::Unavailable,
            ),
            (
                request(RequestError::SlotTaken {
                    slot: slot.clone(),
                    claim: claim(),
                }),
                Code::Aborted,
            ),
            (request(RequestError::Raced(claim())), Code::Aborted),
            (request(RequestError::NoSuchClaim(claim())), Code::NotFound),
            (
                request(RequestError::Ended {
                    claim: claim(),
                    phase: Phase::Completed,
                }),
                Code::FailedPrecondition,
            ),
            (
                request(RequestError::NotMarkable(claim(), NotMarkable::Terminal)),
                Code::FailedPrecondition,
            ),
            (
                request(RequestError::PoweringOff {
                    slot: slot.clone(),
                    since: "t".into(),
                }),
                Code::FailedPrecondition,
            ),
            (
                request(RequestError::Spent {
                    slot,
                    attempts: 3,
                    until: "t".into(),
                }),
                Code::FailedPrecondition,
            ),
        ];
        for (e, code) in rows {
            let what = format!("{e:?}");
            assert_eq!(Status::from(e).code(), code, "{what}");
        }
    }

    #[test]
    fn a_store_failure_says_its_whole_chain_and_the_rest_their_own_words() {
        let status = Status::from(ProviderError::Store(redis_down()));
        assert!(
            status
                .message()
                .starts_with("reading the claims of group pool-a: "),
            "{}",
            status.message()
        );
        assert!(
            status.message().contains("connection refused"),
            "{}",
            status.message()
        );
        let status = Status::from(ProviderError::Increase {
            group: group(),
            refused: IncreaseRefused::Short {
                free: 1,
                delta: 3,
                busy: 2,
                spent: 1,
                max: 5,
                slots_under_max: Some(4),
            },
            cooldown: Duration::from_secs(30 * 60),
        });
        assert_eq!(
            status.message(),
            "group pool-a has 1 free usable slots, 3 asked: 2 still powering off; 1 spent their \
             attempts (they rest for 30m or until `fleet reset-attempts SLOT`); max size 5 is \
             above the group's 4 slots"
        );
        let status = Status::from(ProviderError::Increase {
            group: group(),
            refused: IncreaseRefused::Short {
                free: 0,
                delta: 1,
                busy: 0,
                spent: 0,
                max: 2,
                slots_under_max: None,
            },
            cooldown: Duration::from_secs(60),
        });
        assert_eq!(
            status.message(),
            "group pool-a has 0 free usable slots, 1 asked"
        );
        let status = Status::from(ProviderError::NoSuchGroup {
            id: "nope".into(),
            groups: vec![group(), GroupName::parse("pool-b").unwrap()],
        });
        assert_eq!(
            status.message(),
            "no node group nope: the groups are pool-a, pool-b"
        );
    }
}
