//! An input file as it was when resolved (path, size, mtime): the key of the
//! content-hash memo and a record in the manifest.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

/// One input file as it was when resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: PathBuf,
    pub size: u64,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl InputFile {
    /// The file's size and mtime now; the error carries no path (callers add it).
    pub fn stat(path: &Path) -> std::io::Result<InputFile> {
        let meta = std::fs::metadata(path)?;
        let mtime = meta.modified()?;
        let mtime_ns = match mtime.duration_since(UNIX_EPOCH) {
            Ok(after) => after.as_nanos() as i128,
            Err(before) => -(before.duration().as_nanos() as i128),
        };
        Ok(InputFile { path: path.to_path_buf(), size: meta.len(), mtime_ns })
    }
}
