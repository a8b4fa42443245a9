//! A staging destination on a node's local disk: where its entries, names and
//! ferry's own files lie, and the temporary names a killed stage leaves behind.

use std::path::{Path, PathBuf};

use crate::cache::layout::EntryLayout;

/// Every path of a staging destination:
///
/// ```text
/// <dest>/entries/<fp16>/       a staged copy (a real directory) or a symlink into the cache
/// <dest>/by-name/<name>        -> ../entries/<fp16>
/// <dest>/.ferry/stage.lock     held while a stage (or gc) works here
/// <dest>/.ferry/stage-<id>.json, stage-<id>.log, files-<id>.txt, trash/
/// ```
#[derive(Debug, Clone)]
pub struct DestLayout {
    root: PathBuf,
}

impl DestLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn entries_dir(&self) -> PathBuf {
        self.root.join("entries")
    }

    /// The staged entry with this short fingerprint (or drop-in id).
    pub fn entry(&self, short: &str) -> EntryLayout {
        EntryLayout::new(self.entries_dir().join(short))
    }

    pub fn by_name_dir(&self) -> PathBuf {
        self.root.join("by-name")
    }

    pub fn by_name(&self, name: &str) -> PathBuf {
        self.by_name_dir().join(name)
    }

    /// ferry's own files in the destination, never inside an entry.
    pub fn control_dir(&self) -> PathBuf {
        self.root.join(".ferry")
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
