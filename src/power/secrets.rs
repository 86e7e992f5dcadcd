//! The secrets fleet took out of its environment at start (SPEC §7.2 S6): the values of the
//! variables a driver reads its BMC's password from (`password_env`), held in memory, where an
//! operation cannot read them, rather than in an environment it could (`/proc/PID/environ`).
//! `cli::secrets` moves them here before any thread starts; a driver's wrapper is given its own
//! one with its job and holds it here too. A name not held is read from the environment, as a
//! variable set after start, or by a test, is.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::action::Secret;

fn held() -> &'static Mutex<HashMap<String, Secret>> {
    static HELD: OnceLock<Mutex<HashMap<String, Secret>>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
}

/// Holds `value` as the secret of the variable `name`.
pub fn hold(name: &str, value: Secret) {
    held()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.to_owned(), value);
}

/// The secret of the variable `name`: held, or else the environment's.
pub fn get(name: &str) -> Result<String, std::env::VarError> {
    let held = held()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(name)
        .map(|p| p.expose().to_owned());
    match held {
        Some(value) => Ok(value),
        None => std::env::var(name),
    }
}

/// The secret of `name` as held, for a wrapper's job: `None` when it is not held (then the
/// wrapper reads its own environment, which a variable not held is still in).
pub fn held_value(name: &str) -> Option<Secret> {
    held()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(name)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_secret_is_read_before_the_environment_and_an_unheld_one_from_it() {
        let path = std::env::var("PATH").unwrap();
        assert_eq!(get("PATH").unwrap(), path);
        hold("FLEET_TEST_HELD_SECRET", Secret::new("s3cret"));
        assert_eq!(get("FLEET_TEST_HELD_SECRET").unwrap(), "s3cret");
        assert_eq!(
            held_value("FLEET_TEST_HELD_SECRET"),
            Some(Secret::new("s3cret"))
        );
        assert_eq!(held_value("PATH"), None);
    }
}
