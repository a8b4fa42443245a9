//! Mirrors a cache into a destination as symlinks: `entries/<other>` as one
//! directory symlink each, `by-name/<name>` as relative links, and the active
//! entry as real directories whose files start as symlinks to the cache (so a
//! reader can start at once) and are replaced by local copies.
//!
//! Only `entries/` and `by-name/` are mirrored: builds, leases and lock files
//! never are (a mirrored lock symlink breaks `filelock`, which opens locks with
//! O_NOFOLLOW).

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::cache::destination::DestLayout;
use crate::cache::layout::CacheLayout;
use crate::cache::layout::is_short_fingerprint;
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

/// Points `link` at `target` unless it already does. A missing link is created
/// with one `symlink` call (atomic); a wrong one is replaced through a temporary
/// name; a real file or directory there (an earlier copy) is kept.
pub fn ensure_symlink(target: &Path, link: &Path) -> io::Result<()> {
    match std::os::unix::fs::symlink(target, link) {
        Ok(()) => return Ok(()),
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(err.kind(), format!("creating symlink {}: {err}", link.display())));
        }
        Err(_) => {}
    }
    match std::fs::read_link(link) {
        Ok(current) if current == target => Ok(()),
        Ok(_) => fsutil::replace_symlink(target, link),
        // Not a symlink: a copy landed here already.
        Err(_) => Ok(()),
    }
}

/// Mirrors every published entry but `active` as directory symlinks, and every
/// `by-name` link. `cache_root` must be absolute.
pub fn mirror_cache(cache: &CacheLayout, dest: &Path, active: &str) -> io::Result<()> {
    let dest_entries = DestLayout::new(dest).mirror().entries_dir();
    ensure_real_dir(dest)?;
    ensure_real_dir(&dest_entries)?;
    for entry in fs_err::read_dir(cache.entries_dir())?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Only what ferry publishes: a directory named by a fingerprint.
        if !is_short_fingerprint(&name) || name == active || !entry.path().is_dir() {
            continue;
        }
        ensure_symlink(&entry.path(), &dest_entries.join(&name))?;
    }
    let dest_by_name = DestLayout::new(dest).mirror().by_name_dir();
    ensure_real_dir(&dest_by_name)?;
    if let Ok(links) = std::fs::read_dir(cache.by_name_dir()) {
        for link in links.flatten() {
            // Only links of the form ferry writes (`../entries/<fp16>`) with a plain
            // name: a link anywhere else was planted, and is not passed on to the node.
            let name = link.file_name().to_string_lossy().into_owned();
            if let Ok(target) = std::fs::read_link(link.path())
                && CacheLayout::by_name_entry(&target).is_some()
                && crate::fsutil::untrusted::check_name(&name).is_ok()
                && !name.starts_with('.')
            {
                ensure_symlink(&target, &dest_by_name.join(&name))?;
            }
        }
    }
    Ok(())
}

/// Creates the directories the files (relative paths) live in, each once.
pub fn make_dirs(dest_root: &Path, relative_files: &[&str]) -> io::Result<()> {
    ensure_real_dir(dest_root)?;
    let mut made: HashSet<PathBuf> = HashSet::new();
    for relative in relative_files {
        if let Some(parent) = Path::new(relative).parent() {
            let mut dir = dest_root.to_path_buf();
            for component in parent.components() {
                dir.push(component);
                if made.insert(dir.clone()) {
                    ensure_real_dir(&dir)?;
                }
            }
        }
    }
    Ok(())
}

/// Links each file (relative path) to its source, in parallel: each link is a
/// round trip to the filesystem. Files already copied are kept.
pub fn link_files(source_root: &Path, dest_root: &Path, relative_files: &[&str]) -> io::Result<()> {
    relative_files
        .par_iter()
        .try_for_each(|relative| ensure_symlink(&source_root.join(relative), &dest_root.join(relative)))
}
