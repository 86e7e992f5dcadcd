//! Validation of what a machine draws and costs (SPEC §4.12): a group's `template.power`, and a
//! slot's `power` whose fields override it. Every problem is collected with its place. Pure.

use crate::config::model::PowerDraw;
use crate::config::raw::{RawPower, RawSlotPower};

use super::Problems;

/// A group's `template.power`; built even with problems (in `problems`).
pub(super) fn power_draw(power: &RawPower, place: &str, problems: &mut Problems) -> PowerDraw {
    let draw = PowerDraw {
        watts: power.watts,
        standby_watts: power.standby_watts.unwrap_or(0.0),
        price_per_kwh: power.price_per_kwh,
    };
    check(draw, &format!("{place}.power"), problems);
    draw
}

/// A slot's draw: its group's with the slot's fields over it. A slot whose group declares none
/// must give `watts` and `price_per_kwh` itself. `None` when neither declares a draw, or on a
/// problem (in `problems`).
pub(super) fn slot_power(
    group: Option<PowerDraw>,
    slot: Option<&RawSlotPower>,
    place: &str,
    problems: &mut Problems,
) -> Option<PowerDraw> {
    let Some(raw) = slot else {
        return group;
    };
    let place = format!("{place}.power");
    let (watts, price_per_kwh) = match group {
        Some(g) => (
            raw.watts.unwrap_or(g.watts),
            raw.price_per_kwh.unwrap_or(g.price_per_kwh),
        ),
        None => {
            let lacking: Vec<&str> = [
                ("watts", raw.watts.is_none()),
                ("price_per_kwh", raw.price_per_kwh.is_none()),
            ]
            .into_iter()
            .filter_map(|(f, absent)| absent.then_some(f))
            .collect();
            if !lacking.is_empty() {
                problems.push(
                    place,
                    format!(
                        "the slot's group declares no template.power, so the slot's power needs {} \
                         (like {{ watts: 350, price_per_kwh: 0.25 }})",
                        lacking.join(" and ")
                    ),
                );
                return None;
            }
            (raw.watts.unwrap_or(0.0), raw.price_per_kwh.unwrap_or(0.0))
        }
    };
    let draw = PowerDraw {
        watts,
        standby_watts: raw
            .standby_watts
            .or(group.map(|g| g.standby_watts))
            .unwrap_or(0.0),
        price_per_kwh,
    };
    check(draw, &place, problems).then_some(draw)
}

/// Whether `draw` is valid; each problem is pushed with its field's place.
fn check(draw: PowerDraw, place: &str, problems: &mut Problems) -> bool {
    let before = problems.len();
    if !(draw.watts.is_finite() && draw.watts > 0.0) {
        problems.push(
            format!("{place}.watts"),
            format!(
                "invalid watts {}: a finite number above zero, like 350",
                draw.watts
            ),
        );
    }
    if !(draw.standby_watts.is_finite() && draw.standby_watts >= 0.0) {
        problems.push(
            format!("{place}.standby_watts"),
            format!(
                "invalid standby_watts {}: a finite number, zero or more, like 5 (the draw when \
                 off)",
                draw.standby_watts
            ),
        );
    } else if draw.watts.is_finite() && draw.standby_watts > draw.watts {
        problems.push(
            format!("{place}.standby_watts"),
            format!(
                "standby_watts {} is more than watts {}: the draw when off is at most the draw \
                 when on",
                draw.standby_watts, draw.watts
            ),
        );
    }
    if !(draw.price_per_kwh.is_finite() && draw.price_per_kwh >= 0.0) {
        problems.push(
            format!("{place}.price_per_kwh"),
            format!(
                "invalid price_per_kwh {}: a finite number, zero or more, like 0.25",
                draw.price_per_kwh
            ),
        );
    }
    problems.len() == before
}
