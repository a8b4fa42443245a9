//! A staging destination on a node's local disk: where its entries, names and
//! ferry's own files lie, and the temporary names a killed stage leaves behind.

use std::path::{Path, PathBuf};

use crate::cache::layout::CacheLayout;

/// ferry's own directory in a destination.
pub const CONTROL_DIR: &str = ".ferry";

/// Every path of a staging destination. Its `entries/` and `by-name/` mirror the
/// cache's (`mirror()`); ferry's own files are in `.ferry/`:
///
/// ```text
/// <dest>/entries/<fp16>/       a staged copy (a real directory) or a symlink into the cache
/// <dest>/by-name/<name>        -> ../entries/<fp16>
/// <dest>/.ferry/stage.lock     held while a stage (or gc) works here
/// <dest>/.ferry/stage-<id>.json, stage-<id>.log, files-<id>.txt, trash/
/// ```
#[derive(Debug, Clone)]
pub struct DestLayout(CacheLayout);

impl DestLayout {
    pub fn new(root: impl Into<PathBuf>) -> DestLayout {
        DestLayout(CacheLayout::new(root))
    }

    /// `entries/` and `by-name/`, laid out as in the cache.
    pub fn mirror(&self) -> &CacheLayout {
        &self.0
    }

    /// ferry's own files in the destination, never inside an entry.
    pub fn control_dir(&self) -> PathBuf {
        self.0.root().join(CONTROL_DIR)
    }

    pub fn state_file(&self, id: &str) -> PathBuf {
        self.control_dir().join(format!("stage-{id}.json"))
    }

    pub fn lock_file(&self) -> PathBuf {
        self.control_dir().join("stage.lock")
    }

    pub fn log_file(&self, id: &str) -> PathBuf {
        self.control_dir().join(format!("stage-{id}.log"))
    }

    /// The file list a `--background` drop-in stage hands to its detached copy.
    pub fn files_list(&self, id: &str) -> PathBuf {
        self.control_dir().join(format!("files-{id}.txt"))
    }

    /// Where gc moves evicted copies before removing them.
    pub fn trash_dir(&self) -> PathBuf {
        self.control_dir().join(crate::cache::layout::TRASH_DIR)
    }
}

/// The destination's stage lock: an exclusive `flock` on `.ferry/stage.lock`, held
/// by one stage (or gc) at a time. The destination is node-local, and the kernel
/// releases the lock when its holder dies. Released on drop.
#[derive(Debug)]
pub struct DestinationLock {
    _file: std::fs::File,
    /// Whether another stager held it first and this one waited.
    pub waited: bool,
}

/// Takes the destination's lock. With `wait`, waits for a holder to finish;
/// without, returns `Ok(None)` while someone holds it.
pub fn lock(dest: &Path, wait: bool) -> std::io::Result<Option<DestinationLock>> {
    use rustix::fs::{FlockOperation, flock};
    use std::os::unix::fs::OpenOptionsExt;
    let layout = DestLayout::new(dest);
    crate::fsutil::create_dir_all(&layout.control_dir())?;
    let path = layout.lock_file();
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|err| std::io::Error::new(err.kind(), format!("opening {}: {err}", path.display())))?;
    let failed = |errno: rustix::io::Errno| {
        let err = std::io::Error::from(errno);
        std::io::Error::new(err.kind(), format!("locking {}: {err}", path.display()))
    };
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(DestinationLock { _file: file, waited: false })),
        Err(rustix::io::Errno::WOULDBLOCK) if wait => {
            tracing::info!(dest = %dest.display(), "another ferry stage is staging here; waiting for it");
            flock(&file, FlockOperation::LockExclusive).map_err(failed)?;
            Ok(Some(DestinationLock { _file: file, waited: true }))
        }
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(errno) => Err(failed(errno)),
    }
}

/// Removes temporary files a killed stage left in `dir` and below.
pub fn remove_stale_temps(dir: &Path) {
    for entry in walkdir::WalkDir::new(dir).follow_links(false).into_iter().flatten() {
        if entry.file_type().is_file() && entry.file_name().to_string_lossy().starts_with(crate::fsutil::TEMP_PREFIX) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
