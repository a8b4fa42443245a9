//! A staging destination on a node's local disk: where its entries, names and
//! ferry's own files lie, and the temporary names a killed stage leaves behind.

use std::path::Path;

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
