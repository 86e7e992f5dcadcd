//! The configuration file of `fleet serve`: the groups fleet powers machines on and off for, and
//! the slots (one machine each) that belong to them.
//!
//! Reading is two steps. serde reads the YAML into raw structs that refuse unknown keys (a typo
//! must not silently become a default); then `validate` turns them into typed values and collects
//! every problem with its place, so an operator fixes the file in one go rather than one error per
//! restart. The file's field names are pinned: operators' files must stay valid, so a field may be
//! added (optional) but never renamed or removed.
//!
//! This module reads one file and decides nothing: it runs no operation, reads no environment, and
//! touches neither Redis nor Kubernetes. It never panics on any input.
//!
//! A slot's power driver (SPEC §4.10) is `power`'s: each driver's fields, their checks and its
//! typed configuration live beside its code (`src/power/<name>/config.rs`), and this module
//! hands it the file's entries and collects its problems.
//!
//! - `model`: the validated configuration the rest of fleet uses (`Config`, `Group`, `Slot`,
//!   `Operation` and what it runs, `Template`) and the questions asked of it.
//! - `raw`: the file's schema as serde reads it.
//! - `validate`: raw to typed, every problem collected with its place.
//! - `example`: a valid file that documents the format.

mod example;
mod model;
mod raw;
mod validate;

use std::io;
use std::path::{Path, PathBuf};

pub use crate::units::{InvalidQuantity, Quantity};
pub use example::example;
pub use model::{
    AutoscalingOptions, Config, DEFAULT_READINESS_TAINT, DeviceAttribute, Devices, Gpu, Group,
    JobTemplate, MAX_DURATION, Operation, PowerDraw, Run, Slot, Template, Toleration,
    default_provider_id,
};
pub use validate::Problem;

use raw::RawConfig;
use validate::validate;

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The I/O error is said in the message, once (a field named `source` would repeat it).
    #[error(
        "cannot read the configuration file {}: {error}; give a readable YAML file with --config (FLEET_CONFIG)",
        path.display()
    )]
    Read { path: PathBuf, error: io::Error },
    /// Past the bound of a configuration file (`file::CONFIG`, SPEC §7 S10); the message names
    /// the file, the bound and what to do.
    #[error(transparent)]
    TooLarge(fleet_redis::file::ReadError),
    #[error(
        "{}: the configuration is not YAML of the expected shape: {message}",
        path.display()
    )]
    Parse { path: PathBuf, message: String },
    #[error("{}", render_problems(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

fn render_problems(path: &Path, problems: &[Problem]) -> String {
    let path = path.display();
    let count = match problems.len() {
        1 => "1 problem".to_owned(),
        n => format!("{n} problems"),
    };
    let mut out = format!("{path}: invalid configuration, {count}:");
    for problem in problems {
        out.push_str(&format!("\n{path}: {problem}"));
    }
    out
}

/// Reads and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    use fleet_redis::file::{self, ReadError};
    // Read to a bound: a path that names a file without end costs the bound, not the memory.
    let bytes = file::read(path, file::CONFIG).map_err(|e| match e {
        ReadError::Io(error) => ConfigError::Read {
            path: path.to_owned(),
            error,
        },
        too_large @ ReadError::TooLarge { .. } => ConfigError::TooLarge(too_large),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: format!(
            "the file is not UTF-8 text (invalid byte at offset {}); a configuration file is \
             UTF-8 YAML",
            e.utf8_error().valid_up_to()
        ),
    })?;
    parse(&text, path)
}

/// Parses and validates configuration text; `path` is used only in messages.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    // serde-saphyr's default budget (250 000 nodes) refuses a file of 50 000 slots; a slot is
    // five to twenty nodes, so this admits 200 000 slots and more (fleet is sized for 100 000)
    // while still bounding a hostile file. The depth limit, which protects the stack, stays.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: 4_000_000,
            max_events: 10_000_000,
        },
    };
    let raw: RawConfig =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            // The one-line form ("... at line 3, column 5"): the snippet form names `<input>`, not
            // the file, and spreads one error over several log lines.
            message: e.without_snippet().to_string(),
        })?;
    validate(raw).map_err(|problems| ConfigError::Invalid {
        path: path.to_owned(),
        problems,
    })
}

#[cfg(test)]
mod tests;
