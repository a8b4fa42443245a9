//! Before the first byte is copied: enough free space, and the destination's
//! stage lock (one stager per destination).

use std::path::Path;

use crate::cache::destination::{self, DestinationLock};
use crate::errors::IoError;
use crate::fsutil;

use super::StageError;

/// Checks `needed` bytes against the free space on the destination's filesystem.
pub(super) fn check_free(dest: &Path, needed: u64) -> Result<(), StageError> {
    let mut probe = dest.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            break;
        }
    }
    let available = fsutil::available_bytes(&probe).map_err(IoError::at("checking free space on", &probe))?;
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
pub fn lock_destination(dest: &Path) -> Result<DestinationLock, StageError> {
    let locked = destination::lock(dest, true).map_err(IoError::at("locking", dest))?;
    // Waiting never returns "held by another".
    locked.ok_or_else(|| IoError::at("locking", dest)(std::io::ErrorKind::WouldBlock.into()).into())
}
