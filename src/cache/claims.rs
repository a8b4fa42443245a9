//! Claims on shards (and on publishing) shared by every task building one entry,
//! on one node or many: a claim is a file created with `O_EXCL`, kept fresh by a
//! heartbeat, and taken over when its owner is provably dead (same host, pid
//! gone) or its heartbeat is stale. Only exclusive create, rename and unlink are
//! used, which NFS and Lustre make atomic; never `flock`.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::cache::liveness::{self, Liveness};
use crate::fsutil;
use crate::fsutil::untrusted;
use crate::ticker::Ticker;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    pub job_id: Option<String>,
    pub task: Option<usize>,
}

impl Owner {
    pub fn me() -> Owner {
        Owner {
            host: fsutil::whoami().host.clone(),
            pid: fsutil::whoami().pid,
            job_id: fsutil::whoami().job_id.clone(),
            task: slurm_task().map(|(procid, _)| procid),
        }
    }
}

/// This task's place among `srun`'s tasks: (`SLURM_PROCID`, `SLURM_NTASKS`).
pub fn slurm_task() -> Option<(usize, usize)> {
    let read = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<usize>().ok());
    match (read("SLURM_PROCID"), read("SLURM_NTASKS")) {
        (Some(procid), Some(ntasks)) if ntasks > 1 && procid < ntasks => Some((procid, ntasks)),
        _ => None,
    }
}

/// The claims this process holds, refreshed by one heartbeat thread.
pub struct Claims {
    owner: Vec<u8>,
    held: Arc<Mutex<HashSet<PathBuf>>>,
    liveness: Liveness,
    _heartbeat: Ticker,
}

/// A held claim, released (its file removed) when dropped.
pub struct ClaimGuard<'a> {
    claims: &'a Claims,
    path: PathBuf,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        self.claims.held.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Claims {
    /// Claims kept fresh, and others' judged, by the cache's liveness timeouts.
    pub fn new(liveness: Liveness) -> Claims {
        let held: Arc<Mutex<HashSet<PathBuf>>> = Arc::default();
        let touched = held.clone();
        let heartbeat = Ticker::every(liveness.heartbeat, move || {
            let paths: Vec<PathBuf> = touched.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
            for path in paths {
                let _ = fsutil::touch(&path);
            }
        });
        let owner = serde_json::to_vec(&Owner::me()).unwrap_or_default();
        Claims { owner, held, liveness, _heartbeat: heartbeat }
    }

    /// Claims `path` unless a live owner holds it; takes it over from a dead one.
    pub fn try_claim(&self, path: &Path) -> io::Result<Option<ClaimGuard<'_>>> {
        if !fsutil::create_exclusive(path, &self.owner)? {
            if !owner_is_dead(path, self.liveness) {
                return Ok(None);
            }
            // Rename first: of several tasks taking over at once, one rename wins.
            let parked = path.with_extension(format!("dead.{}.{}", std::process::id(), fsutil::unique_suffix()));
            if std::fs::rename(path, &parked).is_err() {
                return Ok(None);
            }
            let _ = std::fs::remove_file(&parked);
            tracing::info!(claim = %path.display(), "taking over from a dead owner");
            if !fsutil::create_exclusive(path, &self.owner)? {
                return Ok(None);
            }
        }
        self.held.lock().unwrap_or_else(|e| e.into_inner()).insert(path.to_path_buf());
        Ok(Some(ClaimGuard { claims: self, path: path.to_path_buf() }))
    }
}

/// Whether the claim's owner is provably gone: on this host its pid no longer
/// exists; elsewhere its heartbeat is older than the stale age.
pub fn owner_is_dead(path: &Path, liveness: Liveness) -> bool {
    let Some(age) = liveness::heartbeat_age(path) else { return false };
    let owner: Option<Owner> =
        untrusted::read_regular(path, 64 << 10).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
    !liveness.holder_alive(owner.as_ref().map(|o| (o.host.as_str(), o.pid)), Some(age))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::liveness::EXPIRY;
    use std::time::SystemTime;

    #[test]
    fn live_claim_is_never_stolen_and_dead_one_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.000001");
        let claims = Claims::new(Liveness::default());
        let guard = claims.try_claim(&path).unwrap().expect("free claim");
        // Our own live claim: another claimer (here, the same process) cannot take it.
        assert!(claims.try_claim(&path).unwrap().is_none());
        drop(guard);
        assert!(!path.exists(), "released on drop");

        // A claim left by a dead process on this host.
        let dead = Owner { host: fsutil::host_name(), pid: 999_999_999, job_id: None, task: None };
        std::fs::write(&path, serde_json::to_vec(&dead).unwrap()).unwrap();
        assert!(owner_is_dead(&path, Liveness::default()));
        let taken = claims.try_claim(&path).unwrap();
        assert!(taken.is_some(), "a dead owner's claim is taken over");

        // A claim from another host with a fresh heartbeat is live; a stale one is dead.
        drop(taken);
        let remote = Owner { host: "elsewhere".into(), pid: 1, job_id: None, task: None };
        std::fs::write(&path, serde_json::to_vec(&remote).unwrap()).unwrap();
        assert!(!owner_is_dead(&path, Liveness::default()));
        assert!(claims.try_claim(&path).unwrap().is_none());
        let old = SystemTime::now() - EXPIRY - std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(owner_is_dead(&path, Liveness::default()));
        assert!(claims.try_claim(&path).unwrap().is_some());
    }
}
