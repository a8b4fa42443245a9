//! Leases: a live user of an entry (a build or a staging) holds one, and `gc`
//! never deletes an entry with a live lease.
//!
//! A lease is a file `leases/<fp16>/<host>.<pid>.<kind>` created exclusively and
//! kept fresh by a heartbeat thread that touches its mtime. It is live while its
//! heartbeat is recent, or while its holder is a running process on this host.
//! Works on NFS and Lustre: only `open(O_EXCL)`, `utimensat` and `unlink`.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::layout::{CacheLayout, LEASES_DIR};
use crate::cache::liveness;
use crate::fsutil;
use crate::fsutil::untrusted::Dir;
use crate::ticker::Ticker;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub host: String,
    pub pid: u32,
    pub kind: String,
    pub job_id: Option<String>,
    pub started_unix: u64,
}

/// The largest lease file read; ferry's are about 150 bytes.
const MAX_LEASE_BYTES: u64 = 64 << 10;

/// A held lease; released (file removed) on drop.
pub struct Lease {
    /// `leases/<fp16>`, opened without following symlinks: the heartbeat and the
    /// release go through it, so a directory swapped for a symlink is never touched.
    dir: Arc<Dir>,
    name: String,
    _heartbeat: Ticker,
}

impl Lease {
    pub fn acquire(cache: &CacheLayout, short_fingerprint: &str, kind: &str) -> std::io::Result<Lease> {
        fsutil::create_dir_all(cache.root())?;
        let info = LeaseInfo {
            host: fsutil::whoami().host.clone(),
            pid: fsutil::whoami().pid,
            kind: kind.to_string(),
            job_id: fsutil::whoami().job_id.clone(),
            started_unix: fsutil::now_unix(),
        };
        let name = format!("{}.{}.{}.{}", info.host, info.pid, kind, fsutil::unique_suffix());
        let bytes = serde_json::to_vec(&info).map_err(std::io::Error::other)?;
        // Made again if gc on another node removes the emptied directory between
        // its creation and the file's (see `remove_lease_dir`).
        let dir = fsutil::retry_while_settling(|| {
            let dir = Dir::open(cache.root())?.create_dir(LEASES_DIR)?.create_dir(short_fingerprint)?;
            match dir.create_new(&name, &bytes)? {
                true => Ok(dir),
                false => Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} exists already", dir.display_path(&name).display()),
                )),
            }
        })?;
        let dir = Arc::new(dir);
        let (beating, beating_name) = (dir.clone(), name.clone());
        let heartbeat = Ticker::every(cache.liveness().heartbeat, move || {
            let _ = beating.touch(&beating_name, false);
        });
        Ok(Lease { dir, name, _heartbeat: heartbeat })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.dir.remove_file(&self.name);
    }
}

/// One lease file: its name, its holder if readable, and whether it is live.
struct LeaseFile {
    name: String,
    info: Option<LeaseInfo>,
    alive: bool,
}

/// An entry's lease directory and every lease file in it. The directory is opened
/// without following symlinks, and each file is read only if regular and small.
/// An entry nobody ever leased has no directory: `None`.
fn leases(cache: &CacheLayout, short_fingerprint: &str) -> std::io::Result<Option<(Dir, Vec<LeaseFile>)>> {
    let root = match Dir::open(cache.root()) {
        Ok(root) => root,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let Some(dir) = root.open_dir_if_exists(Path::new(LEASES_DIR).join(short_fingerprint))? else {
        return Ok(None);
    };
    let files = dir
        .list()?
        .into_iter()
        .map(|item| {
            let info: Option<LeaseInfo> =
                dir.read(&item.name, MAX_LEASE_BYTES).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
            let alive = match dir.stat(&item.name) {
                Ok(stat) => {
                    let age = liveness::age_of_stamp(stat.st_mtime);
                    cache.liveness().holder_alive(info.as_ref().map(|i| (i.host.as_str(), i.pid)), Some(age))
                }
                // Gone since the listing: released.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
                // Cannot tell (a network filesystem's stale handle): whoever is unsure must not delete.
                Err(_) => true,
            };
            LeaseFile { name: item.name, info, alive }
        })
        .collect();
    Ok(Some((dir, files)))
}

/// The live leases on an entry, each with its holder where its file could be
/// read: a live lease whose file cannot be read right now still counts. An error
/// (a symlink where the lease directory should be) means nobody can tell: callers
/// about to delete keep the entry.
pub fn live_leases(cache: &CacheLayout, short_fingerprint: &str) -> std::io::Result<Vec<Option<LeaseInfo>>> {
    let Some((_, files)) = leases(cache, short_fingerprint)? else { return Ok(Vec::new()) };
    Ok(files.into_iter().filter(|f| f.alive).map(|f| f.info).collect())
}

/// Removes the lease files of dead holders; returns how many. Only names inside
/// the lease directory are removed, never what a symlink there points at.
pub fn remove_dead_leases(cache: &CacheLayout, short_fingerprint: &str) -> usize {
    let Ok(Some((dir, files))) = leases(cache, short_fingerprint) else { return 0 };
    files.into_iter().filter(|f| !f.alive).filter(|f| dir.remove_file(&f.name).is_ok()).count()
}

/// Removes an entry's lease directory if it is empty.
pub fn remove_lease_dir(cache: &CacheLayout, short_fingerprint: &str) {
    if let Ok(root) = Dir::open(cache.root())
        && let Ok(Some(leases)) = root.open_dir_if_exists(LEASES_DIR)
    {
        let _ = leases.remove_empty_dir(short_fingerprint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_is_live_while_held_and_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CacheLayout::new(dir.path());
        let lease = Lease::acquire(&cache, "abcd", "stage").unwrap();
        let live = live_leases(&cache, "abcd").unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].as_ref().map(|holder| holder.pid), Some(std::process::id()));
        drop(lease);
        assert!(live_leases(&cache, "abcd").unwrap().is_empty());
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
        assert!(live_leases(&cache, "abcd").unwrap().is_empty());
        assert!(leases.join("x").exists(), "looking does not remove");
        assert_eq!(remove_dead_leases(&cache, "abcd"), 1);
        assert!(!leases.join("x").exists());
    }
}
