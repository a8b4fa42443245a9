//! Before the first byte is copied: enough free space, and the destination's
//! stage lock (one stager per destination).

use std::fs::File;
use std::path::Path;

use crate::fsutil;

use super::{StageError, state};

/// Checks `needed` bytes against the free space on the destination's filesystem.
pub(super) fn check_free(dest: &Path, needed: u64) -> Result<(), StageError> {
    let mut probe = dest.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            break;
        }
    }
    let available = fsutil::available_bytes(&probe).map_err(StageError::io("checking free space on", &probe))?;
    if needed > available {
        return Err(StageError::NoSpace {
            dest: dest.to_path_buf(),
            needed: bytesize::ByteSize(needed),
            available: bytesize::ByteSize(available),
        });
    }
    Ok(())
}

/// Takes the destination's stage lock, waiting for another stager if needed.
/// Returns the lock (held until dropped) and whether it had to wait.
pub fn lock_destination(dest: &Path) -> Result<(File, bool), StageError> {
    let control = state::control_dir(dest);
    std::fs::create_dir_all(&control).map_err(StageError::io("creating", &control))?;
    let path = state::lock_path(dest);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(StageError::io("opening", &path))?;
    use rustix::fs::{FlockOperation, flock};
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok((file, false)),
        Err(rustix::io::Errno::WOULDBLOCK) => {
            tracing::info!(dest = %dest.display(), "another ferry stage is staging here; waiting for it");
            flock(&file, FlockOperation::LockExclusive).map_err(|e| StageError::Io {
                doing: "locking",
                path,
                source: e.into(),
            })?;
            Ok((file, true))
        }
        Err(errno) => Err(StageError::Io { doing: "locking", path, source: errno.into() }),
    }
}
