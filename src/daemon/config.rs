//! What the daemon is told at start, and what it counts while it runs.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::cache::layout::CacheLayout;

/// What the server needs to know.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub cache: CacheLayout,
    /// The `ferry` executable stagings run.
    pub ferry: PathBuf,
    /// A connection silent for this long is closed.
    pub idle_timeout: Duration,
    pub limits: DaemonLimits,
}

/// What one user may ask of the daemon at once, and how long it waits for others.
#[derive(Debug, Clone)]
pub struct DaemonLimits {
    /// Open connections per uid; more are answered with an error and closed.
    pub connections_per_user: usize,
    /// Stagings running per uid.
    pub stagings_per_user: usize,
    /// The longest a `wait` request waits before answering that the staging still runs.
    pub longest_wait: Duration,
    /// The longest a `status` request waits for the cache's filesystem.
    pub status_deadline: Duration,
    /// Finished stagings are forgotten after this long...
    pub finished_kept_for: Duration,
    /// ...and beyond this many per user.
    pub finished_kept_per_user: usize,
}

impl Default for DaemonLimits {
    fn default() -> DaemonLimits {
        DaemonLimits {
            connections_per_user: 64,
            stagings_per_user: 4,
            longest_wait: Duration::from_secs(3600),
            status_deadline: Duration::from_secs(10),
            finished_kept_for: Duration::from_secs(600),
            finished_kept_per_user: 32,
        }
    }
}

/// Counters exported as Prometheus metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub bad_requests: AtomicU64,
    pub stagings_started: AtomicU64,
    pub stagings_failed: AtomicU64,
    pub bytes_staged: AtomicU64,
    /// Stagings that found every file already on the node.
    pub stagings_already_complete: AtomicU64,
    /// Connections refused because their user had too many open.
    pub connections_refused: AtomicU64,
}
