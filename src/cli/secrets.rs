//! What a `fleet` process keeps to itself (SPEC §7.2 S6). Every operation `fleet serve` runs is a
//! program of the operator's choosing, under the same user, so it could read fleet's memory
//! (`/proc/PID/mem`) and environment (`/proc/PID/environ`, `ps e`), the Redis URL with its
//! password among them. So, before any other thread exists:
//!
//! - the process is made not dumpable (`PR_SET_DUMPABLE` 0): its `/proc/PID` files and ptrace are
//!   then root's alone, and a program under the same user reads neither its memory nor its
//!   environment; a program it starts is dumpable again, its own business;
//! - the variables that hold a secret it needs after start (`FLEET_REDIS_URL`, and for `fleet
//!   serve` every `password_env` of its configuration) leave its environment: a driver's value is
//!   held in memory (`power::secrets`), and the bytes the kernel shows as the environment are
//!   overwritten with `*`, so even a reader that may (root) sees none of them.

use crate::power::{Secret, secrets};

use super::Cli;

/// The variable that may hold the Redis URL's password (`--redis`).
const REDIS_URL: &str = "FLEET_REDIS_URL";

/// Keeps this process's secrets to itself. MUST run before any other thread exists: it changes
/// the environment.
pub fn keep(cli: &Cli) {
    keep_with(&driver_secrets(cli));
}

/// `keep` for a process whose drivers read their passwords from the variables `drivers` (none
/// but `fleet serve`'s do).
pub fn keep_with(drivers: &[String]) {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!(
            "warning: this process stays dumpable ({e}): a program under the same user may read \
             its memory"
        );
    }
    for name in drivers {
        if let Ok(value) = std::env::var(name) {
            secrets::hold(name, Secret::new(value));
        }
    }
    for name in std::iter::once(REDIS_URL).chain(drivers.iter().map(String::as_str)) {
        take(name);
    }
}

/// The variables `fleet serve`'s drivers read their passwords from (`Config::secret_env`); none
/// for another verb, or a configuration that cannot be read (the verb says why, later).
fn driver_secrets(cli: &Cli) -> Vec<String> {
    #[cfg(feature = "serve")]
    if let super::Command::Serve(args) = &cli.command
        && let Ok(config) = crate::config::load(&args.config)
    {
        return config.secret_env();
    }
    let _ = cli;
    Vec::new()
}

/// Takes the variable `name` out of the environment: its bytes where the kernel keeps the
/// process's first environment overwritten, then the variable removed.
fn take(name: &str) {
    if std::env::var_os(name).is_none() {
        return;
    }
    #[cfg(target_os = "linux")]
    overwrite_initial(name);
    // SAFETY: `keep`'s caller runs it before any other thread exists, so nothing reads the
    // environment while it changes.
    unsafe { std::env::remove_var(name) };
}

/// Overwrites with `*` the value of `name` in the process's first environment, the block
/// `/proc/self/stat` places between `env_start` and `env_end` (fields 50 and 51), which is what
/// `/proc/PID/environ` shows whatever the environment became since.
#[cfg(target_os = "linux")]
fn overwrite_initial(name: &str) {
    let Some((start, end)) = initial_environment() else {
        return;
    };
    let Some(len) = end.checked_sub(start).filter(|l| *l > 0) else {
        return;
    };
    // SAFETY: [start, end) is this process's first environment, which the kernel placed on its
    // stack, mapped readable and writable for the process's life. No Rust reference points into
    // it (the standard library reaches it through libc's raw pointers), and no other thread
    // exists to read it while it changes (`keep`).
    let block = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    blank(block, name);
}

/// `env_start` and `env_end` of `/proc/self/stat`.
#[cfg(target_os = "linux")]
fn initial_environment() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) start at the third.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let start = fields.nth(50 - 3)?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    Some((start, end))
}

/// Overwrites with `*` the value of every `name=value` among the NUL-separated entries of
/// `block`.
fn blank(block: &mut [u8], name: &str) {
    let prefix = format!("{name}=");
    for entry in block.split_mut(|b| *b == 0) {
        if entry.starts_with(prefix.as_bytes()) {
            entry[prefix.len()..].fill(b'*');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variables_value_is_overwritten_and_nothing_else() {
        let mut block =
            b"PATH=/bin\0FLEET_REDIS_URL=redis://u:pw@h/\0XFLEET_REDIS_URL=keep\0FLEET_REDIS_URL=\0"
                .to_vec();
        blank(&mut block, REDIS_URL);
        assert_eq!(
            block,
            b"PATH=/bin\0FLEET_REDIS_URL=***************\0XFLEET_REDIS_URL=keep\0FLEET_REDIS_URL=\0"
        );
    }

    #[test]
    fn the_initial_environment_is_read_from_this_process() {
        let (start, end) = initial_environment().expect("env_start and env_end");
        assert!(end > start);
    }
}
