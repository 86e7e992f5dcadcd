//! The machine's observed power (SPEC §3.1): on or off, as the presence decision shows it.
//!
//! A column of the input law that the claim rules read too (a ready claim's machine watched off,
//! the claim controller's judgment), so it is its own module below both `law` and `claim`. Pure:
//! no I/O, no clock.

use serde::Serialize;

use super::state::State;

/// The machine's observed power. Here the observation is the bench's presence: UP or HELD is a
/// machine that is on, DOWN one that is off (SPEC §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Power {
    On,
    Off,
}

impl Power {
    pub const ALL: [Power; 2] = [Power::On, Power::Off];

    pub fn of(presence: State) -> Power {
        match presence {
            State::Up | State::Held => Power::On,
            State::Down => Power::Off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_is_the_observed_power() {
        assert_eq!(
            State::ALL.map(Power::of),
            [Power::On, Power::On, Power::Off]
        );
    }
}
