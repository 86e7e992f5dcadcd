//! The configuration as `fleet serve` takes it (SPEC §4.1): what the file cannot show checked at
//! start (the drivers' passwords, the Kubernetes-only settings), the doubts a valid file raises,
//! and the reload when the file changes or on SIGHUP. A bad version is refused with its problems
//! logged, and the running one is kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{self, Config, ConfigError, Problem};
use crate::store::catalog::Catalog;
use crate::store::keys::Keys;
use crate::telemetry::{Health, Metrics, Reload, ResultLabel};
use fleet_redis::conn::Conn;

use super::Error;

/// A configuration that cannot be used is the caller's input: exit 2, whether it cannot be read
/// or is not valid.
pub(super) fn config_error(e: ConfigError) -> Error {
    Error::Usage(e.into())
}

/// What the drivers need that the file cannot show (SPEC §4.10): every password where the file
/// says it is, and every target one its driver takes. Refused like the file's own problems, at
/// start (exit 2) and on reload (the running configuration kept), one problem per slot at most,
/// at `slots (<name>).driver`; no password is shown.
pub(super) fn check_drivers(path: &Path, config: &Config) -> Result<(), ConfigError> {
    let problems: Vec<Problem> = (config.slots.values())
        .filter_map(|slot| {
            let message = crate::power::drive::check(slot.driver.as_deref()?).err()?;
            Some(Problem {
                place: format!("slots ({}).driver", slot.name),
                message,
            })
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            path: path.to_owned(),
            problems,
        })
    }
}

/// A configuration that asks for what only Kubernetes can do, without `--kubernetes`, is the
/// caller's input (exit 2), naming the flag and every such setting.
pub(super) fn check_kubernetes(config: &Config, kubernetes: bool) -> Result<(), Error> {
    let settings = config.kubernetes_settings();
    if kubernetes || settings.is_empty() {
        return Ok(());
    }
    Err(Error::usage(kubernetes_refusal(&settings)))
}

fn kubernetes_refusal(settings: &[String]) -> String {
    format!(
        "the configuration uses Kubernetes ({}) but fleet serve runs without --kubernetes \
         (FLEET_KUBERNETES=true): pass --kubernetes, or remove those settings",
        settings.join(", ")
    )
}

/// Logs what in a valid configuration is likely a mistake ([`Config::doubts`]).
pub(super) fn warn_about(config: &Config) {
    for doubt in config.doubts() {
        warn!("{doubt}");
    }
}

/// Says what a reload takes away (SPEC §4.1): a group or slot that left the configuration ends
/// its claims SlotDeleted. A rename is a removal plus an addition: the old name's claims end, and
/// the new name starts with none.
fn log_departures(old: &Config, new: &Config) {
    for group in old.groups.keys().filter(|g| !new.groups.contains_key(*g)) {
        warn!(
            %group,
            "group left the configuration: its claims end SlotDeleted (a renamed group is a removal plus an addition: the new name starts with no claims, and a machine no claim wants is powered off)"
        );
    }
    for slot in old.slots.values() {
        match new.slots.get(&slot.name) {
            None => {
                warn!(slot = %slot.name, group = %slot.group, "slot left the configuration: its claims end SlotDeleted")
            }
            Some(moved) if moved.group != slot.group => warn!(
                slot = %slot.name,
                from = %slot.group,
                to = %moved.group,
                "slot moved to another group: its claims in the old group end SlotDeleted"
            ),
            Some(_) => {}
        }
    }
}

/// The file's identity: a change of either is a new version to read.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The SIGHUP handler, installed before `fleet serve` says it started: until a handler is in
/// place a SIGHUP ends the process (its default action), which a reload asked for at once after
/// the start line did (found by `tests/process/serve.rs` under load).
pub(super) fn hangups() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

/// Re-reads the configuration when the file changes or on SIGHUP (`hup`, from [`hangups`]); a
/// bad version is refused and the running one kept.
pub(super) async fn reload(
    (path, mut hup): (PathBuf, Option<tokio::signal::unix::Signal>),
    kubernetes: bool,
    tx: watch::Sender<Arc<Config>>,
    mut conn: Conn,
    keys: Keys,
    (metrics, health): (Arc<Metrics>, Arc<Health>),
    shutdown: CancellationToken,
) {
    let counted = |result: Reload| {
        metrics.reloads.get_or_create(&ResultLabel { result }).inc();
    };
    let mut seen = stamp(&path);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let asked = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now = stamp(&path);
        if !asked && now == seen {
            continue;
        }
        seen = now;
        let loaded = config::load(&path)
            .and_then(|config| check_drivers(&path, &config).map(|()| config))
            .map_err(|e| fleet_redis::connect::chain(&e));
        let loaded = loaded.and_then(|config| {
            let settings = config.kubernetes_settings();
            if kubernetes || settings.is_empty() {
                Ok(config)
            } else {
                Err(kubernetes_refusal(&settings))
            }
        });
        match loaded {
            Ok(config) => {
                if let Err(e) = Catalog::of(&config).publish(&mut conn, &keys).await {
                    warn!(
                        error = fleet_redis::connect::chain(&e),
                        "publishing the new catalog failed; views show the old one"
                    );
                }
                info!(config = %path.display(), groups = config.groups.len(), slots = config.slots.len(), "configuration reloaded");
                log_departures(&tx.borrow(), &config);
                warn_about(&config);
                counted(Reload::applied);
                health.reload(None);
                let _ = tx.send(Arc::new(config));
            }
            Err(why) => {
                error!(
                    config = %path.display(),
                    error = why,
                    "new configuration refused; the running one is kept"
                );
                counted(Reload::refused);
                health.reload(Some(why));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_at_start_names_each_slot_whose_password_is_missing_and_passes_the_rest() {
        let text = r#"
groups:
  - name: g
    max_size: 3
slots:
  - { name: mini, group: g, driver: { type: wol, mac: "52:54:00:12:34:56", off: agent } }
  - { name: r1, group: g, driver: { type: redfish, endpoint: "https://127.0.0.1:1", username: u, password_env: PATH, insecure: true } }
  - { name: r2, group: g, driver: { type: redfish, endpoint: "https://127.0.0.1:1", username: u, password_env: TEST_SURELY_UNSET_BMC_PASS, insecure: true } }
"#;
        let path = Path::new("fleet.yaml");
        let config = config::parse(text, path).unwrap();
        let Err(ConfigError::Invalid { problems, .. }) = check_drivers(path, &config) else {
            panic!("r2's password is missing")
        };
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "slots (r2).driver: https://127.0.0.1:1: password_env TEST_SURELY_UNSET_BMC_PASS: \
                 the variable is not set in fleet serve's environment; set it where fleet serve \
                 starts (a systemd EnvironmentFile, say)"
            ]
        );
    }
}
