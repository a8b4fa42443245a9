//! The one liveness rule for leases, shard claims and builders, and the timeouts
//! it uses. The timeouts travel with the cache's layout (`CacheLayout::liveness`):
//! every process sharing a cache must agree on them, so they are a property of
//! the cache as this process sees it, not a global.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::fsutil;

/// How often a holder refreshes its heartbeat, unless the settings say otherwise.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A heartbeat not refreshed for this long, whose holder cannot be checked, is
/// dead (unless the settings say otherwise).
pub const EXPIRY: Duration = Duration::from_secs(120);

/// The liveness timeouts in effect for leases, shard claims and builders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// How often a holder refreshes its heartbeat.
    pub heartbeat: Duration,
    /// A heartbeat older than this, from a holder that cannot be checked, is dead.
    pub stale_age: Duration,
}

impl Default for Liveness {
    fn default() -> Liveness {
        Liveness { heartbeat: HEARTBEAT, stale_age: EXPIRY }
    }
}

impl Liveness {
    /// On this host the process table decides; elsewhere (or when the holder is
    /// unknown, e.g. a file being written right now) only a heartbeat younger
    /// than the stale age counts.
    pub fn holder_alive(&self, holder: Option<(&str, u32)>, heartbeat_age: Option<Duration>) -> bool {
        match holder {
            Some((host, pid)) if host == fsutil::host_name() => fsutil::process_alive(pid),
            _ => heartbeat_age.is_some_and(|age| age < self.stale_age),
        }
    }
}

/// How long ago the file's heartbeat (mtime) was, if it can be read.
pub fn heartbeat_age(path: &Path) -> Option<Duration> {
    Some(age(std::fs::symlink_metadata(path).ok()?.modified().ok()?))
}

/// How long ago `time` was. A time after now, stamped by a node whose clock runs
/// ahead, was no time ago: fresh, not unknown.
pub fn age(time: SystemTime) -> Duration {
    time.elapsed().unwrap_or_default()
}

/// How long ago a file time of `seconds` since the epoch (a `stat` field) was.
pub fn age_of_stamp(seconds: i64) -> Duration {
    age(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds.max(0) as u64))
}
