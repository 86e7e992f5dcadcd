//! The seed's constants, configurable per group, and the budgets they add up to (SPEC §3.5).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// The seed's constants, each configurable per group (SPEC §3.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// The bound on one startup or shutdown operation.
    pub job_timeout: Duration,
    /// How often an operation in flight is looked at.
    pub job_monitor_poll_interval: Duration,
    /// The readiness gate's first budget: for the node to register.
    pub uncordon_timeout: Duration,
    /// The readiness gate's second budget: for the node to become usable once registered.
    pub readiness_gate_timeout: Duration,
    /// The longest pause between two looks of the readiness gate.
    pub max_uncordon_retry_interval: Duration,
    /// The slack at the end of the attempt budget.
    pub budget_slack: Duration,
    /// The most consecutive attempts a slot spends, and the most shutdowns a scale-down fires
    /// in one streak.
    pub max_attempts: u32,
    /// How long a ready claim's machine may be observed off before the claim fails MachineGone.
    pub machine_gone_grace: Duration,
    /// How long after its last shutdown attempt a spent streak is spent no longer.
    pub shutdown_attempt_reset_grace: Duration,
    /// How long a terminal claim is kept before it is collected.
    pub ttl_after_finished: Duration,
    /// How long an operation whose outcome was never reported may be waited on before it is
    /// abandoned (the seed's ForceCleanup: its claim fails StuckTransition, SPEC §5.4).
    pub stuck_threshold: Duration,
    /// How long after a slot's last failure its failure streak stops counting (SPEC §3.5): the
    /// way back for a slot that spent its attempts.
    #[serde(default = "default_failed_slot_cooldown")]
    pub failed_slot_cooldown: Duration,
    /// With Kubernetes: how long a slot's machine must have been observed off before fleet
    /// deletes the Node it left behind (SPEC §3.12). `None`: fleet never deletes a Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_stale_node_after: Option<Duration>,
}

/// The failed-slot cooldown of the timings a catalog written before it existed carries.
fn default_failed_slot_cooldown() -> Duration {
    Timings::default().failed_slot_cooldown
}

impl Default for Timings {
    fn default() -> Self {
        let mut t = Timings {
            job_timeout: Duration::from_secs(5 * 60),
            job_monitor_poll_interval: Duration::from_secs(30),
            uncordon_timeout: Duration::from_secs(90),
            readiness_gate_timeout: Duration::from_secs(4 * 60),
            max_uncordon_retry_interval: Duration::from_secs(10),
            budget_slack: Duration::from_secs(60),
            max_attempts: 3,
            machine_gone_grace: Duration::ZERO,
            shutdown_attempt_reset_grace: Duration::from_secs(30 * 60),
            ttl_after_finished: Duration::from_secs(60 * 60),
            stuck_threshold: Duration::from_secs(15 * 60),
            failed_slot_cooldown: Duration::from_secs(30 * 60),
            delete_stale_node_after: None,
        };
        // One boot window, the same horizon as the deadline.
        t.machine_gone_grace = t.attempt_budget();
        t
    }
}

impl Timings {
    /// The time one attempt may take from its request (SPEC §3.5): the operation's whole
    /// timeout, one monitor poll, both readiness budgets in series, one retry pause and the
    /// slack. With the defaults, 12m10s.
    pub fn attempt_budget(&self) -> Duration {
        self.job_timeout
            + self.job_monitor_poll_interval
            + self.uncordon_timeout
            + self.readiness_gate_timeout
            + self.max_uncordon_retry_interval
            + self.budget_slack
    }

    /// The deadline of a claim requested at `requested_at`: the budget, floored by the group's
    /// max node provision time (cluster-autoscaler's own scale-up deadline).
    pub fn deadline_at(
        &self,
        requested_at: DateTime<Utc>,
        max_node_provision_time: Option<Duration>,
    ) -> DateTime<Utc> {
        let window = self
            .attempt_budget()
            .max(max_node_provision_time.unwrap_or(Duration::ZERO));
        add(requested_at, window)
    }
}

/// `t + d`, saturating at the end of time rather than overflowing.
pub fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
