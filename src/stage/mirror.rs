//! Mirrors a cache into a destination as symlinks: `entries/<other>` as one
//! directory symlink each, `by-name/<name>` as relative links, and the active
//! entry as real directories whose files start as symlinks to the cache (so a
//! reader can start at once) and are replaced by local copies.
//!
//! Only `entries/` and `by-name/` are mirrored: builds, leases and lock files
//! never are (a mirrored lock symlink breaks `filelock`, which opens locks with
//! O_NOFOLLOW).

use std::io;
use std::path::{Path, PathBuf};

use crate::cache::layout::CacheLayout;
use crate::fsutil;

/// Makes `path` a real directory, replacing a symlink that stands there (from a
/// previous mirror in which this entry was not the active one). Never follows
/// a symlink, so nothing is created outside the destination.
pub fn ensure_real_dir(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => fs_err::remove_file(path)?,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && path.symlink_metadata().is_ok_and(|m| m.is_dir()) => {
            Ok(())
        }
        Err(err) => Err(io::Error::new(err.kind(), format!("creating {}: {err}", path.display()))),
    }
}

/// Points `link` at `target` unless it already does.
pub fn ensure_symlink(target: &Path, link: &Path) -> io::Result<()> {
    if std::fs::read_link(link).is_ok_and(|current| current == target) {
        return Ok(());
    }
    if link.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        // A real directory here is a previously active entry: keep its copies.
        return Ok(());
    }
    fsutil::replace_symlink(target, link)
}

/// Mirrors every published entry but `active` as directory symlinks, and every
/// `by-name` link. `cache_root` must be absolute.
pub fn mirror_cache(cache: &CacheLayout, dest: &Path, active: &str) -> io::Result<()> {
    let dest_entries = dest.join("entries");
    ensure_real_dir(dest)?;
    ensure_real_dir(&dest_entries)?;
    for entry in std::fs::read_dir(cache.entries_dir())?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == active || !entry.path().is_dir() {
            continue;
        }
        ensure_symlink(&entry.path(), &dest_entries.join(&name))?;
    }
    let dest_by_name = dest.join("by-name");
    ensure_real_dir(&dest_by_name)?;
    if let Ok(links) = std::fs::read_dir(cache.by_name_dir()) {
        for link in links.flatten() {
            if let Ok(target) = std::fs::read_link(link.path()) {
                ensure_symlink(&target, &dest_by_name.join(link.file_name()))?;
            }
        }
    }
    Ok(())
}

/// Creates the active entry's directories and a symlink to the cache for each
/// file not yet copied. Returns each file's local path.
pub fn mirror_files(source_root: &Path, dest_root: &Path, relative_files: &[String]) -> io::Result<Vec<PathBuf>> {
    ensure_real_dir(dest_root)?;
    let mut local = Vec::with_capacity(relative_files.len());
    for relative in relative_files {
        let dest_file = dest_root.join(relative);
        let mut dir = dest_root.to_path_buf();
        if let Some(parent) = Path::new(relative).parent() {
            for component in parent.components() {
                dir.push(component);
                ensure_real_dir(&dir)?;
            }
        }
        let is_copied = dest_file.symlink_metadata().is_ok_and(|m| m.file_type().is_file());
        if !is_copied {
            ensure_symlink(&source_root.join(relative), &dest_file)?;
        }
        local.push(dest_file);
    }
    Ok(local)
}
