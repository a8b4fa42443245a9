//! A staging destination on a node's local disk: where its entries, names and
//! ferry's own files lie, and the temporary names a killed stage leaves behind.

use std::path::{Path, PathBuf};

use crate::cache::layout::CacheLayout;

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
        self.0.root().join(".ferry")
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
        self.control_dir().join("trash")
    }
}

/// Marks temporary names, so a resumed stage can remove what a killed one left.
pub const TEMP_MARK: &str = ".ferry-tmp-";

/// Removes temporary files a killed stage left in `dir` and below.
pub fn remove_stale_temps(dir: &Path) {
    for entry in walkdir::WalkDir::new(dir).follow_links(false).into_iter().flatten() {
        if entry.file_type().is_file() && entry.file_name().to_string_lossy().contains(TEMP_MARK) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
