//! The configuration a call answers from: the latest the reload published, with the catalog
//! made from it. The catalog is made once per configuration, the first time a change needs it
//! (IncreaseSize creates claims from it), never once per call.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;

use crate::config::Config;
use crate::store::catalog::Catalog;

/// One configuration and what is made from it.
pub(super) struct Settings {
    pub config: Arc<Config>,
    catalog: OnceLock<Catalog>,
}

impl Settings {
    fn of(config: Arc<Config>) -> Self {
        Settings {
            config,
            catalog: OnceLock::new(),
        }
    }

    /// The catalog of this configuration: its groups and slots as claims are made from them.
    pub fn catalog(&self) -> &Catalog {
        self.catalog.get_or_init(|| Catalog::of(&self.config))
    }
}

/// The configuration as the reload publishes it, and the settings of the latest one seen.
pub(super) struct Current {
    config: watch::Receiver<Arc<Config>>,
    latest: Mutex<Arc<Settings>>,
}

impl Current {
    pub fn new(config: watch::Receiver<Arc<Config>>) -> Self {
        let latest = Arc::new(Settings::of(config.borrow().clone()));
        Current {
            config,
            latest: Mutex::new(latest),
        }
    }

    /// The settings of the configuration published now; made again only when it changed.
    pub fn get(&self) -> Arc<Settings> {
        let config = self.config.borrow().clone();
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if !Arc::ptr_eq(&latest.config, &config) {
            *latest = Arc::new(Settings::of(config));
        }
        latest.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const YAML: &str = "groups:\n  - name: pool-a\n    min_size: 0\n    max_size: 1\n    \
         startup: { command: [\"true\"] }\n    shutdown: { command: [\"true\"] }\nslots:\n  \
         - { name: bench-01, group: pool-a }\n";

    #[test]
    fn the_catalog_is_made_once_per_configuration() {
        let config = Arc::new(crate::config::parse(YAML, Path::new("t.yaml")).unwrap());
        let (tx, rx) = watch::channel(config.clone());
        let current = Current::new(rx);
        let first = current.get();
        let catalog: *const Catalog = first.catalog();
        assert_eq!(first.catalog().groups.len(), 1);
        let again = current.get();
        assert!(Arc::ptr_eq(&first, &again), "the same configuration");
        assert!(std::ptr::eq(again.catalog(), catalog), "its catalog kept");
        // A reload publishes a new configuration (even an equal one): new settings.
        tx.send_replace(Arc::new((*config).clone()));
        let reloaded = current.get();
        assert!(!Arc::ptr_eq(&first, &reloaded));
        assert_eq!(reloaded.catalog(), first.catalog());
    }
}
