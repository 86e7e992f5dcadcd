//! What the benchmarks share: their command line, their quantiles, and timing a call. Each
//! benchmark prints its figures and the ratio to its anchor (docs/measurements.md); they read
//! their quantiles one way, nearest-rank, so a p99 means the same in every one.

// Each benchmark is a binary of its own and uses part of this.
#![allow(dead_code)]

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The benchmark's command line (what follows `cargo bench --bench NAME --`).
pub struct Args(Vec<String>);

impl Args {
    pub fn new() -> Args {
        Args(std::env::args().collect())
    }

    /// Whether `name` (`--quick`) was given.
    pub fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }

    /// The value after `name` (`--slots 100000`), when given and readable as a `T`.
    pub fn value<T: FromStr>(&self, name: &str) -> Option<T> {
        let at = self.0.iter().position(|a| a == name)?;
        self.0.get(at + 1)?.parse().ok()
    }

    /// `--quick`: the short form of the benchmark.
    pub fn quick(&self) -> bool {
        self.flag("--quick")
    }
}

/// The nearest-rank `q`-quantile of `sorted` (ascending, not empty): the smallest value that at
/// least `q` of the values do not exceed. The median of an even count is the lower middle.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    assert!(!sorted.is_empty(), "a quantile of no values");
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `values` sorted, for [`quantile`]: durations, or seconds as `f64` (which have no total order
/// of their own).
pub fn sorted<T: PartialOrd>(mut values: Vec<T>) -> Vec<T> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values
}

/// `runs` timed calls of `f` after `warmup` untimed ones (a script cache, the allocator and the
/// connection's buffers warm), sorted.
pub async fn timed<F, Fut>(warmup: usize, runs: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..warmup {
        f().await;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        f().await;
        times.push(started.elapsed());
    }
    sorted(times)
}
