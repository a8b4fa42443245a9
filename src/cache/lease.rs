//! Leases: a live user of an entry (a build or a staging) holds one, and `gc`
//! never deletes an entry with a live lease.
//!
//! A lease is a file `leases/<fp16>/<host>.<pid>.<kind>` created exclusively and
//! kept fresh by a heartbeat thread that touches its mtime. It is live while its
//! heartbeat is recent, or while its holder is a running process on this host.
//! Works on NFS and Lustre: only `open(O_EXCL)`, `utimensat` and `unlink`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::cache::layout::CacheLayout;
use crate::fsutil;
use crate::ticker::Ticker;

/// How often a holder refreshes its lease, unless the settings say otherwise.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A lease not refreshed for this long, whose holder cannot be checked, is dead
/// (unless the settings say otherwise).
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

static LIVENESS: OnceLock<Liveness> = OnceLock::new();

/// Sets the timeouts from the settings, once, before any lease or claim is taken.
pub fn configure(liveness: Liveness) {
    let _ = LIVENESS.set(liveness);
}

/// The timeouts in effect: as configured, else the defaults.
pub fn liveness() -> Liveness {
    LIVENESS.get().copied().unwrap_or_default()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub host: String,
    pub pid: u32,
    pub kind: String,
    pub job_id: Option<String>,
    pub started_unix: u64,
}

/// A held lease; released (file removed) on drop.
pub struct Lease {
    path: PathBuf,
    _heartbeat: Ticker,
}

impl Lease {
    pub fn acquire(cache: &CacheLayout, short_fingerprint: &str, kind: &str) -> std::io::Result<Lease> {
        let dir = cache.leases(short_fingerprint);
        fsutil::create_dir_all(&dir)?;
        let info = LeaseInfo {
            host: fsutil::host_name(),
            pid: std::process::id(),
            kind: kind.to_string(),
            job_id: std::env::var("SLURM_JOB_ID").ok(),
            started_unix: SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        };
        let path = dir.join(format!("{}.{}.{}.{}", info.host, info.pid, kind, fsutil::unique_suffix()));
        fsutil::create_exclusive(&path, &serde_json::to_vec(&info).map_err(std::io::Error::other)?)?;
        let beating = path.clone();
        let heartbeat = Ticker::every(liveness().heartbeat, move || {
            let _ = fsutil::touch(&beating);
        });
        Ok(Lease { path, _heartbeat: heartbeat })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How long ago the file's heartbeat (mtime) was, if it can be read.
pub fn heartbeat_age(path: &Path) -> Option<Duration> {
    std::fs::metadata(path).ok()?.modified().ok()?.elapsed().ok()
}

/// The one liveness rule for leases, shard claims and builders: on this host the
/// process table decides; elsewhere (or when the holder is unknown, e.g. a file
/// being written right now) only a heartbeat younger than the stale age counts.
pub fn holder_alive(holder: Option<(&str, u32)>, heartbeat_age: Option<Duration>) -> bool {
    match holder {
        Some((host, pid)) if host == fsutil::host_name() => fsutil::process_alive(pid),
        _ => heartbeat_age.is_some_and(|age| age < liveness().stale_age),
    }
}

/// Every lease file on an entry with its holder and whether it is live: on this
/// host the process table decides; elsewhere, the heartbeat.
fn leases(cache: &CacheLayout, short_fingerprint: &str) -> Vec<(PathBuf, Option<LeaseInfo>, bool)> {
    let Ok(entries) = std::fs::read_dir(cache.leases(short_fingerprint)) else { return Vec::new() };
    entries
        .flatten()
        .map(|entry| {
            let path = entry.path();
            let info: Option<LeaseInfo> =
                std::fs::read(&path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
            let alive = holder_alive(info.as_ref().map(|i| (i.host.as_str(), i.pid)), heartbeat_age(&path));
            (path, info, alive)
        })
        .collect()
}

/// The live leases on an entry.
pub fn live_leases(cache: &CacheLayout, short_fingerprint: &str) -> Vec<LeaseInfo> {
    leases(cache, short_fingerprint)
        .into_iter()
        .filter(|(_, _, alive)| *alive)
        .filter_map(|(_, info, _)| info)
        .collect()
}

/// Removes the lease files of dead holders; returns how many.
pub fn remove_dead_leases(cache: &CacheLayout, short_fingerprint: &str) -> usize {
    leases(cache, short_fingerprint)
        .into_iter()
        .filter(|(_, _, alive)| !alive)
        .filter(|(path, _, _)| std::fs::remove_file(path).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_is_live_while_held_and_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CacheLayout::new(dir.path());
        let lease = Lease::acquire(&cache, "abcd", "stage").unwrap();
        let live = live_leases(&cache, "abcd");
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].pid, std::process::id());
        drop(lease);
        assert!(live_leases(&cache, "abcd").is_empty());
    }

    #[test]
    fn lease_of_a_dead_process_on_this_host_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CacheLayout::new(dir.path());
        let leases = cache.leases("abcd");
        std::fs::create_dir_all(&leases).unwrap();
        // A pid that cannot exist (above pid_max).
        let info = LeaseInfo {
            host: fsutil::host_name(),
            pid: 999_999_999,
            kind: "stage".into(),
            job_id: None,
            started_unix: 0,
        };
        std::fs::write(leases.join("x"), serde_json::to_vec(&info).unwrap()).unwrap();
        assert!(live_leases(&cache, "abcd").is_empty());
        assert!(leases.join("x").exists(), "looking does not remove");
        assert_eq!(remove_dead_leases(&cache, "abcd"), 1);
        assert!(!leases.join("x").exists());
    }
}
