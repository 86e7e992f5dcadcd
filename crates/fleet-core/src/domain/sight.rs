//! What the controller can see, and when it must not act on it (SPEC §5.2, §5.3): blindness and
//! its grace, the mass-vanishing rule, and the windows a wiped store opens. Pure: the controller
//! passes what it observed and `now`, and acts on the verdict.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::claim::add;

/// Why, and until when, the controller takes no power action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blindness {
    /// `None` while it cannot read presence at all: it ends a grace after sight returns.
    pub until: Option<DateTime<Utc>>,
    pub why: String,
}

/// How the controller saw the store since its last pass that read presence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sight {
    /// Every read succeeded.
    Clear,
    /// A read or a lease call failed; the grace starts at the next pass that reads presence.
    Lost,
    /// Sight returned this long ago, while following: the grace runs from then.
    Back { ago: Duration },
}

/// What is left of the grace that follows an outage once presence reads again: the whole grace
/// after a loss, what remains of it when sight returned earlier, nothing when it was never lost.
pub fn grace_left(sight: Sight, grace: Duration) -> Duration {
    match sight {
        Sight::Clear => Duration::ZERO,
        Sight::Lost => grace,
        Sight::Back { ago } => grace.saturating_sub(ago),
    }
}

/// The blind window after another reason to be blind: the later end, with its reason, wins.
pub fn later(
    current: Option<(DateTime<Utc>, String)>,
    until: DateTime<Utc>,
    why: &str,
) -> Option<(DateTime<Utc>, String)> {
    match current {
        Some((u, w)) if u >= until => Some((u, w)),
        _ => Some((until, why.to_owned())),
    }
}

/// The windows a wiped store opens (its wipe record, server ms): blind until the first end, then
/// adopting machines found on until the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wipe {
    pub blind_until_ms: i64,
    pub adopt_until_ms: i64,
}

impl Wipe {
    /// Whether machines found on with no claim are adopted at `now_ms` rather than powered off.
    pub fn adopting(&self, now_ms: i64) -> bool {
        now_ms < self.adopt_until_ms
    }

    /// The end of the blind window, while it is still ahead of `now_ms`.
    pub fn blind_until(&self, now_ms: i64) -> Option<DateTime<Utc>> {
        (now_ms < self.blind_until_ms)
            .then(|| DateTime::from_timestamp_millis(self.blind_until_ms))
            .flatten()
    }
}

/// One slot as the mass-vanishing rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// On at this controller's last observation (its own, never the report it publishes).
    pub was_on: bool,
    /// Some live claim wants the machine on.
    pub wanted: bool,
    /// Fleet is powering it off (a shutdown in flight, or not yet seen to take effect).
    pub powering_off: bool,
    /// It reads DOWN (or is absent) now.
    pub now_off: bool,
}

/// How many wanted machines vanished, of how many that were on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vanished {
    pub vanished: usize,
    pub on: usize,
}

/// The mass-vanishing rule (SPEC §5.2): blind when at least `min` machines, and at least `ratio`
/// of those that were on, vanished in one pass. A whole fleet going dark at once is far more
/// likely a fault of the observation than of the machines. Only machines some claim wants on and
/// fleet is not powering off count: a scale-down of the whole group must not blind.
pub fn mass_vanishing(
    slots: impl IntoIterator<Item = Seen>,
    min: usize,
    ratio: f64,
) -> Option<Vanished> {
    let mut v = Vanished { vanished: 0, on: 0 };
    for s in slots {
        if !s.was_on || !s.wanted || s.powering_off {
            continue;
        }
        v.on += 1;
        if s.now_off {
            v.vanished += 1;
        }
    }
    (v.vanished >= min && (v.vanished as f64) >= ratio * v.on as f64).then_some(v)
}

/// The controller's verdict for one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// No power action this pass.
    pub blind: bool,
    /// The blind window still ahead (`None` once it passed: it is forgotten).
    pub window: Option<(DateTime<Utc>, String)>,
    /// What the views are told.
    pub blindness: Option<Blindness>,
}

/// Blind when presence cannot be read, or within the blind window (SPEC §5.2).
pub fn verdict(
    readable: bool,
    window: Option<(DateTime<Utc>, String)>,
    now: DateTime<Utc>,
) -> Verdict {
    let window = window.filter(|(until, _)| now < *until);
    let blindness = match (&window, readable) {
        (_, false) => Some(Blindness {
            until: None,
            why: "presence cannot be read: a grace follows once it can".to_owned(),
        }),
        (Some((until, why)), true) => Some(Blindness {
            until: Some(*until),
            why: why.clone(),
        }),
        (None, true) => None,
    };
    Verdict {
        blind: !readable || window.is_some(),
        window,
        blindness,
    }
}

/// The end of the grace that starts at `now`.
pub fn grace_end(now: DateTime<Utc>, left: Duration) -> DateTime<Utc> {
    add(now, left)
}

/// How the controller sees the Kubernetes Nodes of bound slots, across passes (SPEC §5.2). A
/// failed read is blindness for the bound slots, not unusability, and sight that returns is
/// followed by the grace, as for Redis: a Node that changed during the outage is read whole
/// again before anything is judged on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeSight {
    /// The last read succeeded and no grace runs.
    #[default]
    Clear,
    /// The last read failed.
    Lost,
    /// Sight returned; bound slots stay blind until then.
    Grace { until: DateTime<Utc> },
}

impl NodeSight {
    /// The sight after this pass's read of the Nodes (`read`: it succeeded), and whether the
    /// bound slots are blind this pass.
    pub fn after(self, read: bool, now: DateTime<Utc>, grace: Duration) -> (NodeSight, bool) {
        if !read {
            return (NodeSight::Lost, true);
        }
        let until = match self {
            NodeSight::Clear => return (NodeSight::Clear, false),
            NodeSight::Lost => add(now, grace),
            NodeSight::Grace { until } => until,
        };
        if now < until {
            (NodeSight::Grace { until }, true)
        } else {
            (NodeSight::Clear, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every state the Nodes' sight can be in, with a read that fails or succeeds, before, at and
    // after the grace's end.
    #[test]
    fn the_nodes_sight_over_every_state_and_read() {
        let grace = Duration::from_secs(10);
        let until = t(110);
        for (was, read, now, want) in [
            (NodeSight::Clear, false, t(100), (NodeSight::Lost, true)),
            (NodeSight::Lost, false, t(100), (NodeSight::Lost, true)),
            (
                NodeSight::Grace { until },
                false,
                t(105),
                (NodeSight::Lost, true),
            ),
            (NodeSight::Clear, true, t(100), (NodeSight::Clear, false)),
            (
                NodeSight::Lost,
                true,
                t(100),
                (NodeSight::Grace { until }, true),
            ),
            (
                NodeSight::Grace { until },
                true,
                t(109),
                (NodeSight::Grace { until }, true),
            ),
            (
                NodeSight::Grace { until },
                true,
                t(110),
                (NodeSight::Clear, false),
            ),
            (
                NodeSight::Grace { until },
                true,
                t(111),
                (NodeSight::Clear, false),
            ),
        ] {
            assert_eq!(
                was.after(read, now, grace),
                want,
                "{was:?} read={read} at {now}"
            );
        }
        // No grace: sight that returns is clear at once.
        assert_eq!(
            NodeSight::Lost.after(true, t(100), Duration::ZERO),
            (NodeSight::Clear, false)
        );
        assert_eq!(NodeSight::default(), NodeSight::Clear);
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn the_grace_after_an_outage_is_whole_after_a_loss_and_what_is_left_after_a_return() {
        let grace = Duration::from_secs(40);
        assert_eq!(grace_left(Sight::Clear, grace), Duration::ZERO);
        assert_eq!(grace_left(Sight::Lost, grace), grace);
        for (ago, left) in [(0, 40), (1, 39), (39, 1), (40, 0), (41, 0), (3600, 0)] {
            let sight = Sight::Back {
                ago: Duration::from_secs(ago),
            };
            assert_eq!(grace_left(sight, grace), Duration::from_secs(left), "{ago}");
        }
    }

    #[test]
    fn the_later_blind_window_wins_with_its_reason() {
        let a = later(None, t(10), "a");
        assert_eq!(a, Some((t(10), "a".to_owned())));
        assert_eq!(
            later(a.clone(), t(5), "b"),
            a,
            "an earlier end changes nothing"
        );
        assert_eq!(
            later(a.clone(), t(10), "b"),
            a,
            "an equal end keeps the first reason"
        );
        assert_eq!(later(a, t(11), "b"), Some((t(11), "b".to_owned())));
    }

    #[test]
    fn a_wipe_is_blind_then_adopting_then_neither() {
        let w = Wipe {
            blind_until_ms: 10_000,
            adopt_until_ms: 60_000,
        };
        for (now, blind, adopting) in [
            (0, true, true),
            (9_999, true, true),
            (10_000, false, true),
            (59_999, false, true),
            (60_000, false, false),
        ] {
            assert_eq!(w.blind_until(now).is_some(), blind, "{now}");
            assert_eq!(w.adopting(now), adopting, "{now}");
        }
        assert_eq!(w.blind_until(0), DateTime::from_timestamp_millis(10_000));
    }

    // The rule over every slot that can be seen (16 kinds), for fleets of up to three slots
    // (16³ fleets), against its definition stated plainly.
    #[test]
    fn mass_vanishing_over_every_fleet_of_up_to_three_slots() {
        let kinds: Vec<Seen> = (0..16u8)
            .map(|b| Seen {
                was_on: b & 1 != 0,
                wanted: b & 2 != 0,
                powering_off: b & 4 != 0,
                now_off: b & 8 != 0,
            })
            .collect();
        let mut level: Vec<Vec<Seen>> = vec![vec![]];
        let mut fleets = level.clone();
        for _ in 0..3 {
            level = level
                .iter()
                .flat_map(|f| {
                    kinds.iter().map(move |k| {
                        let mut g = f.clone();
                        g.push(*k);
                        g
                    })
                })
                .collect();
            fleets.extend(level.iter().cloned());
        }
        assert_eq!(fleets.len(), 1 + 16 + 256 + 4096);
        for fleet in fleets {
            let counted: Vec<&Seen> = fleet
                .iter()
                .filter(|s| s.was_on && s.wanted && !s.powering_off)
                .collect();
            let on = counted.len();
            let vanished = counted.iter().filter(|s| s.now_off).count();
            for (min, ratio) in [(2, 0.5), (1, 1.0), (3, 0.0)] {
                let want = (vanished >= min && vanished as f64 >= ratio * on as f64)
                    .then_some(Vanished { vanished, on });
                assert_eq!(
                    mass_vanishing(fleet.iter().copied(), min, ratio),
                    want,
                    "{fleet:?} min {min} ratio {ratio}"
                );
            }
        }
    }

    #[test]
    fn a_scale_down_of_the_whole_group_does_not_count() {
        let off_by_fleet = Seen {
            was_on: true,
            wanted: false,
            powering_off: true,
            now_off: true,
        };
        assert_eq!(mass_vanishing([off_by_fleet; 4], 2, 0.5), None);
        let wanted = Seen {
            wanted: true,
            powering_off: false,
            ..off_by_fleet
        };
        assert_eq!(
            mass_vanishing([wanted; 4], 2, 0.5),
            Some(Vanished { vanished: 4, on: 4 })
        );
    }

    #[test]
    fn the_verdict_over_readability_and_the_window() {
        let w = Some((t(10), "why".to_owned()));
        for (readable, window, now, blind, kept, until) in [
            (true, None, t(0), false, false, None),
            (true, w.clone(), t(9), true, true, Some(Some(t(10)))),
            (true, w.clone(), t(10), false, false, None),
            (false, None, t(0), true, false, Some(None)),
            (false, w.clone(), t(9), true, true, Some(None)),
            (false, w.clone(), t(11), true, false, Some(None)),
        ] {
            let v = verdict(readable, window, now);
            assert_eq!(v.blind, blind, "{readable} {now}");
            assert_eq!(v.window.is_some(), kept, "{readable} {now}");
            assert_eq!(
                v.blindness.as_ref().map(|b| b.until),
                until,
                "{readable} {now}"
            );
        }
    }
}
